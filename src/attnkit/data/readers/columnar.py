"""Where the rows of a Parquet / Arrow source are: its files and, when its layout names them, its splits.

A source (``data.source``, ``val_source``, ``test_source``) is columnar when it is

* a file ending in ``.parquet``, ``.arrow`` or ``.feather`` (Arrow IPC, file or stream format);
* a glob matching such files (``"shards/*.parquet"``);
* a folder written by ``datasets``' ``save_to_disk``: a ``DatasetDict`` (``dataset_dict.json`` naming its
  splits, one sub-folder each) or a single ``Dataset`` (``state.json`` listing its ``.arrow`` files);
* a Hub dataset repository copied to disk: the data files its ``README.md`` declares under
  ``configs:`` (the first config, or the one marked ``default: true``), else its ``.parquet`` / ``.arrow``
  files (``data/train-00000-of-00002.parquet`` ...), whose split is read from their paths;
* any other folder of such files (its shards, recursively, in sorted path order).

Split names in paths follow ``datasets``' keywords: ``train``/``training``; ``validation``/``valid``/
``val``/``dev`` (the run's ``val``); ``test``/``testing``/``eval``/``evaluation``. Nothing here reads a row
(:mod:`attnkit.data.readers.arrow_rows` does).
"""

from __future__ import annotations

import glob
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["COLUMNAR_SUFFIXES", "ColumnarSource", "is_columnar", "open_columnar"]

COLUMNAR_SUFFIXES: tuple[str, ...] = (".parquet", ".arrow", ".feather")
ALL = "all"  # the part of a source without named splits
_KEYWORDS = {
    "train": "train",
    "training": "train",
    "validation": "val",
    "valid": "val",
    "val": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
    "eval": "test",
    "evaluation": "test",
}
_SPLIT_NAMES = {"train": "train", "validation": "val", "valid": "val", "val": "val", "dev": "val", "test": "test"}


@dataclass(frozen=True)
class ColumnarSource:
    """A resolved columnar source: ``parts`` maps ``"all"`` (no named splits) or the run's split names
    (``train``, ``val``, ``test``) to their files, in reading order."""

    source: str
    parts: dict[str, list[Path]]

    @property
    def files(self) -> list[Path]:
        """Every file of every part."""
        return [f for files in self.parts.values() for f in files]

    @property
    def has_splits(self) -> bool:
        return ALL not in self.parts


def _is_glob(source: str) -> bool:
    return any(c in source for c in "*?[")


def is_columnar(source: str | Path | None) -> bool:
    """Whether ``source`` names Parquet/Arrow data (see the module docstring); decided from the path
    alone for a file or a glob, from the folder's files for a folder."""
    if not source:
        return False
    text = str(source)
    path = Path(text).expanduser()
    if path.suffix.lower() in COLUMNAR_SUFFIXES:
        return True
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return True
        return any(p.suffix.lower() in COLUMNAR_SUFFIXES for p in path.rglob("*") if p.is_file())
    return _is_glob(text) and Path(text).suffix.lower() in COLUMNAR_SUFFIXES


def open_columnar(source: str | Path, role: str = "data.source") -> ColumnarSource:
    """The files (and splits) of a columnar ``source``; ``role`` names the option in errors."""
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix.lower() not in COLUMNAR_SUFFIXES:
            raise ValueError(f"{role}={text!r}: not a Parquet or Arrow file (give {'/'.join(COLUMNAR_SUFFIXES)})")
        return ColumnarSource(text, {ALL: [path]})
    if path.is_dir():
        return ColumnarSource(text, _folder_parts(path, role))
    if _is_glob(text):
        files = sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"{role}={text!r}: no file matches this glob")
        other = [f for f in files if f.suffix.lower() not in COLUMNAR_SUFFIXES]
        if other:
            raise ValueError(f"{role}={text!r} matches files that are not Parquet or Arrow, e.g. {other[0]}")
        return ColumnarSource(text, {ALL: files})
    raise FileNotFoundError(f"{role}: {path} does not exist")


def _folder_parts(folder: Path, role: str) -> dict[str, list[Path]]:
    if (folder / "dataset_dict.json").is_file():
        return _dataset_dict(folder, role)
    if (folder / "state.json").is_file():
        return {ALL: _saved_dataset(folder, role)}
    declared = _readme_configs(folder, role)
    if declared is not None:
        return declared
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in COLUMNAR_SUFFIXES)
    if not files:
        raise ValueError(
            f"{role}={str(folder)!r} is a folder without .parquet/.arrow/.feather files, dataset_dict.json or "
            "state.json; give a Parquet/Arrow file, a folder of them or a datasets save_to_disk folder"
        )
    named = {f: _split_of(f.relative_to(folder)) for f in files}
    if all(s is None for s in named.values()):
        return {ALL: files}
    unnamed = [f for f, s in named.items() if s is None]
    if unnamed:
        raise ValueError(
            f"{role}={str(folder)!r}: {unnamed[0].relative_to(folder)} names no split while other files do "
            f"(train/validation/test in their paths); move it out of the folder or rename it"
        )
    return _with_train(folder, {s: [f for f in files if named[f] == s] for s in ("train", "val", "test")}, role)


