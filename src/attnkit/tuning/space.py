"""Search spaces: a YAML file over the training config's keys -> Optuna distributions.

A space maps dotted config keys (``optim.lr``, ``model.d_model``) -- or nested sections -- to a
range or a list of choices::

    optim.lr: {low: 1.0e-4, high: 1.0e-2, log: true}   # log-uniform float
    model.num_layers: {low: 1, high: 3}                 # int (both bounds ints)
    model.dim_feedforward: {low: 32, high: 128, step: 32}
    model.dropout: {low: 0.0, high: 0.3}                # uniform float
    model.d_model: [16, 32, 64]                         # categorical
    trainer.batch_size: {choices: [32, 64, 128]}        # categorical, explicit form

``type: float | int | categorical`` may be given; otherwise it is inferred (choices ->
categorical, two int bounds -> int, else float). Every key and value is checked against the
task's config before any trial starts (:meth:`SearchSpace.check`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from attnkit.config import allowed_keys, expand_dotted, merge
from attnkit.errors import ConfigError

__all__ = ["Param", "SearchSpace", "load_space"]

SPEC_KEYS = frozenset({"type", "low", "high", "log", "step", "choices"})
FORBIDDEN = {"output_dir": "trials are written to the study folder", "name": "each trial's run is named by its number"}
MAX_COMBINATIONS = 4096  # joint checks of the keys of one section enumerate at most this many combinations


@dataclass(frozen=True)
class Param:
    """One searched config key: float / int over ``[low, high]`` (``log``, ``step``) or categorical ``choices``."""

    key: str
    kind: Literal["float", "int", "categorical"]
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()
    where: str = field(default="", compare=False)  # "space.yaml:3" for messages

    def suggest(self, trial: Any) -> Any:
        """Sample this key from an Optuna trial (the parameter is named by the dotted key)."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        assert self.low is not None and self.high is not None  # a float / int range
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), step=self.step, log=self.log)

    def candidates(self) -> list[Any]:
        """Values checked against the config up front: every choice, the ints of a short range, else both bounds."""
        if self.kind == "categorical":
            return list(self.choices)
        assert self.low is not None and self.high is not None  # a float / int range
        if self.kind == "int":
            step = int(self.step or 1)
            values = range(int(self.low), int(self.high) + 1, step)
            if len(values) <= 64 and not self.log:
                return list(values)
            return [int(self.low), int(self.high)]
        return [float(self.low), float(self.high)]

    def describe(self) -> str:
        if self.kind == "categorical":
            return "one of " + ", ".join(str(c) for c in self.choices)
        scale = "log-uniform " if self.log else ""
        step = f" step {self.step}" if self.step else ""
        return f"{scale}{self.kind} in [{self.low}, {self.high}]{step}"

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "categorical":
            return {"type": "categorical", "choices": list(self.choices)}
        out: dict[str, Any] = {"type": self.kind, "low": self.low, "high": self.high}
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = self.step
        return out


