"""Fuzz targets of checkpoints and model folders: a run's checkpoint truncated, bit-flipped or with
keys missing or replaced; attnkit and Hugging Face model folders with their JSON files, weights and
tokenizer files corrupted or missing; and the ``attnkit`` commands that load them."""

from __future__ import annotations

import copy
import io
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch
from fuzz_config_targets import cli_exits_cleanly
from fuzz_core import (
    MUTATIONS,
    Assets,
    cache_content,
    copy_folder,
    expect_user_error,
    mutate,
    require_intact,
    target,
)
from hypothesis import strategies as st

from attnkit.interop.pretrained import load_pretrained, pretrained_tokenizer
from attnkit.tasks import load_run
from attnkit.training.checkpoint import load_checkpoint_file

# --------------------------------------------------------------------------------- structural edits
# An edit of a nested dict/list: (which path, in [0, 1) of the paths; what to do; the junk to put there).
JUNK = st.sampled_from(
    [None, True, 0, 1, -1, 2, 3, 2**40, -(2**63), 0.5, float("nan"), float("inf"), "", "x", "reverse", "lm", "0.0.1",
     "99.0", [], [1], {}, {"a": 1}]
)  # fmt: skip
EDIT = st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(["delete", "replace", "scale", "rename"]), JUNK)
EDITS = st.lists(EDIT, min_size=1, max_size=3)


def paths(obj: Any, prefix: tuple[Any, ...] = (), depth: int = 5) -> list[tuple[Any, ...]]:
    """The paths of every value under ``obj`` (dict keys and list indexes), tensors not entered."""
    out = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        out.append((*prefix, key))
        if depth > 1:
            out += paths(value, (*prefix, key), depth - 1)
    return out


def edit(obj: Any, edits: list[tuple[float, str, Any]], junk_tensor: bool = False) -> Any:
    """``obj`` with ``edits`` applied in place (``scale``: a number times -1, 0 or 2, a tensor cut)."""
    for where, kind, junk in edits:
        found = paths(obj)
        if not found:
            return copy.deepcopy(junk)
        path = found[int(where * len(found))]
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        value = parent[key]
        if kind == "delete":
            del parent[key]
        elif kind == "rename" and isinstance(parent, dict):
            parent[f"{key}_"] = parent.pop(key)
        elif kind == "scale" and isinstance(value, torch.Tensor):
            parent[key] = value.flatten()[: max(value.numel() - 1, 0)] if value.ndim else value.to(torch.int8)
        elif kind == "scale" and isinstance(value, int | float) and not isinstance(value, bool):
            parent[key] = type(value)(value * [-1, 0, 2][int(where * 3)])
        else:
            parent[key] = torch.zeros(2, 3) if junk_tensor and isinstance(value, torch.Tensor) else copy.deepcopy(junk)
    return obj


def zip_ranges(blob: bytes) -> list[tuple[int, int]]:
    """Byte ranges of a zip file (a torch checkpoint) worth corrupting: the pickle, the local file
    headers and the central directory."""
    try:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            infos = zf.infolist()
            ranges = [(i.header_offset, i.header_offset + 30 + len(i.filename) + 64) for i in infos]
            pkl = [i for i in infos if i.filename.endswith("data.pkl")]
            if pkl:
                start = pkl[0].header_offset + 30 + len(pkl[0].filename) + len(pkl[0].extra)
                ranges.insert(0, (start, start + pkl[0].compress_size))
            ranges.append((zf.start_dir, len(blob)))
    except zipfile.BadZipFile:
        return []
    return ranges[:7]


def safetensors_ranges(blob: bytes) -> list[tuple[int, int]]:
    """The length and the JSON header of a safetensors file."""
    size = int.from_bytes(blob[:8], "little") if len(blob) >= 8 else 0
    return [(8, 8 + min(size, len(blob))), (0, 8)]


# --------------------------------------------------------------------------------------------- runs
def _run_copy(assets: Assets, folder: Path, checkpoint: bytes) -> Path:
    (folder / "checkpoints").mkdir(parents=True)
    shutil.copy(assets.run_dir / "config.yaml", folder / "config.yaml")
    (folder / "checkpoints" / "best.ckpt").write_bytes(checkpoint)
    return folder / "checkpoints" / "best.ckpt"


@target("checkpoints.bytes", MUTATIONS, examples=250)
def check_checkpoint_bytes(assets: Assets, mutations: list[tuple[str, float, int, int]]) -> None:
    """A corrupted checkpoint is refused, or loads as exactly what was written (its CRC-32s are checked)."""
    blob = assets.checkpoint_bytes
    with assets.scratch() as folder:
        ckpt = _run_copy(assets, folder, mutate(blob, mutations, zip_ranges(blob)))
        loaded = expect_user_error(lambda: (load_run(folder), load_checkpoint_file(ckpt))[1], ckpt)
        require_intact(loaded, assets.checkpoint, ckpt)


@target("checkpoints.keys", st.tuples(EDITS, st.booleans()), examples=200)
def check_checkpoint_keys(assets: Assets, example: tuple[list[tuple[float, str, Any]], bool]) -> None:
    edits, junk_tensor = example
    checkpoint = copy.deepcopy(assets.checkpoint)
    out = io.BytesIO()
    torch.save(edit(checkpoint, edits, junk_tensor), out)
    with assets.scratch() as folder:
        ckpt = _run_copy(assets, folder, out.getvalue())
        expect_user_error(lambda: load_run(folder), ckpt)


