"""The token cache: built once and reused, keyed by content, a changed or truncated entry rebuilt,
memory-mapped uint16 tokens, folder and glob sources, the vectorised char encoder."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from attnkit.data.cache import MANIFEST, TokenCache, cache_root
from attnkit.data.encode import fast_encoder
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.readers.text_files import read_corpus
from attnkit.text.tokenizers import build_tokenizer


def _corpus(folder: Path, name: str = "c.txt", n: int = 30) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n\n".join(f"Doc {i} of {name}: café 😀 {'x' * (i % 7)}." for i in range(n)), encoding="utf-8")
    return path


def _module(source: Path | str, cache: Path, **kw) -> LanguageModelDataModule:
    cfg = LMDataConfig(source=str(source), cache_dir=str(cache), val_fraction=0.2, test_fraction=0.2, **kw)
    dm = LanguageModelDataModule(cfg, block=8, batch_size=4)
    dm.setup()
    return dm


def test_second_run_reuses_the_cache_and_a_change_makes_a_new_entry(tmp_path: Path):
    source, cache = _corpus(tmp_path / "data"), tmp_path / "cache"
    first = _module(source, cache)
    manifest = first.cache.folder / MANIFEST
    assert first.cache.folder.parent == cache / "lm" and first.cache.dtype == np.uint16
    assert isinstance(first.datasets["train"].tokens, np.memmap)
    written = manifest.stat().st_mtime_ns
    second = _module(source, cache)
    assert second.cache.folder == first.cache.folder and manifest.stat().st_mtime_ns == written  # not rebuilt
    assert second.tokenizer == first.tokenizer
    assert _module(source, cache, tokenizer="word").cache.folder != first.cache.folder  # config in the key
    source.write_text(source.read_text() + "\n\nOne more document.", encoding="utf-8")
    changed = _module(source, cache)
    assert changed.cache.folder != first.cache.folder  # content in the key
    assert len(changed.documents["train"]) + len(changed.documents["val"]) + len(changed.documents["test"]) == 31


@pytest.mark.parametrize("damage", ["truncate", "change", "delete"])
def test_a_damaged_entry_is_rebuilt_never_used(tmp_path: Path, damage: str):
    source, cache = _corpus(tmp_path / "data"), tmp_path / "cache"
    first = _module(source, cache)
    folder = first.cache.folder
    tokens = folder / "train.tokens"
    good = tokens.read_bytes()
    del first
    if damage == "truncate":
        tokens.write_bytes(good[:-6])
    elif damage == "change":
        tokens.write_bytes(good[:10] + bytes([good[10] ^ 1]) + good[11:])
    else:
        tokens.unlink()
    with pytest.warns(UserWarning, match=r"token cache .*train\.tokens .*rebuilding"):
        assert TokenCache.open(folder) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = _module(source, cache)
    assert again.cache.folder == folder and tokens.read_bytes() == good
    assert TokenCache.open(folder) is not None


def test_manifest_is_written_last_and_an_entry_without_it_is_not_used(tmp_path: Path):
    source, cache = _corpus(tmp_path / "data"), tmp_path / "cache"
    folder = _module(source, cache).cache.folder
    manifest = json.loads((folder / MANIFEST).read_text())
    assert {"train.tokens", "train.offsets.npy", "val.tokens", "test.tokens"} <= set(manifest["files"])
    (folder / MANIFEST).unlink()
    assert TokenCache.open(folder) is None
    assert _module(source, cache).cache.folder == folder  # rebuilt in place
    assert not [p for p in folder.parent.iterdir() if p.name.endswith(".tmp")]  # no leftovers


def test_folder_and_glob_sources(tmp_path: Path):
    data = tmp_path / "data"
    _corpus(data, "a.txt", 10)
    _corpus(data / "sub", "b.txt", 10)
    (data / "notes.md").write_text("not read")
    everything = read_corpus(data)
    assert len(everything) == 20 and "Doc 0 of a.txt" in everything[0] and "b.txt" in everything[-1]
    assert len(read_corpus(str(data / "*.txt"))) == 10
    dm = _module(str(data / "**" / "*.txt"), tmp_path / "cache")
    assert sum(len(dm.documents[s]) for s in ("train", "val", "test")) == 20
    with pytest.raises(FileNotFoundError, match="no file matches"):
        read_corpus(str(tmp_path / "nothing" / "*.txt"))


def test_cache_root_default_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("ATTNKIT_CACHE", raising=False)
    assert cache_root() == Path.home() / ".cache" / "attnkit"
    monkeypatch.setenv("ATTNKIT_CACHE", str(tmp_path))
    assert cache_root() == tmp_path and cache_root(tmp_path / "x") == tmp_path / "x"


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_fast_encoder_gives_the_tokenizer_ids(kind: str):
    docs = ["Hello café 😀", "e\u0301 new\nline", "unseen ζ", "a"]
    tok = build_tokenizer(kind, docs[:2] * 3, **({"vocab_size": 300} if kind == "bpe" else {}))
    tokens, lengths = fast_encoder(tok)(docs)
    expected = [tok.encode(d, add_bos=True, add_eos=True) for d in docs]
    assert lengths.tolist() == [len(e) for e in expected]
    assert tokens.tolist() == [i for e in expected for i in e]


def test_default_cache_location_is_not_the_home_folder_in_tests():
    assert os.environ["ATTNKIT_CACHE"] and not Path(os.environ["ATTNKIT_CACHE"]).is_relative_to(Path.home() / ".cache")


def test_prepare_command_builds_the_cache_that_train_then_uses(tmp_path: Path):
    from click.testing import CliRunner

    from attnkit.cli import main

    source, cache = _corpus(tmp_path / "data"), tmp_path / "cache"
    args = ["prepare", "lm", "--data", str(source), f"data.cache_dir={cache}", "data.val_fraction=0.2"]
    result = CliRunner().invoke(main, [*args, "data.test_fraction=0.2"])
    assert result.exit_code == 0, result.output
    folder = Path(result.output.strip().rpartition("token cache: ")[2])
    assert TokenCache.open(folder) is not None and folder.parent == cache / "lm"
    assert _module(source, cache).cache.folder == folder  # what training opens
    bad = CliRunner().invoke(main, ["prepare", "lm", "--data", str(tmp_path / "missing.txt")])
    assert bad.exit_code != 0 and "does not exist" in bad.output


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_tokenizing_in_worker_processes_builds_the_same_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
):
    monkeypatch.setattr(LanguageModelDataModule, "BATCH_CHARS", 300)  # many batches: each worker gets several
    source = _corpus(tmp_path / "data", n=400)
    one = _module(source, tmp_path / "one", tokenizer=kind, tokenize_workers=1)
    two = _module(source, tmp_path / "two", tokenizer=kind, tokenize_workers=2)
    assert one.cache.folder.name == two.cache.folder.name  # the number of workers is not in the key
    files = sorted(p.name for p in one.cache.folder.iterdir())
    assert files == sorted(p.name for p in two.cache.folder.iterdir()) and "train.tokens" in files
    for name in files:
        assert (one.cache.folder / name).read_bytes() == (two.cache.folder / name).read_bytes(), name
    expected = [one.tokenizer.encode(d, add_bos=True, add_eos=True) for d in one.documents["train"]]
    assert two.datasets["train"].tokens.tolist() == [i for e in expected for i in e]


def test_encode_batches_keeps_the_order_and_raises_a_workers_error():
    from attnkit.data.encode import encode_batches

    docs = [f"document {i}: {'word ' * (i % 5)}end." for i in range(60)]
    tok = build_tokenizer("bpe", docs, vocab_size=300)
    batches = [[docs[i : i + 3], docs[i + 3 : i + 5]] for i in range(0, 60, 5)]
    serial = list(encode_batches(tok, iter(batches), workers=1))
    parallel = list(encode_batches(tok, iter(batches), workers=2, ahead=1))
    assert [b for b, _ in parallel] == batches
    for (_, a), (_, b) in zip(serial, parallel, strict=True):
        assert [(t.tolist(), n.tolist()) for t, n in a] == [(t.tolist(), n.tolist()) for t, n in b]
    with pytest.raises(TypeError):
        list(encode_batches(tok, iter([*batches[:3], [[None]]]), workers=2))


def test_how_many_workers_tokenize(monkeypatch: pytest.MonkeyPatch):
    from attnkit.data.encode import PARALLEL_BYTES, tokenize_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    bpe, char = build_tokenizer("bpe", ["a b c"] * 5, vocab_size=300), build_tokenizer("char", ["abc"])
    assert tokenize_workers(None, bpe, PARALLEL_BYTES) == 3  # one per core this process may use
    assert tokenize_workers(None, bpe, PARALLEL_BYTES - 1) == 1  # small text: this process
    assert tokenize_workers(None, char, 10 * PARALLEL_BYTES) == 1  # char: a vectorised lookup
    assert tokenize_workers(2, char, 0) == 2  # asked for
    with pytest.raises(ValueError, match="tokenize_workers"):
        LMDataConfig(tokenize_workers=0)


def _encode_in_a_daemon(queue) -> None:  # type: ignore[no-untyped-def]
    from attnkit.data.encode import encode_batches

    tok = build_tokenizer("word", ["a b c", "d e"])
    queue.put(
        [(t.tolist(), n.tolist()) for _, out in encode_batches(tok, iter([[["a b", "c d e"]]]), 2) for t, n in out]
    )


def test_a_daemon_process_tokenizes_in_itself():
    """A daemon process may not start workers (multiprocessing refuses): it encodes in itself."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    daemon = context.Process(target=_encode_in_a_daemon, args=(queue,), daemon=True)
    daemon.start()
    got = queue.get(timeout=60)
    daemon.join(timeout=60)
    tok = build_tokenizer("word", ["a b c", "d e"])
    expected = [tok.encode(d, add_bos=True, add_eos=True) for d in ["a b", "c d e"]]
    assert daemon.exitcode == 0 and got == [([i for e in expected for i in e], [len(e) for e in expected])]