def _with_train(folder: Path, parts: dict[str, list[Path]], role: str) -> dict[str, list[Path]]:
    parts = {s: files for s, files in parts.items() if files}
    if "train" not in parts:
        raise ValueError(
            f"{role}={str(folder)!r} has the splits {sorted(parts)} but no train split; give the training "
            "data as data.source and the others as data.val_source / data.test_source"
        )
    return parts


def _split_of(relative: Path) -> str | None:
    """The split a file's path names (its folders first, then the start of its name), or None."""
    for part in [*relative.parent.parts, relative.name]:
        words = re.split(r"[-_.\s]+", part.lower())
        if words and words[0] in _KEYWORDS:
            return _KEYWORDS[words[0]]
    return None


def _load_json(path: Path, role: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{role}: {path} is not readable JSON ({err}); write the folder again with save_to_disk"
        ) from None


def _dataset_dict(folder: Path, role: str) -> dict[str, list[Path]]:
    info = _load_json(folder / "dataset_dict.json", role)
    names = info.get("splits") if isinstance(info, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{role}: {folder / 'dataset_dict.json'} has no list of 'splits'")
    unknown = [n for n in names if n not in _SPLIT_NAMES]
    if unknown:
        raise ValueError(
            f"{role}={str(folder)!r}: split(s) {unknown} are not train/validation/test; save the splits under those "
            f"names (DatasetDict({{'train': ..., 'validation': ..., 'test': ...}}).save_to_disk(...))"
        )
    parts: dict[str, list[Path]] = {}
    for name in names:
        split = _SPLIT_NAMES[name]
        if split in parts:
            raise ValueError(f"{role}={str(folder)!r}: two splits ({name!r} and another) are both the run's {split!r}")
        parts[split] = _saved_dataset(folder / name, role)
    return _with_train(folder, parts, role)


def _saved_dataset(folder: Path, role: str) -> list[Path]:
    """The ``.arrow`` files of one ``save_to_disk`` dataset, in ``state.json``'s order."""
    state = _load_json(folder / "state.json", role) if (folder / "state.json").is_file() else None
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list):
        files = sorted(folder.glob("*.arrow"))
    else:
        files = [folder / str(e.get("filename", "")) for e in entries if isinstance(e, dict)]
    if not files:
        raise ValueError(f"{role}: {folder} holds no .arrow data files; write it again with save_to_disk")
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{role}: {missing[0]} (listed in {folder / 'state.json'}) does not exist")
    return files


def _readme_configs(folder: Path, role: str) -> dict[str, list[Path]] | None:
    """The data files of the README's default config (a Hub dataset card's ``configs:``), or None."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    match = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", readme.read_text(encoding="utf-8", errors="replace"), re.S)
    try:
        card = yaml.safe_load(match.group(1)) if match else None
    except yaml.YAMLError:
        return None
    configs = card.get("configs") if isinstance(card, dict) else None
    if not isinstance(configs, list) or not configs:
        return None
    config = next((c for c in configs if isinstance(c, dict) and c.get("default")), configs[0])
    data_files = config.get("data_files") if isinstance(config, dict) else None
    if isinstance(data_files, str | list) and not (
        isinstance(data_files, list) and data_files and isinstance(data_files[0], dict)
    ):
        data_files = [{"split": "train", "path": data_files}]
    if not isinstance(data_files, list):
        return None
    parts: dict[str, list[Path]] = {}
    for entry in data_files:
        if not isinstance(entry, dict) or entry.get("split") not in _SPLIT_NAMES:
            raise ValueError(f"{role}: {readme} declares data files of split {entry!r}; expected train/validation/test")
        patterns = entry.get("path")
        for pattern in [patterns] if isinstance(patterns, str) else list(patterns or []):
            found = sorted(Path(p) for p in glob.glob(str(folder / pattern), recursive=True) if Path(p).is_file())
            if not found:
                raise FileNotFoundError(f"{role}: {readme} declares {pattern!r}, which matches no file in {folder}")
            parts.setdefault(_SPLIT_NAMES[entry["split"]], []).extend(found)
    return _with_train(folder, parts, role)