# ------------------------------------------------------------------------------------ model folders
MODEL_FILES = ["config.json", "attnkit.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
FOLDER_EDIT = st.one_of(
    st.tuples(st.sampled_from(MODEL_FILES), st.just("bytes"), MUTATIONS),
    st.tuples(st.sampled_from(MODEL_FILES), st.just("json"), EDITS),
    st.tuples(st.sampled_from(MODEL_FILES), st.just("delete"), st.none()),
)
FOLDER_EDITS = st.lists(FOLDER_EDIT, min_size=1, max_size=2)


def corrupt_folder(folder: Path, edits: list[tuple[str, str, Any]]) -> None:
    for name, kind, how in edits:
        path = folder / name
        if not path.is_file():
            continue
        if kind == "delete":
            path.unlink()
        elif kind == "bytes":
            blob = path.read_bytes()
            path.write_bytes(mutate(blob, how, safetensors_ranges(blob) if path.suffix == ".safetensors" else []))
        elif path.suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue
            path.write_text(json.dumps(edit(data, how)), encoding="utf-8")


def tokenizer_content(tokenizer: Any) -> Any:
    """What a loaded tokenizer holds (its whole ``tokenizer.json``, kind and special tokens)."""
    if tokenizer is None:
        return None
    return {"json": tokenizer.backend.to_str(), "kind": tokenizer.kind, "special": tokenizer.special_tokens}


def pretrained_content(pretrained: Any) -> dict[str, Any]:
    """Everything a loaded model folder (a ``Pretrained``) holds, read."""
    template = pretrained.chat_template
    return {
        "name": pretrained.name,
        "info": pretrained.info,
        "state": pretrained.model.state_dict(),
        "tokenizer": tokenizer_content(pretrained.tokenizer),
        "chat_template": None if template is None else template.source,
        "generation_config": pretrained.generation_config,
    }


def _check_model_folder(assets: Assets, source: Path, edits: list[tuple[str, str, Any]]) -> tuple[Any, Any]:
    """What the corrupted copy of ``source`` loads as (``load_pretrained``, ``pretrained_tokenizer``;
    ``None``: refused with a user error)."""
    with assets.scratch() as scratch:
        folder = copy_folder(source, scratch / "model")
        corrupt_folder(folder, edits)
        pretrained = expect_user_error(lambda: load_pretrained(folder), folder)
        tokenizer = expect_user_error(lambda: pretrained_tokenizer(folder), folder)
        return None if pretrained is None else pretrained_content(pretrained), tokenizer_content(tokenizer)


_WRITTEN: dict[Path, tuple[dict[str, Any], Any]] = {}


@target("models.attnkit_folder", FOLDER_EDITS, examples=200)
def check_attnkit_folder(assets: Assets, edits: list[tuple[str, str, Any]]) -> None:
    """An attnkit model folder with files corrupted is refused, or loads as exactly what was written
    (attnkit.json holds the SHA-256 of every file and its own)."""
    source = assets.model_dir
    if source not in _WRITTEN:
        _WRITTEN[source] = (
            pretrained_content(load_pretrained(source)),
            tokenizer_content(pretrained_tokenizer(source)),
        )
    written, written_tokenizer = _WRITTEN[source]
    loaded, tokenizer = _check_model_folder(assets, source, edits)
    require_intact(loaded, written, source)
    require_intact(tokenizer, written_tokenizer, source)


# A Hugging Face folder has no checksums (it is not attnkit's): a flipped bit in its weights loads as other
# weights, so only the user-error oracle applies.


@target("models.hf_folder", st.tuples(st.sampled_from(["gpt2", "llama"]), FOLDER_EDITS), examples=250)
def check_hf_folder(assets: Assets, example: tuple[str, list[tuple[str, str, Any]]]) -> None:
    kind, edits = example
    _check_model_folder(assets, assets.hf_dir(kind), edits)  # the weak oracle: see above


# ----------------------------------------------------------------------------------------- commands
@target("cli.checkpoints", st.tuples(MUTATIONS, FOLDER_EDITS), examples=100)
def check_cli_checkpoints(assets: Assets, example: tuple[list[Any], list[tuple[str, str, Any]]]) -> None:
    mutations, edits = example
    blob = assets.checkpoint_bytes
    with assets.scratch() as folder:
        ckpt = _run_copy(assets, folder / "run", mutate(blob, mutations, zip_ranges(blob)))
        exported = cli_exits_cleanly(["export", str(folder / "run"), "--out", str(folder / "exported")]) == 0
        predicted = cli_exits_cleanly(["predict", str(folder / "run"), "1 2 3 4"]) == 0
        if exported or predicted:  # the commands used the checkpoint: it must be the one written
            require_intact(load_checkpoint_file(ckpt), assets.checkpoint, ckpt)
        model = copy_folder(assets.hf_dir("llama"), folder / "hf")
        corrupt_folder(model, edits)
        cli_exits_cleanly(["import", str(model), "--out", str(folder / "imported")])


# ------------------------------------------------------------------------------------- token cache
CACHE_FILES = ["manifest.json", "train.tokens", "train.offsets.npy", "docs.text", "docs.text_offsets.npy", "labels.npy"]


@target("cache.bytes", st.tuples(st.sampled_from(CACHE_FILES), MUTATIONS), examples=200)
def check_cache_bytes(assets: Assets, example: tuple[str, list[tuple[str, float, int, int]]]) -> None:
    """A token cache entry with one file corrupted is refused (``TokenCache.open`` gives None: rebuilt)
    or opens as exactly what was written (every file's hash, and the manifest's own, is checked)."""
    import warnings

    from attnkit.data.cache import TokenCache

    name, mutations = example
    with assets.scratch() as scratch:
        folder = copy_folder(assets.cache_entry, scratch / "entry")
        path = folder / name
        path.write_bytes(mutate(path.read_bytes(), mutations))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the warning that it is rebuilt
            cache = expect_user_error(lambda: TokenCache.open(folder), folder)
        require_intact(None if cache is None else cache_content(cache), assets.cache_content, path)