@dataclass(frozen=True)
class SearchSpace:
    """The searched keys, in file order, and where they came from."""

    params: tuple[Param, ...]
    source: str = "search space"

    @property
    def keys(self) -> list[str]:
        return [p.key for p in self.params]

    def sample(self, trial: Any) -> dict[str, Any]:
        """``{dotted key: value}`` for one trial."""
        return {p.key: p.suggest(trial) for p in self.params}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON/YAML), the form stored with a study and accepted by :func:`load_space`."""
        return {p.key: p.to_dict() for p in self.params}

    def check(self, config_cls: type, base: dict[str, Any], task: str) -> list[str]:
        """Check every key and value against the task's config (``base`` is the full resolved config).

        Raises :class:`ConfigError` naming the file, line and key for an unknown key or a value
        the config never accepts. Keys of one section that constrain each other (``num_heads``
        must divide ``d_model``) are enumerated together; returns notes on combinations that
        trials will reject.
        """
        for p in self.params:
            parts = p.key.split(".")
            if parts[0] in FORBIDDEN:
                raise ConfigError(f"{p.where}: {p.key} cannot be searched: {FORBIDDEN[parts[0]]}")
            for depth in range(len(parts)):
                allowed = allowed_keys(config_cls, tuple(parts[:depth]))
                if allowed is None:
                    raise ConfigError(
                        f"{p.where}: {p.key}: {'.'.join(parts[:depth])} is a value, not a section of the {task} config"
                    )
                if parts[depth] not in allowed:
                    where = ".".join(parts[: depth + 1])
                    raise ConfigError(
                        f"{p.where}: {where}: unknown key of the {task} config; allowed keys here: {', '.join(allowed)}"
                    )
            if allowed_keys(config_cls, tuple(parts)) is not None:
                raise ConfigError(f"{p.where}: {p.key} is a config section; search its keys (e.g. {p.key}.<key>)")
        notes = []
        for section, params in itertools.groupby(sorted(self.params, key=_section), key=_section):
            notes += _check_section(config_cls, base, section, list(params))
        return notes


def _section(p: Param) -> str:
    return p.key.rsplit(".", 1)[0] if "." in p.key else ""


def _errors(config_cls: Any, data: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        config_cls.model_validate(data)
    except ValidationError as err:
        return [(".".join(str(x) for x in e["loc"]), e["msg"].removeprefix("Value error, ")) for e in err.errors()]
    return []


def _check_section(config_cls: Any, base: dict[str, Any], section: str, params: list[Param]) -> list[str]:
    """Each value must be valid with at least one combination of the section's other searched keys."""
    values = [p.candidates() for p in params]
    total = math.prod(len(v) for v in values)
    if len(params) == 1 or total > MAX_COMBINATIONS:
        # One at a time, the other keys at their base values: only errors located at the key itself
        # are certain (others may be lifted by another searched key).
        for p, candidates in zip(params, values):
            for value in candidates:
                errors = _errors(config_cls, merge(base, expand_dotted({p.key: value})))
                own = [msg for loc, msg in errors if loc == p.key]
                alone = len(params) == 1 and errors
                if own or alone:
                    raise ConfigError(
                        f"{p.where}: {p.key}: {_what(p, value)} is not valid: {(own or [errors[0][1]])[0]}"
                    )
        return []
    ok: list[set[Any]] = [set() for _ in params]
    first_error: dict[tuple[int, Any], str] = {}
    valid: dict[tuple[Any, ...], bool] = {}
    example = ""
    for combo in itertools.product(*values):
        data = merge(base, expand_dotted({p.key: value for p, value in zip(params, combo)}))
        errors = _errors(config_cls, data)
        valid[tuple(_hashable(v) for v in combo)] = not errors
        if errors:
            example = example or errors[0][1]
            for i, value in enumerate(combo):
                first_error.setdefault((i, _hashable(value)), errors[0][1])
        else:
            for i, value in enumerate(combo):
                ok[i].add(_hashable(value))
    for i, p in enumerate(params):
        for value in values[i]:
            if _hashable(value) not in ok[i]:
                others = ", ".join(q.key for q in params if q is not p)
                raise ConfigError(
                    f"{p.where}: {p.key}: {_what(p, value)} is not valid with any value of {others}: "
                    f"{first_error[(i, _hashable(value))]}"
                )
    if all(valid.values()):
        return []
    # The keys whose value changes the outcome (e.g. d_model and num_heads, not dropout).
    involved = []
    for i in range(len(params)):
        outcome: dict[tuple[Any, ...], bool] = {}
        for combo, good in valid.items():
            rest = combo[:i] + combo[i + 1 :]
            if outcome.setdefault(rest, good) != good:
                involved.append(i)
                break
    projected: dict[tuple[Any, ...], bool] = {}
    for combo, good in valid.items():
        key = tuple(combo[i] for i in involved)
        projected[key] = projected.get(key, True) and good
    bad = sum(not good for good in projected.values())
    keys = " and ".join(params[i].key for i in involved)
    return [
        f"{keys} constrain each other: {bad} of {len(projected)} combinations of their values are invalid "
        f"(e.g. {example}); a trial that samples one is rejected before training (recorded as pruned with "
        "the reason) and does not count toward the trials"
    ]


def _hashable(value: Any) -> Any:
    return repr(value)


def _what(p: Param, value: Any) -> str:
    if p.kind == "categorical":
        return f"choice {value!r}"
    if value == p.low:
        return f"low {value!r}"
    if value == p.high:
        return f"high {value!r}"
    return f"value {value!r}"


# -- reading a space ---------------------------------------------------------------------------


def load_space(space: str | Path | dict[str, Any] | SearchSpace) -> SearchSpace:
    """A space from a YAML file, or from a dict of the same form; errors name the file, line and key."""
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, dict):
        node = yaml.compose(yaml.safe_dump(space, sort_keys=False), Loader=yaml.SafeLoader)
        source = "search space"
        line_of = False
    else:
        path = Path(space)
        if not path.is_file():
            raise ConfigError(f"search space file {path} does not exist")
        try:
            node = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path} is not valid YAML: {err}") from err
        source = str(path)
        line_of = True
    if node is None or (isinstance(node, yaml.MappingNode) and not node.value):
        raise ConfigError(
            f"{source} is empty: give at least one config key to search, "
            "e.g. 'optim.lr: {low: 1.0e-4, high: 1.0e-2, log: true}'"
        )
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{source} must be a mapping of config keys to ranges or lists of choices")
    params: list[Param] = []
    _walk(node, "", source, line_of, params)
    seen: set[str] = set()
    for p in params:
        if p.key in seen:
            raise ConfigError(f"{p.where}: {p.key} is given twice")
        seen.add(p.key)
    return SearchSpace(tuple(params), source)


