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
