"""A small registry of named kinds (norms, activations, positional encodings, models, tasks, tokenizer kinds).

``REG = Registry[T]("norm")``; ``@REG.register("rmsnorm")`` on a class or function registers it under
that name; ``REG.get(name)`` returns it, or raises a ``ValueError`` that lists the choices;
``REG.names()`` (or ``list(REG)``, ``name in REG``) gives the registered names in registration order.
Configs derive their choices from a registry, so a new kind is registered in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named kinds of one sort (``kind`` names the sort in error messages: ``"norm"``, ``"activation"``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated object under ``name`` (a name may be registered once)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")

        def decorate(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return decorate

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` (the decorator's plain form)."""
        return self.register(name)(obj)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests and experiments)."""
        self._items.pop(name, None)

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._items)

    def get(self, name: str) -> T:
        """The object registered as ``name``; a ``ValueError`` naming the choices otherwise."""
        try:
            return self._items[name]
        except (KeyError, TypeError):  # (TypeError: an unhashable name such as a list)
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {list(self._items)}") from None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def items(self) -> list[tuple[str, T]]:
        """``(name, object)`` pairs, in registration order."""
        return list(self._items.items())

    def values(self) -> list[T]:
        """The registered objects, in registration order."""
        return list(self._items.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._items)})"