def _walk(node: yaml.MappingNode, prefix: str, source: str, line_of: bool, out: list[Param]) -> None:
    for key_node, value_node in node.value:
        where = f"{source}:{key_node.start_mark.line + 1}" if line_of else source
        if not isinstance(key_node, yaml.ScalarNode) or not str(key_node.value).strip():
            raise ConfigError(f"{where}: keys must be config keys such as optim.lr")
        key = prefix + str(key_node.value).strip().replace("-", "_")
        if any(not part for part in key.split(".")):
            raise ConfigError(f"{where}: {key!r} has an empty part")
        value = _construct(value_node, where)
        if isinstance(value, dict) and not (set(value) & SPEC_KEYS):
            if not value:
                raise ConfigError(f"{where}: {key}: empty section")
            _walk(value_node, key + ".", source, line_of, out)  # a nested section: model: {d_model: ...}
            continue
        out.append(_param(key, value, where))


def _construct(node: yaml.Node, where: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise ConfigError(f"{where}: {err}") from err
    finally:
        loader.dispose()


def _number(value: Any) -> Any:
    # YAML 1.1 reads "1e-4" (no dot) as a string: accept it as a float.
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _param(key: str, spec: Any, where: str) -> Param:
    hint = "write {low: ..., high: ...} (add log: true for a log scale) or a list of choices"
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, dict):
        raise ConfigError(
            f"{where}: {key}: {spec!r} is a single value, not something to search; {hint}. "
            "Fixed values belong in the base config (--config) or in key=value overrides"
        )
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: {key}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(SPEC_KEYS))}"
        )
    kind = spec.get("type")
    if kind is not None and kind not in ("float", "int", "categorical"):
        raise ConfigError(f"{where}: {key}: type must be float, int or categorical, got {kind!r}")
    if "choices" in spec or kind == "categorical":
        choices = spec.get("choices")
        extra = sorted(set(spec) - {"choices", "type"})
        if extra:
            raise ConfigError(f"{where}: {key}: choices cannot be combined with {', '.join(extra)}")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: {key}: empty list of choices; give at least one value")
        choices = [_number(c) for c in choices]
        for c in choices:
            if not (c is None or isinstance(c, bool | int | float | str)):
                raise ConfigError(f"{where}: {key}: choices must be numbers, strings, booleans or null, got {c!r}")
        if len({repr(c) for c in choices}) != len(choices):
            raise ConfigError(f"{where}: {key}: choices repeat a value: {choices}")
        return Param(key, "categorical", choices=tuple(choices), where=where)
    if "low" not in spec or "high" not in spec:
        raise ConfigError(f"{where}: {key}: a range needs both low and high; {hint}")
    low, high, step = _number(spec["low"]), _number(spec["high"]), _number(spec.get("step"))
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: {key}: log must be true or false, got {log!r}")
    if not _is_num(low) or not _is_num(high) or (step is not None and not _is_num(step)):
        raise ConfigError(f"{where}: {key}: low, high and step must be numbers, got low={low!r} high={high!r}")
    if kind is None:
        kind = "int" if _is_int(low) and _is_int(high) and (step is None or _is_int(step)) else "float"
    if kind == "int" and not (_is_int(low) and _is_int(high) and (step is None or _is_int(step))):
        raise ConfigError(f"{where}: {key}: an int range needs int low, high and step, got low={low!r} high={high!r}")
    if not low < high:
        raise ConfigError(
            f"{where}: {key}: empty range: low ({low}) must be below high ({high}); "
            "for a fixed value use the base config instead"
        )
    if step is not None and step <= 0:
        raise ConfigError(f"{where}: {key}: step must be positive, got {step}")
    if log and low <= 0:
        raise ConfigError(f"{where}: {key}: a log range needs low > 0, got {low}")
    if log and step is not None and step != 1:
        raise ConfigError(f"{where}: {key}: log and step cannot be combined")
    if kind == "float":
        low, high = float(low), float(high)
        step = float(step) if step is not None else None
    # kind is int or float here (categorical returned above)
    return Param(
        key, "int" if kind == "int" else "float", low=low, high=high, log=log, step=None if log else step, where=where
    )