def test_a_large_corpus_builds_its_vocabulary_on_a_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The word/BPE trainers read every k-th training document once the corpus is over
    data.tokenizer_sample_mb; below it (and with None) every training document."""
    import attnkit.data.lm.module as lm_module

    seen: list[int] = []

    def counting(kind, texts, **kw):  # type: ignore[no-untyped-def]
        texts = list(texts)
        seen.append(len(texts))
        return build_tokenizer(kind, texts, **kw)

    monkeypatch.setattr(lm_module, "build_tokenizer", counting)
    source = _corpus(tmp_path / "data", n=400)  # about 12 kB
    chars = sum(len(d) for d in read_corpus(source))
    full = _module(source, tmp_path / "a", tokenizer="word", tokenizer_sample_mb=None)
    train = len(full.documents["train"])
    _module(source, tmp_path / "b", tokenizer="word", tokenizer_sample_mb=chars / 4e6)  # a quarter
    _module(source, tmp_path / "c", tokenizer="word")  # the default, 64 MB: all
    assert seen[0] == train and seen[2] == train
    assert abs(seen[1] - train / 4) <= 1
    sampled = _module(source, tmp_path / "b", tokenizer="word", tokenizer_sample_mb=chars / 4e6)
    expected = [sampled.tokenizer.encode(d, add_bos=True, add_eos=True) for d in sampled.documents["train"]]
    assert sampled.datasets["train"].tokens.tolist() == [i for e in expected for i in e]  # every document encoded
