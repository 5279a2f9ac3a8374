"""The token cache: a task's tokenized data on disk, memory-mapped, built once and reused.

A cache entry is a folder ``<root>/<task>/<key>/`` holding, per split, ``<split>.tokens`` (the
token ids, ``uint16`` when the vocabulary fits, else ``uint32``, read with ``np.memmap``) and
``<split>.offsets.npy`` (``int64``, where each example/document starts; one more entry for the
end), plus ``manifest.json``. An entry may also hold texts (``<name>.text``, UTF-8, with
``<name>.text_offsets.npy``: byte offsets, read lazily as :class:`CachedTexts`) and small arrays
(``<name>.npy``, e.g. labels), checked by the manifest like the token files. ``root`` is
``data.cache_dir``, else ``$ATTNKIT_CACHE``, else ``~/.cache/attnkit``. The ``key`` hashes the
source files' contents, the tokenizer (or the options it is built with) and the data config: a
change of any of them gives a new entry. A module given a tokenizer opens the entry built with the
options when that entry holds the same tokenizer (:func:`reuse_entry`): one entry per corpus and
configuration.

Safety: an entry is built in a temporary folder and renamed into place, and its manifest is written
last; the manifest lists every file's size and the XXH3-128 hash of all of its bytes (``xxhash``:
about 0.2 s per GB read from the page cache, so every byte is checked each time an entry is opened),
and the hash of its own other contents (``checksum``: the meta, e.g. the tokenizer, is checked too).
An entry whose files are missing, of another size or with another hash, or whose manifest was changed,
is rebuilt, never used (a warning names the file); an entry of another ``version`` (an older format) is
rebuilt too. Two
processes that build the same entry at once both finish; the first rename wins. Under DDP,
Lightning calls ``prepare_data`` (which builds) on one process per node before the others ``setup``
(which only opens).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from attnkit.io import write_json_atomic, write_text_atomic

__all__ = [
    "CACHE_ENV",
    "MANIFEST",
    "CacheWriter",
    "CachedRows",
    "CachedTexts",
    "LazySequence",
    "TokenCache",
    "cache_root",
    "content_digest",
    "entry_key",
    "file_hash",
    "manifest_checksum",
    "open_or_build",
    "reuse_entry",
    "source_digests",
    "token_dtype",
]

CACHE_ENV = "ATTNKIT_CACHE"
MANIFEST = "manifest.json"
FORMAT_VERSION = 3  # 1: hashes of 64 sampled blocks; 2: XXH3-128 of every byte; 3: and of the manifest
HASH = "xxh3_128"
# A source's digest is remembered only once its last change (ctime) is this much older than the
# hashing: a file changed again within its filesystem's time granularity could keep its times.
SETTLED_S = 2.0
_READ = 1 << 20  # bytes read at a time when hashing (1 MiB: the hash reads them from the CPU cache)


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``cache_dir``, else ``$ATTNKIT_CACHE``, else ``~/.cache/attnkit``."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "attnkit"


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id fits, else ``uint32``."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def content_digest(path: str | os.PathLike[str], root: Path) -> str:
    """BLAKE2b of a file's bytes. Remembered under ``root/sources/`` by the file's path, device,
    inode, size, mtime and ctime, so a second run does not read an unchanged file again.

    The mtime alone does not say that a file is unchanged: ``cp -p``, ``rsync -a`` and ``tar -x`` write
    new contents and then set the old mtime back. The ctime (the inode's last change) cannot be set by
    a user: the kernel sets it to the current time at every write, ``utime``, rename or ``chmod``, so
    any of those makes a new key and the file is hashed again (``rsync``'s rename into place also gives
    a new inode). File times have a granularity (a clock tick; 2 s on FAT), so a file changed twice
    within one tick could keep its ctime: a digest is remembered only when the file's last change is
    :data:`SETTLED_S` older than the hashing and the file did not change while it was read."""
    path = Path(path).resolve()
    started = time.time_ns()
    st = path.stat()
    memo = root / "sources" / _memo_key(path, st)
    if memo.is_file():
        return memo.read_text().strip()
    h = hashlib.blake2b(digest_size=20)
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    digest = h.hexdigest()
    settled = started - st.st_ctime_ns >= SETTLED_S * 1e9
    if settled and _memo_key(path, path.stat()) == memo.name:
        write_text_atomic(memo, digest + "\n")
    return digest


def _memo_key(path: Path, st: os.stat_result) -> str:
    stamp = f"{path}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"
    return hashlib.blake2b(stamp.encode(), digest_size=16).hexdigest()


def source_digests(files: dict[str, str | None], root: Path) -> dict[str, str]:
    """:func:`content_digest` of each named source that is given (``None``: left out); a folder or a glob
    (Parquet shards, a ``save_to_disk`` folder) digests the paths and contents of all of its files."""
    return {name: _source_digest(path, root) for name, path in files.items() if path}


def _source_digest(source: str, root: Path) -> str:
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    elif not path.is_file() and any(c in source for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
    else:
        return content_digest(path, root)
    h = hashlib.blake2b(digest_size=20)
    for file in files:
        h.update(f"{file.relative_to(path) if path.is_dir() else file}\0{content_digest(file, root)}\n".encode())
    return h.hexdigest()


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """XXH3-128 of the manifest's items but ``checksum`` (as key-sorted JSON; hex)."""
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    return str(xxhash.xxh3_128(json.dumps(body, sort_keys=True).encode()).hexdigest())


def file_hash(path: Path) -> str:
    """XXH3-128 of every byte of the file (hex)."""
    h = xxhash.xxh3_128()
    buffer = memoryview(bytearray(_READ))
    with path.open("rb", buffering=0) as f:
        while n := f.readinto(buffer):
            h.update(buffer[:n])
    return h.hexdigest()


class TokenCache:
    """An opened cache entry: memory-mapped token arrays and offsets per split, and ``meta``."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        self.manifest = manifest
        self.meta: dict[str, Any] = manifest["meta"]
        self.dtype = np.dtype(manifest["dtype"])

    @classmethod
    def open(cls, folder: str | os.PathLike[str], *, verify: bool = True) -> TokenCache | None:
        """The entry in ``folder``, or ``None`` when there is none or it is incomplete or changed
        (then a warning names the problem; the caller rebuilds it). Every byte of every file is
        hashed and compared with the manifest; ``verify=False`` checks the files' sizes only (for an
        entry this process has just written)."""
        folder = Path(folder)
        manifest_path = folder / MANIFEST
        if not manifest_path.is_file():
            return None
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as err:  # ValueError: JSONDecodeError, UnicodeDecodeError
            warnings.warn(f"token cache {folder}: unreadable manifest ({err}); rebuilding it", stacklevel=2)
            return None
        if not isinstance(manifest, dict):
            warnings.warn(f"token cache {folder}: {MANIFEST} is not a manifest; rebuilding the cache", stacklevel=2)
            return None
        if manifest.get("version") != FORMAT_VERSION or manifest.get("hash") != HASH:
            return None  # an older format: rebuilt
        if manifest.get("checksum") != manifest_checksum(manifest):
            warnings.warn(
                f"token cache {folder}: {MANIFEST} was changed after it was written (its checksum differs); "
                "rebuilding the cache",
                stacklevel=2,
            )
            return None
        for name, want in manifest["files"].items():
            path = folder / name
            problem = None
            if not path.is_file():
                problem = "is missing"
            elif path.stat().st_size != want["size"]:
                problem = f"has {path.stat().st_size} bytes, the manifest says {want['size']} (truncated?)"
            elif verify and file_hash(path) != want["hash"]:
                problem = "was changed after it was written (its hash differs from the manifest's)"
            if problem:
                warnings.warn(f"token cache {folder}: {name} {problem}; rebuilding the cache", stacklevel=2)
                return None
        return cls(folder, manifest)

    def tokens(self, split: str) -> np.ndarray:
        """The token ids of ``split``, memory-mapped read-only (nothing is read until indexed)."""
        path = self.folder / f"{split}.tokens"
        if path.stat().st_size == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(path, dtype=self.dtype, mode="r")

    def offsets(self, split: str) -> np.ndarray:
        """``int64`` start of every example of ``split`` in :meth:`tokens`, then the end."""
        return np.load(self.folder / f"{split}.offsets.npy", mmap_mode="r")

    def rows(self, split: str) -> CachedRows:
        """The examples of ``split`` as a lazy sequence of ``list[int]``."""
        return CachedRows(self.folder / f"{split}.tokens", self.folder / f"{split}.offsets.npy", self.dtype)

    def texts(self, name: str) -> CachedTexts:
        """The texts written with :meth:`CacheWriter.add_texts` as a lazy sequence of ``str``."""
        return CachedTexts(self.folder / f"{name}.text", self.folder / f"{name}.text_offsets.npy")

    def array(self, name: str) -> np.ndarray:
        """The array saved with :meth:`CacheWriter.save_array`, memory-mapped read-only."""
        return np.load(self.folder / f"{name}.npy", mmap_mode="r")


class LazySequence(Sequence[Any]):
    """A read-only sequence read from files on demand; compares equal to any sequence with the same
    items, and ``+`` gives a list (as the in-memory lists it replaces). Files are opened lazily in
    each process (DataLoader workers open their own)."""

    def _get(self, index: int) -> Any:
        raise NotImplementedError

    def _check(self, index: int) -> int:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range [0, {n})")
        return index % n if n else index

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(len(self)))]
        return self._get(self._check(int(index)))

    def __iter__(self) -> Iterator[Any]:
        return (self._get(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]  # unhashable, as the lists it replaces (typeshed: a method)

    def __add__(self, other: Sequence[Any]) -> list[Any]:
        return [*self, *other]

    def __radd__(self, other: Sequence[Any]) -> list[Any]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} items)"


class CachedRows(LazySequence):
    """Item ``i`` is ``tokens[offsets[i]:offsets[i + 1]]`` as a ``list[int]``."""

    def __init__(self, tokens: Path, offsets: Path, dtype: np.dtype) -> None:
        self.tokens_path, self.offsets_path, self.dtype = tokens, offsets, np.dtype(dtype)
        self.offsets = np.load(offsets, mmap_mode="r")
        self._tokens: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "offsets": None, "_tokens": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.offsets = np.load(self.offsets_path, mmap_mode="r")

    @property
    def tokens(self) -> np.ndarray:
        """All the token ids, memory-mapped."""
        if self._tokens is None:
            empty = self.tokens_path.stat().st_size == 0
            self._tokens = np.zeros(0, self.dtype) if empty else np.memmap(self.tokens_path, self.dtype, mode="r")
        return self._tokens

    def lengths(self) -> np.ndarray:
        """``int64`` length of every row."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _get(self, index: int) -> list[int]:
        return self.tokens[int(self.offsets[index]) : int(self.offsets[index + 1])].tolist()


