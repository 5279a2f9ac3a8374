"""Config files and overrides: YAML -> validated, typed task configs, with errors that name the key."""

from __future__ import annotations

import contextlib
import typing
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import click
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from attnkit.errors import ConfigError
from attnkit.io import decode_utf8

__all__ = [
    "ConfigError",
    "StrictModel",
    "UserPath",
    "allowed_keys",
    "expand_dotted",
    "load_yaml",
    "merge",
    "parse_overrides",
    "set_dotted",
    "validate_config",
]


class StrictModel(BaseModel):
    """The base of every config (model, data, training): pydantic, rejects unknown keys and
    validates on assignment.

    A subclass whose defaults or bounds differ from its base's says so in ``field_overrides`` (field name ->
    a default, a ``Field(...)`` of other bounds or another default, or ``Annotated[type, Field(...)]``
    narrowing the type): the field itself is declared once, in the class that introduces it
    (``tests/test_config_fields.py`` fails on a field declared again along an inheritance line).
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    field_overrides: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        own = cls.__dict__.get("field_overrides")
        if not own:
            return
        fields = cls.model_fields
        for name, value in own.items():
            if name not in fields:
                raise TypeError(f"{cls.__name__}.field_overrides: {name!r} is not an inherited field")
            if typing.get_origin(value) is typing.Annotated:
                value = FieldInfo.from_annotation(value)
            elif not isinstance(value, FieldInfo):
                value = Field(value)
            fields[name] = FieldInfo.merge_field_infos(fields[name], value)
        cls.model_rebuild(force=True)


# What reading YAML text can raise: a syntax error, a tag's constructor failing on its value
# (``!!int x``: ValueError, ``!!bool x``: KeyError), or very deep nesting (``[[[[...``: RecursionError).
_YAML_ERRORS = (yaml.YAMLError, ValueError, LookupError, TypeError, OverflowError, RecursionError)


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = decode_utf8(path.read_bytes(), path, error=ConfigError, fix="save the config file as UTF-8")
    try:
        data = yaml.safe_load(text) or {}
    except _YAML_ERRORS as err:
        raise ConfigError(f"{path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys, got {type(data).__name__}")
    return data


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["model.d_model=64", "--optim.lr", "1e-3", "--trainer.max_epochs=2"]`` -> a nested dict.

    Values are parsed as YAML scalars (``64`` -> int, ``1e-3`` -> float, ``null`` -> None).
    """
    out: dict[str, Any] = {}
    items = list(items)
    i = 0
    while i < len(items):
        item = items[i]
        key = item[2:] if item.startswith("--") else item
        if "=" in key:
            key, raw = key.split("=", 1)
        elif item.startswith("--") and i + 1 < len(items) and not items[i + 1].startswith("--"):
            raw = items[i + 1]
            i += 1
        else:
            raise ConfigError(f"cannot read override {item!r}: write key=value or --key value (e.g. optim.lr=1e-3)")
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} has an empty key")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except _YAML_ERRORS:  # not YAML, or a tag that does not fit its value: the text as written
            value = raw
        # YAML 1.1 reads "1e-3" as a string: accept it as a float.
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        set_dotted(out, key.replace("-", "_"), value, source=f"override {item!r}")
        i += 1
    return out


def set_dotted(tree: dict[str, Any], key: str, value: Any, *, source: str | None = None) -> dict[str, Any]:
    """Set the dotted ``key`` of the nested dict ``tree`` to ``value`` (in place; returns ``tree``):
    ``set_dotted({}, "model.d_model", 64)`` -> ``{"model": {"d_model": 64}}``. Missing sections are
    created; a value already at ``key`` is replaced. A section on the way that holds a value, not a
    mapping, is a :class:`ConfigError` ("``source`` conflicts with another override of ...";
    ``source`` defaults to the key)."""
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{source or repr(key)} conflicts with another override of {part!r}")
    node[parts[-1]] = value
    return tree


def expand_dotted(mapping: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys to nested sections, the one way attnkit reads them (``attnkit.train(**overrides)``,
    search spaces, :func:`parse_overrides`): ``{"model.d_model": 64, "optim": {"lr": 1e-3}}`` ->
    ``{"model": {"d_model": 64}, "optim": {"lr": 1e-3}}``. Keys are applied in order with
    :func:`merge`: a later key wins, and a section given twice (``"model.x"`` and ``"model"``) is merged."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        out = merge(out, set_dotted({}, key, value))
    return out


class UserPath(click.Path):
    """``click.Path`` for paths the user types: one the file system cannot hold (an embedded NUL
    byte, where ``os.stat`` raises ``ValueError``) is a usage error naming it, not a traceback."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except ValueError as err:
            self.fail(f"{value!r} is not a usable path ({err})", param, ctx)


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``update`` wins."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def allowed_keys(model: type, loc: tuple[Any, ...]) -> list[str] | None:
    """Field names of the (nested) config class at ``loc``, or None when unknown."""
    cls: Any = model
    for part in loc:
        fields = _fields(cls)
        if fields is None or part not in fields:
            return None
        cls = fields[part]
    fields = _fields(cls)
    return sorted(fields) if fields is not None else None


def _fields(cls: Any) -> dict[str, Any] | None:
    for arg in typing.get_args(cls) or (cls,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return {name: f.annotation for name, f in arg.model_fields.items()}
    return None


M = TypeVar("M", bound=BaseModel)


def validate_config(config_cls: type[M], data: dict[str, Any], *, source: str = "config") -> M:
    """Validate ``data`` into ``config_cls``; on failure a :class:`ConfigError` listing every bad key."""
    try:
        return config_cls.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            loc = tuple(e["loc"])
            key = ".".join(str(p) for p in loc) or "(top level)"
            if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
                allowed = allowed_keys(config_cls, loc[:-1])
                hint = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
                lines.append(f"  {key}: unknown key{hint}")
            else:
                msg = e["msg"].removeprefix("Value error, ")
                got = f" (got {e['input']!r})" if e["type"] not in ("value_error", "missing") else ""
                lines.append(f"  {key}: {msg}{got}")
        raise ConfigError(f"invalid {source}:\n" + "\n".join(lines)) from None
