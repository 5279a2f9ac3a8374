"""A small registry of named kinds: each kind is registered once, with a decorator, and the
choices a config offers are read from it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (``what`` names it in errors), in registration order."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str, make: Callable[[Any], T]) -> Callable[[Any], Any]:
        """A decorator: registers ``make(decorated)`` under ``name`` and returns the decorated object."""

        def decorate(obj: Any) -> Any:
            self.add(name, make(obj))
            return obj

        return decorate

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise ValueError(f"unknown {self.what} {name!r}; choose one of {list(self._entries)}")
        return self._entries[name]

    def names(self, **attributes: Any) -> tuple[str, ...]:
        """The names whose entries have every one of ``attributes`` (all names without any)."""
        return tuple(
            name
            for name, entry in self._entries.items()
            if all(getattr(entry, key) == value for key, value in attributes.items())
        )

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)