class CachedTexts(LazySequence):
    """Item ``i`` is the ``i``-th UTF-8 text of a text file cut at byte ``offsets``."""

    def __init__(self, path: Path, offsets: Path) -> None:
        self.path, self.offsets_path = path, offsets
        self.offsets = np.load(offsets, mmap_mode="r")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "offsets": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.offsets = np.load(self.offsets_path, mmap_mode="r")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _get(self, index: int) -> str:
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        with self.path.open("rb") as f:
            f.seek(start)
            return f.read(end - start).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        with self.path.open("rb") as f:
            for start, end in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist()):
                f.seek(start)
                yield f.read(end - start).decode("utf-8")


class CacheWriter:
    """Appends examples to the split files of a new entry (in a temporary folder)."""

    def __init__(self, folder: Path, splits: Iterable[str], dtype: np.dtype) -> None:
        self.folder = folder
        self.dtype = np.dtype(dtype)
        self.splits = list(splits)
        self._files = {s: (folder / f"{s}.tokens").open("wb") for s in self.splits}
        self._lengths: dict[str, list[np.ndarray]] = {s: [] for s in self.splits}
        self.sizes = dict.fromkeys(self.splits, 0)
        self._texts: dict[str, Any] = {}
        self._text_lengths: dict[str, list[int]] = {}
        self._arrays: list[str] = []

    def add(self, split: str, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Append examples: their ``tokens`` concatenated, and each example's length."""
        tokens = np.asarray(tokens)
        if tokens.size and int(tokens.max()) > np.iinfo(self.dtype).max:
            raise ValueError(f"token id {int(tokens.max())} does not fit {self.dtype}")
        self._files[split].write(tokens.astype(self.dtype, copy=False).tobytes())
        self._lengths[split].append(np.asarray(lengths, dtype=np.int64))
        self.sizes[split] += int(tokens.size)

    def add_rows(self, split: str, rows: Sequence[Sequence[int]]) -> None:
        """Append examples given as lists of token ids."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.fromiter((t for row in rows for t in row), dtype=np.int64, count=int(lengths.sum()))
        self.add(split, flat, lengths)

    def add_texts(self, name: str, texts: Iterable[str]) -> None:
        """Append ``texts`` to ``<name>.text`` (read back with :meth:`TokenCache.texts`)."""
        if name not in self._texts:
            self._texts[name] = (self.folder / f"{name}.text").open("wb")
            self._text_lengths[name] = []
        f, lengths = self._texts[name], self._text_lengths[name]
        for text in texts:
            raw = text.encode("utf-8")
            f.write(raw)
            lengths.append(len(raw))

    def save_array(self, name: str, array: np.ndarray) -> None:
        """Save a small array as ``<name>.npy`` (read back with :meth:`TokenCache.array`)."""
        np.save(self.folder / f"{name}.npy", np.asarray(array))
        self._arrays.append(f"{name}.npy")

    def finish(self, meta: dict[str, Any]) -> None:
        """Close the files, write the offsets and, last, the manifest."""
        names: list[str] = []
        for split in self.splits:
            self._files[split].close()
            lengths = np.concatenate(self._lengths[split]) if self._lengths[split] else np.zeros(0, np.int64)
            np.save(self.folder / f"{split}.offsets.npy", _offsets(lengths))
            names += [f"{split}.tokens", f"{split}.offsets.npy"]
        for name, f in self._texts.items():
            f.close()
            np.save(self.folder / f"{name}.text_offsets.npy", _offsets(np.asarray(self._text_lengths[name], np.int64)))
            names += [f"{name}.text", f"{name}.text_offsets.npy"]
        files: dict[str, dict[str, Any]] = {}
        for name in names + self._arrays:
            path = self.folder / name
            files[name] = {"size": path.stat().st_size, "hash": file_hash(path)}
        manifest = {"version": FORMAT_VERSION, "hash": HASH, "dtype": self.dtype.name, "files": files, "meta": meta}
        manifest["checksum"] = manifest_checksum(manifest)
        write_json_atomic(self.folder / MANIFEST, manifest)

    def abort(self) -> None:
        for f in [*self._files.values(), *self._texts.values()]:
            f.close()


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """``int64`` starts of consecutive pieces of ``lengths``, then the end."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def open_or_build(folder: Path, build: Callable[[Path], None]) -> TokenCache:
    """Open the entry in ``folder``, or call ``build(tmp_folder)`` (which writes a complete entry
    with a :class:`CacheWriter`) and move it into place."""
    cache = TokenCache.open(folder)
    if cache is not None:
        return cache
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    ours = False  # whether the entry in place is the one just built (its hashes were just computed)
    try:
        build(tmp)
        if folder.exists() and TokenCache.open(folder) is None:
            shutil.rmtree(folder, ignore_errors=True)  # a broken entry: replaced
        try:
            os.rename(tmp, folder)
            ours = True
        except OSError:
            if TokenCache.open(folder) is None:  # not another process's complete entry
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cache = TokenCache.open(folder, verify=not ours)
    if cache is None:
        raise RuntimeError(f"token cache {folder}: the entry just built cannot be opened")
    return cache


def reuse_entry(given: Path, built: Path, meta: dict[str, Any]) -> Path:
    """``built`` when its manifest (read, not yet checked against the files) records these ``meta``
    items, else ``given``.

    A data module given its tokenizer (a trained run's, from its checkpoint: evaluation, the run's
    report) keys its entry by that tokenizer (``given``); the run that built the tokenizer keyed the
    same data by the options it was built with (``built``). When that entry records the same
    tokenizer, it holds what would be built: it is opened (every byte checked) instead of a second
    entry built. Were its files damaged, it is rebuilt in place with the same result."""
    try:
        manifest = json.loads((built / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return given
    if not isinstance(manifest, dict) or manifest.get("version") != FORMAT_VERSION:
        return given
    have = manifest.get("meta") or {}
    same = all(json.dumps(have.get(k), sort_keys=True) == json.dumps(v, sort_keys=True) for k, v in meta.items())
    return built if same else given


def entry_key(parts: dict[str, Any]) -> str:
    """A short hash of ``parts`` (JSON-serialisable), naming a cache entry."""
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=16).hexdigest()
