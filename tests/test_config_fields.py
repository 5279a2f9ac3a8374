"""Each config field is declared once along an inheritance line.

A subclass of a config that declares a field its base already has (``d_model: int = 32`` in a task's
model config, only to change a default) is a second declaration of that field: two places to edit when
the field changes, and two descriptions that drift. A task's own defaults are default *instances*
instead (``model: EncoderArchitecture = EncoderArchitecture(d_model=32)``), which
:class:`attnkit.training.task.TaskConfig` merges given values over.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import ClassVar

import pytest
from pydantic import BaseModel

import attnkit
from attnkit.config import StrictModel


def _all_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(attnkit.__path__, prefix="attnkit."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def _config_classes() -> list[type[BaseModel]]:
    for name in _all_modules():
        importlib.import_module(name)
    seen: list[type[BaseModel]] = []
    stack: list[type[BaseModel]] = [StrictModel]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen and sub.__module__.startswith("attnkit."):
                seen.append(sub)
                stack.append(sub)
    return sorted(seen, key=lambda c: (c.__module__, c.__qualname__))


def redeclared_fields(cls: type[BaseModel]) -> dict[str, str]:
    """Fields ``cls`` declares (annotates in its own body) that a base config class already declares:
    ``{field: the base that declares it}``."""
    own = [n for n in inspect.get_annotations(cls) if n in cls.model_fields]  # not ClassVars
    found: dict[str, str] = {}
    for name in own:
        for base in cls.__mro__[1:]:
            if not (isinstance(base, type) and issubclass(base, BaseModel)) or base is BaseModel:
                continue
            if name in inspect.get_annotations(base) and name in base.model_fields:
                found[name] = f"{base.__module__}.{base.__qualname__}"
                break
    return found


CLASSES = _config_classes()


def test_there_are_configs_to_check() -> None:
    names = {c.__qualname__ for c in CLASSES}
    assert {"TaskConfig", "TrainerConfig", "OptimConfig"} <= names, sorted(names)
    assert len(CLASSES) > 20


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_no_field_declared_twice(cls: type[BaseModel]) -> None:
    twice = redeclared_fields(cls)
    assert not twice, (
        f"{cls.__module__}.{cls.__qualname__} declares fields its base already declares: "
        + ", ".join(f"{name} (in {base})" for name, base in sorted(twice.items()))
        + ". Set a task's own defaults with a default instance instead of a subclass."
    )


def test_the_check_sees_a_redeclared_default() -> None:
    class Base(StrictModel):
        width: int = 8

    class Narrow(Base):
        width: int = 4

    class Extra(Base):
        depth: int = 2
        note: ClassVar[str] = "a class variable, not a field"

    class Again(Extra):
        note: ClassVar[str] = "declared again: still not a field"

    assert redeclared_fields(Narrow) == {"width": f"{__name__}.{Base.__qualname__}"}
    assert redeclared_fields(Extra) == {}
    assert redeclared_fields(Again) == {}


def test_field_overrides_change_a_subclass_only() -> None:
    from typing import Annotated

    from pydantic import Field, ValidationError

    class Base(StrictModel):
        width: int = Field(8, gt=0, description="how wide")
        name: str = "base"

    class Wide(Base):
        field_overrides: ClassVar[dict[str, object]] = {"width": Field(64, le=128), "name": "wide"}

    class Narrowed(Base):
        field_overrides: ClassVar[dict[str, object]] = {"width": Annotated[int, Field(ge=4)]}

    assert (Base().width, Base().name, Wide().width, Wide().name) == (8, "base", 64, "wide")
    assert Wide.model_fields["width"].description == "how wide"  # the field keeps what it had
    with pytest.raises(ValidationError, match="less than or equal to 128"):
        Wide(width=129)
    with pytest.raises(ValidationError, match="greater than 0"):
        Wide(width=0)  # the base's bound still holds
    Base(width=129)  # and the base has no new bound
    with pytest.raises(ValidationError, match="greater than or equal to 4"):
        Narrowed(width=3)
    assert redeclared_fields(Wide) == {} and redeclared_fields(Narrowed) == {}


def test_field_overrides_name_inherited_fields_only() -> None:
    class Base(StrictModel):
        width: int = 8

    with pytest.raises(TypeError, match=r"Typo.field_overrides: 'widht' is not an inherited field"):

        class Typo(Base):
            field_overrides: ClassVar[dict[str, object]] = {"widht": 4}
