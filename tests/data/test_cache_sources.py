"""Issue 33, point 8: a token cache keyed by its sources' contents notices a source replaced with
contents of the same size and its old mtime kept (``cp -p``, ``rsync -a``, ``tar -x``): the memo of
source digests is keyed by the ctime and inode too, which no user can set back, and a file changed
within its filesystem's time granularity is not remembered at all."""

from __future__ import annotations

import hashlib
import os
import time
import types
from pathlib import Path

import pytest

import attnkit.data.cache as cache_module
from attnkit.data.cache import content_digest
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule


def _blake2b(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=20).hexdigest()


def _replace_keeping_mtime(path: Path, data: bytes) -> None:
    """Write ``data`` (the same size) over ``path`` and set its old atime and mtime back, as ``cp -p``
    does; after the ctime's clock has moved on (a later tick than the file's last change)."""
    before = path.stat()
    assert len(data) == before.st_size
    for _ in range(200):
        path.write_bytes(data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        if path.stat().st_ctime_ns != before.st_ctime_ns:
            break
        time.sleep(0.01)  # the same clock tick as the original write: again
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns


def test_a_source_replaced_with_its_old_size_and_mtime_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cache_module, "SETTLED_S", 0.0)  # remembered at once (not only 2 s after a change)
    source, root = tmp_path / "corpus.txt", tmp_path / "root"
    source.write_bytes(b"the cat sat on the mat")
    assert content_digest(source, root) == _blake2b(b"the cat sat on the mat")
    assert len(list((root / "sources").iterdir())) == 1  # remembered
    _replace_keeping_mtime(source, b"the dog ran on the mat")
    assert content_digest(source, root) == _blake2b(b"the dog ran on the mat")
    # rsync -a: a new file renamed over the old one, its mtime set back (a new inode, a new ctime)
    staged = tmp_path / ".corpus.txt.staged"
    staged.write_bytes(b"the owl sat in the elm")
    old = source.stat()
    os.utime(staged, ns=(old.st_atime_ns, old.st_mtime_ns))
    os.replace(staged, source)
    assert content_digest(source, root) == _blake2b(b"the owl sat in the elm")


def test_a_source_changed_within_the_settling_time_is_not_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two changes within one tick of the filesystem's clock can leave every time as it was: a digest
    is remembered only once the file's last change (ctime) is ``SETTLED_S`` older than the hashing."""
    source, root = tmp_path / "corpus.txt", tmp_path / "root"
    source.write_bytes(b"abc")
    changed = source.stat().st_ctime_ns
    for offset_s, remembered in ((1.9, False), (2.1, True)):
        monkeypatch.setattr(
            cache_module, "time", types.SimpleNamespace(time_ns=lambda o=offset_s: changed + int(o * 1e9))
        )
        assert content_digest(source, root) == _blake2b(b"abc")
        assert (root / "sources").is_dir() == remembered, offset_s
    assert cache_module.SETTLED_S == 2.0


def test_a_corpus_replaced_with_its_old_mtime_gets_a_new_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The data module reads the new text: another entry, built from it (the old entry was used before)."""
    monkeypatch.setattr(cache_module, "SETTLED_S", 0.0)
    source, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    old = "\n\n".join(f"Document {i}: apples and pears." for i in range(40))
    new = "\n\n".join(f"Document {i}: pears and apples." for i in range(40))
    source.write_text(old, encoding="utf-8")
    cfg = LMDataConfig(source=str(source), cache_dir=str(cache), tokenizer="word", val_fraction=0.2, test_fraction=0.2)

    def texts() -> tuple[Path, str]:
        dm = LanguageModelDataModule(cfg, block=8)
        dm.setup("fit")
        assert dm.cache is not None
        ids = [int(i) for split in ("train", "val", "test") for i in dm.cache.tokens(split)]
        documents = [doc for split in ("train", "val", "test") for doc in dm.documents[split]]
        return dm.cache.folder, dm.tokenizer.decode(ids) + "\n".join(documents)

    first, first_text = texts()
    assert "apples and pears" in first_text and "pears and apples" not in first_text
    _replace_keeping_mtime(source, new.encode("utf-8"))
    second, second_text = texts()
    assert second != first
    assert "pears and apples" in second_text and "apples and pears" not in second_text


def test_a_manifest_changed_after_it_was_written_is_rebuilt_never_used(tmp_path: Path):
    """The manifest hashes its own contents: a changed meta (e.g. one character of the tokenizer it
    records) would otherwise be used as it is; an entry of format 2 (no such checksum) is rebuilt."""
    import json
    import warnings

    import numpy as np

    from attnkit.data.cache import FORMAT_VERSION, MANIFEST, CacheWriter, TokenCache, manifest_checksum, open_or_build

    builds = []

    def build(folder: Path) -> None:
        builds.append(folder)
        writer = CacheWriter(folder, ["train"], np.dtype(np.uint16))
        writer.add_rows("train", [[1, 2, 3], [4]])
        writer.finish({"tokenizer": {"vocab": ["a", "b"]}})

    entry = tmp_path / "entry"
    open_or_build(entry, build)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert FORMAT_VERSION == 3 and manifest["checksum"] == manifest_checksum(manifest)
    text = (entry / MANIFEST).read_text()
    (entry / MANIFEST).write_text(text.replace('"b"', '"c"'))
    with pytest.warns(UserWarning, match=r"manifest.json was changed after it was written .*rebuilding"):
        assert TokenCache.open(entry) is None
    for changed in ({**manifest, "checksum": "0" * 32}, {k: v for k, v in manifest.items() if k != "checksum"}):
        (entry / MANIFEST).write_text(json.dumps(changed))
        with pytest.warns(UserWarning, match="its checksum differs"):
            assert TokenCache.open(entry) is None
    older = {k: v for k, v in manifest.items() if k != "checksum"} | {"version": 2}
    (entry / MANIFEST).write_text(json.dumps(older))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TokenCache.open(entry) is None  # format 2: rebuilt without a word, as older formats
    (entry / MANIFEST).write_text("[1, 2]")
    with pytest.warns(UserWarning, match="manifest.json is not a manifest"):
        assert TokenCache.open(entry) is None
    (entry / MANIFEST).write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TokenCache.open(entry).meta == {"tokenizer": {"vocab": ["a", "b"]}}
    (entry / MANIFEST).write_text(text.replace('"b"', '"c"'))
    with pytest.warns(UserWarning, match="was changed"):
        assert open_or_build(entry, build).meta == {"tokenizer": {"vocab": ["a", "b"]}} and len(builds) == 2
