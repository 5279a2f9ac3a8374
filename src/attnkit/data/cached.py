"""The token-cache lifecycle of a data module, written once (classify, translate and lm use it).

``prepare_data()`` (Lightning runs it on one process per node, before the others start) builds the
cache entry of this corpus and config unless it exists; ``setup()`` opens it (building it first when
``prepare_data`` was not called), or, for data that is not cached, loads it in memory. One entry per
corpus and config: its key hashes the sources' contents and the config fields that change the
encoded splits, and a run's tokenizer(s) given back reuse the entry that run built when it holds
them (:func:`attnkit.data.cache.reuse_entry`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from attnkit.data.base import SplitDataModule
from attnkit.data.cache import TokenCache, cache_root, entry_key, open_or_build, reuse_entry, source_digests

__all__ = ["CachedTokenDataModule"]


class CachedTokenDataModule(SplitDataModule):
    """A data module whose splits go through the token cache (:mod:`attnkit.data.cache`).

    A subclass names its folder under the cache root (``cache_task``) and says what keys an entry
    (:meth:`_cache_config`, and :meth:`_cache_sources` unless its sources are ``data.source``,
    ``val_source`` and ``test_source``), what a given tokenizer's entry must hold
    (:meth:`_given_meta`), how an entry is built (:meth:`_build_cache`) and opened
    (:meth:`_open_cache`); data that :meth:`cached` says is not cached is loaded by
    :meth:`_load_in_memory`. ``datasets`` holds the splits once set up.
    """

    cache_task: ClassVar[str]
    cfg: Any

    def __init__(self) -> None:
        super().__init__()
        self.cache: TokenCache | None = None
        self._folder: Path | None = None
        self.datasets: dict[str, Any] = {}

    # -------------------------------------------------------------- what a subclass says
    def cached(self) -> bool:
        """Whether this data goes through the token cache."""
        return True

    def _cache_sources(self, root: Path) -> Any:
        return source_digests({name: getattr(self.cfg, name) for name in ("source", "val_source", "test_source")}, root)

    def _cache_config(self, given: bool) -> dict[str, Any]:
        """The config part of the key; ``given``: with the tokenizer(s) given to the module, if any."""
        raise NotImplementedError

    def _given_meta(self) -> dict[str, Any] | None:
        """What the entry of a run whose tokenizer(s) were given must hold to be reused; None: build anew."""
        return None

    def _build_cache(self, folder: Path) -> None:
        raise NotImplementedError

    def _open_cache(self) -> None:
        raise NotImplementedError

    def _load_in_memory(self) -> None:
        raise NotImplementedError

    # -------------------------------------------------------------- the lifecycle
    def cache_folder(self) -> Path:
        """Where this data's cache entry is. Computed once: ``setup`` then takes the tokenizer from
        the entry, which must not move the key (a second ``prepare_data``, as ``Trainer.fit`` calls it
        after ``setup``, would build the same data again under a new key)."""
        if self._folder is None:
            self._folder = self._key_folder(given=True)
            meta = self._given_meta()
            if meta is not None:
                self._folder = reuse_entry(self._folder, self._key_folder(given=False), meta)
        return self._folder

    def _key_folder(self, given: bool) -> Path:
        root = cache_root(self.cfg.cache_dir)
        key = {"sources": self._cache_sources(root), "config": self._cache_config(given), "format": 1}
        return root / self.cache_task / entry_key(key)

    def prepare_data(self) -> None:
        """Build the token cache unless it exists (nothing is downloaded); once opened (and
        checked), it is not opened again."""
        if self.cached() and (self.cache is None or self.cache.folder != self.cache_folder()):
            self.cache = open_or_build(self.cache_folder(), self._build_cache)

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        if not self.cached():
            self._load_in_memory()
            return
        if self.cache is None:
            self.prepare_data()
        self._open_cache()
