"""The token cache's building blocks (writer, entry, lazy sequences, keys and digests), as their docstrings
describe them, which mutation testing (tools/mutation.py) found the other tests left open."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import xxhash

import attnkit.data.cache as cache_module
from attnkit.data.cache import (
    FORMAT_VERSION,
    MANIFEST,
    CachedRows,
    CachedTexts,
    CacheWriter,
    TokenCache,
    cache_root,
    content_digest,
    entry_key,
    file_hash,
    open_or_build,
    reuse_entry,
    source_digests,
    token_dtype,
)


def _build(folder: Path, meta: dict | None = None, vocab: int = 100) -> None:
    writer = CacheWriter(folder, ["train", "val"], token_dtype(vocab))
    writer.add_rows("train", [[1, 2, 3], [], [4, 5]])
    writer.add("train", np.array([6, 7, 8]), np.array([1, 2]))
    assert writer.sizes == {"train": 8, "val": 0}  # tokens written per split
    writer.add_texts("docs", ["café", "", "😀 x"])
    writer.add_texts("docs", ["last"])
    writer.save_array("labels", np.array([0, 1, 1, 0]))
    writer.finish(meta or {"task": "t"})


def _entry(tmp_path: Path, **kw) -> TokenCache:
    return open_or_build(tmp_path / "entry", lambda tmp: _build(tmp, **kw))


def test_token_dtype_is_uint16_exactly_while_every_id_fits():
    assert token_dtype(1 << 16) == np.uint16  # ids 0 .. 65535
    assert token_dtype(1) == np.uint16
    assert token_dtype((1 << 16) + 1) == np.uint32


def test_cache_root_expands_the_users_folder(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ATTNKIT_CACHE", "~/env-cache")
    assert cache_root("~/given") == tmp_path / "given"
    assert cache_root() == tmp_path / "env-cache"
    monkeypatch.delenv("ATTNKIT_CACHE")
    assert cache_root() == tmp_path / ".cache" / "attnkit"


def test_an_entry_gives_back_what_was_written(tmp_path: Path):
    cache = _entry(tmp_path, meta={"task": "t", "n": 2})
    assert cache.meta == {"task": "t", "n": 2} and cache.dtype == np.uint16
    assert cache.manifest["meta"] == cache.meta and cache.manifest["version"] == FORMAT_VERSION
    assert cache.tokens("train").tolist() == [1, 2, 3, 4, 5, 6, 7, 8] and cache.tokens("train").dtype == np.uint16
    assert cache.offsets("train").tolist() == [0, 3, 3, 5, 6, 8] and cache.offsets("train").dtype == np.int64
    assert cache.rows("train") == [[1, 2, 3], [], [4, 5], [6], [7, 8]]
    assert cache.rows("train").lengths().tolist() == [3, 0, 2, 1, 2]
    assert cache.tokens("val").tolist() == [] and cache.tokens("val").dtype == np.uint16  # an empty split
    assert cache.offsets("val").tolist() == [0] and cache.rows("val") == []
    assert cache.texts("docs") == ["café", "", "😀 x", "last"]
    assert [cache.texts("docs")[i] for i in (0, 2, 3, -1)] == ["café", "😀 x", "last", "last"]
    assert cache.array("labels").tolist() == [0, 1, 1, 0]
    for mapped in (cache.tokens("train"), cache.array("labels")):  # memory-mapped read-only
        assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    manifest = json.loads((cache.folder / MANIFEST).read_text())
    assert manifest["version"] == FORMAT_VERSION and manifest["dtype"] == "uint16"
    assert sorted(manifest["files"]) == sorted(
        [
            "train.tokens",
            "train.offsets.npy",
            "val.tokens",
            "val.offsets.npy",
            "docs.text",
            "docs.text_offsets.npy",
            "labels.npy",
        ]
    )
    for name, want in manifest["files"].items():
        assert want == {"size": (cache.folder / name).stat().st_size, "hash": file_hash(cache.folder / name)}


def test_a_large_vocabulary_is_written_as_uint32_and_an_id_too_large_is_refused(tmp_path: Path):
    writer = CacheWriter(tmp_path, ["train"], token_dtype(70_000))
    writer.add_rows("train", [[69_999, 0]])
    writer.finish({})
    assert TokenCache.open(tmp_path).tokens("train").tolist() == [69_999, 0]
    (tmp_path / "small").mkdir()
    writer = CacheWriter(tmp_path / "small", ["train"], np.uint16)
    writer.add_rows("train", [[65_535]])  # the largest uint16
    with pytest.raises(ValueError, match="token id 65536 does not fit uint16"):
        writer.add_rows("train", [[1, 65_536]])
    writer.abort()


def test_file_hash_is_xxh3_128_of_every_byte(tmp_path: Path):
    path = tmp_path / "f"
    data = os.urandom((1 << 20) * 2 + 17)  # more than one read
    path.write_bytes(data)
    assert file_hash(path) == xxhash.xxh3_128(data).hexdigest()


def test_content_digest_is_remembered_by_path_size_and_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cache_module, "SETTLED_S", 0.0)  # remembered at once (see test_cache_sources.py)
    source, root = tmp_path / "a.txt", tmp_path / "root"
    source.write_text("hello")
    first = content_digest(source, root)
    assert first == content_digest(str(source), root) and len(first) == 40  # BLAKE2b, 20 bytes
    assert len(list((root / "sources").iterdir())) == 1
    other = tmp_path / "b.txt"
    other.write_text("hello")
    assert content_digest(other, root) == first  # the content, not the name
    source.write_text("hello!")
    assert content_digest(source, root) != first
    assert source_digests({"train": str(source), "val": None, "test": ""}, root) == {
        "train": content_digest(source, root)
    }


def test_entry_key_depends_on_the_parts_not_their_order():
    key = entry_key({"a": 1, "b": [1, 2]})
    assert key == entry_key({"b": [1, 2], "a": 1}) and len(key) == 32
    assert key != entry_key({"a": 1, "b": [2, 1]})


def test_a_lazy_sequence_indexes_slices_and_compares_as_a_list(tmp_path: Path):
    rows = _entry(tmp_path).rows("train")
    assert len(rows) == 5 and rows[-1] == [7, 8] and rows[-5] == [1, 2, 3] and rows[4] == [7, 8]
    assert rows[np.int64(2)] == [4, 5]
    for bad in (5, -6):
        with pytest.raises(IndexError, match=rf"index {bad} out of range \[0, 5\)"):
            rows[bad]
    assert rows[1:4] == [[], [4, 5], [6]] and rows[::-2] == [[7, 8], [4, 5], [1, 2, 3]]
    assert list(rows) == [[1, 2, 3], [], [4, 5], [6], [7, 8]]
    assert rows == [[1, 2, 3], [], [4, 5], [6], [7, 8]] == rows
    assert rows == ([1, 2, 3], [], [4, 5], [6], [7, 8])
    assert rows != [[1, 2, 3], [], [4, 5], [6]] and rows != [[1, 2, 3], [], [4, 5], [6], [7, 9]]
    assert rows != "abcde" and rows != 5
    with pytest.raises(TypeError):
        hash(rows)
    assert rows + [[9]] == [[1, 2, 3], [], [4, 5], [6], [7, 8], [9]]  # noqa: RUF005 (+ is what is tested)
    assert [[9]] + rows == [[9], [1, 2, 3], [], [4, 5], [6], [7, 8]]  # noqa: RUF005
    assert repr(rows) == "CachedRows(5 items)"


def test_an_empty_lazy_sequence_has_no_items(tmp_path: Path):
    rows = _entry(tmp_path).rows("val")
    with pytest.raises(IndexError, match=r"index 0 out of range \[0, 0\)"):
        rows[0]
    assert rows[:] == [] and list(rows) == []


def test_lazy_sequences_pickle_without_their_open_files(tmp_path: Path):
    cache = _entry(tmp_path)
    rows, texts = cache.rows("train"), cache.texts("docs")
    assert rows[0] == [1, 2, 3]  # the tokens opened
    for seq in (rows, texts):
        state = seq.__getstate__()
        assert state["offsets"] is None and state.get("_tokens") is None
        again = pickle.loads(pickle.dumps(seq))
        assert again == seq and again.offsets.tolist() == seq.offsets.tolist()


def test_cached_rows_of_an_empty_tokens_file(tmp_path: Path):
    (tmp_path / "t.tokens").write_bytes(b"")
    np.save(tmp_path / "t.offsets.npy", np.array([0, 0], np.int64))
    rows = CachedRows(tmp_path / "t.tokens", tmp_path / "t.offsets.npy", np.uint32)
    assert rows.tokens.dtype == np.uint32 and rows.tokens.size == 0 and rows == [[]]


def test_cached_texts_cut_a_file_at_byte_offsets(tmp_path: Path):
    raw = [t.encode() for t in ("é", "ab", "😀")]
    (tmp_path / "x.text").write_bytes(b"".join(raw))
    np.save(tmp_path / "x.offsets.npy", np.cumsum([0, *map(len, raw)]).astype(np.int64))
    texts = CachedTexts(tmp_path / "x.text", tmp_path / "x.offsets.npy")
    assert len(texts) == 3 and texts[1] == "ab" and texts[2] == "😀" and list(texts) == ["é", "ab", "😀"]


def test_open_returns_none_without_a_complete_entry_and_warns_about_a_bad_manifest(tmp_path: Path):
    assert TokenCache.open(tmp_path / "none") is None
    folder = tmp_path / "e"
    folder.mkdir()
    _build(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text("{not json")
    with pytest.warns(UserWarning, match=r"token cache .*: unreadable manifest .*; rebuilding it"):
        assert TokenCache.open(folder) is None
    for older in ({**manifest, "version": FORMAT_VERSION - 1}, {**manifest, "hash": "blake2b"}):
        (folder / MANIFEST).write_text(json.dumps(older))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert TokenCache.open(folder) is None  # an older format: rebuilt without a warning
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert TokenCache.open(folder) is not None


def test_a_changed_file_is_found_only_when_verifying(tmp_path: Path):
    folder = _entry(tmp_path).folder
    data = bytearray((folder / "docs.text").read_bytes())
    data[0] ^= 1
    (folder / "docs.text").write_bytes(bytes(data))
    assert TokenCache.open(folder, verify=False) is not None  # the sizes only
    with pytest.warns(UserWarning, match=r"docs\.text was changed after it was written"):
        assert TokenCache.open(folder) is None
    (folder / "labels.npy").write_bytes(b"")
    with pytest.warns(UserWarning, match=r"labels\.npy has 0 bytes, the manifest says \d+ \(truncated\?\)"):
        assert TokenCache.open(folder, verify=False) is None


def test_open_or_build_builds_once_and_replaces_a_broken_entry(tmp_path: Path):
    builds: list[Path] = []
    folder = tmp_path / "a" / "root" / "entry"

    def build(tmp: Path) -> None:
        builds.append(tmp)
        assert tmp.parent == folder.parent and tmp.name.startswith(".entry.") and tmp.name.endswith(".tmp")
        _build(tmp)

    first = open_or_build(folder, build)
    assert first.folder == folder and len(builds) == 1 and not builds[0].exists()
    assert open_or_build(folder, build).rows("train") == first.rows("train") and len(builds) == 1
    (folder / "train.tokens").write_bytes(b"")
    with pytest.warns(UserWarning, match="train.tokens has 0 bytes"):
        again = open_or_build(folder, build)
    assert len(builds) == 2 and again.tokens("train").tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert sorted(p.name for p in folder.parent.iterdir()) == ["entry"]  # no temporary folder left
    (folder / "labels.npy").unlink()
    with pytest.warns(UserWarning, match=r"token cache .*entry: labels\.npy is missing; rebuilding the cache"):
        open_or_build(folder, build)
    assert len(builds) == 3


def test_a_build_that_writes_no_entry_is_an_error(tmp_path: Path):
    with pytest.raises(RuntimeError, match=r"token cache .*entry: the entry just built cannot be opened"):
        open_or_build(tmp_path / "entry", lambda tmp: None)


def test_an_entry_is_hashed_once_when_built_and_once_each_time_it_is_opened(monkeypatch, tmp_path: Path):
    hashed: list[str] = []

    def counting_hash(path: Path) -> str:
        hashed.append(path.name)
        return file_hash(path)

    monkeypatch.setattr(cache_module, "file_hash", counting_hash)
    folder = tmp_path / "entry"
    open_or_build(folder, _build)  # built: hashed while the manifest is written, not again when opened
    files = sorted(json.loads((folder / MANIFEST).read_text())["files"])
    assert sorted(hashed) == files
    hashed.clear()
    open_or_build(folder, _build)  # opened: every byte checked
    assert sorted(hashed) == files


def test_open_or_build_takes_another_processs_entry_that_appeared_meanwhile(tmp_path: Path):
    folder = tmp_path / "entry"

    def build(tmp: Path) -> None:
        _build(tmp, meta={"by": "us"})
        folder.mkdir()  # another process's entry, renamed into place first
        _build(folder, meta={"by": "them"})

    cache = open_or_build(folder, build)
    assert cache.meta == {"by": "them"} and sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_reuse_entry_takes_the_built_entry_only_when_it_records_the_same_items(tmp_path: Path):
    given, built = tmp_path / "given", tmp_path / "built"
    assert reuse_entry(given, built, {"tokenizer": {"kind": "char"}}) == given  # no entry
    built.mkdir()
    _build(built, meta={"tokenizer": {"kind": "char", "vocab": [1, 2]}, "seed": 1})
    assert reuse_entry(given, built, {"tokenizer": {"vocab": [1, 2], "kind": "char"}}) == built
    assert reuse_entry(given, built, {"tokenizer": {"kind": "char", "vocab": [2, 1]}}) == given
    assert reuse_entry(given, built, {"tokenizer": {"kind": "char", "vocab": [1, 2]}, "other": None}) == built
    assert reuse_entry(given, built, {"seed": 2}) == given
    manifest = json.loads((built / MANIFEST).read_text())
    (built / MANIFEST).write_text(json.dumps({**manifest, "version": FORMAT_VERSION - 1}))
    assert reuse_entry(given, built, {"seed": 1}) == given  # an older format
    (built / MANIFEST).write_text(json.dumps({**manifest, "meta": None}))
    assert reuse_entry(given, built, {"seed": None}) == built and reuse_entry(given, built, {"seed": 1}) == given
    for bad in ("[1, 2]", "{no json"):
        (built / MANIFEST).write_text(bad)
        assert reuse_entry(given, built, {}) == given
