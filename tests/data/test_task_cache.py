"""The token cache of classify (table files) and translate (pairs files): built once and reused,
the same examples and ids as encoding in memory one text at a time, a changed file makes a new
entry, a damaged entry is rebuilt."""

from __future__ import annotations

import pickle
import random
import warnings
from pathlib import Path

import numpy as np
import pytest

from attnkit.api import build_config, prepare
from attnkit.data.cache import MANIFEST, CachedRows
from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.classify.dataset import encode_texts
from attnkit.data.classify.module import TextClassificationDataModule
from attnkit.data.classify.splits import load_splits
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.readers.pairs import read_pairs
from attnkit.data.splits import group_split
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.dataset import split_pairs
from attnkit.data.translate.module import PairsDataModule
from attnkit.tasks import get_task
from attnkit.text.tokenizers import BOS_ID, EOS_ID, build_tokenizer

SPLITS = ("train", "val", "test")


# ---------------------------------------------------------------- classify
def _table(path: Path, n: int = 120, seed: int = 0) -> Path:
    texts, labels, names = generate_synthetic_corpus(n, seed)
    rows = ['"' + t.replace('"', '""') + f'",{names[y]}' for t, y in zip(texts, labels)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def _classify(source: Path, cache: Path, **kw) -> TextClassificationDataModule:
    cfg = ClassifyDataConfig(source=str(source), cache_dir=str(cache), **{"min_freq": 1, "max_len": 12, **kw})
    dm = TextClassificationDataModule(cfg, batch_size=8)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def _reference_classify(cfg: ClassifyDataConfig) -> dict[str, tuple[list, list[list[int]], list[int]]]:
    """The splits encoded in memory, one ``encode`` per text (the 0.1 way)."""
    splits = load_splits(cfg)
    tok = build_tokenizer("text", splits.train_texts, vocab_size=cfg.vocab_size, min_freq=cfg.min_freq)
    out = {}
    for split in SPLITS:
        texts = getattr(splits, f"{split}_texts")
        ids = [tok.encode(t, cfg.max_len) or [tok.unk_id] for t in texts]
        out[split] = (texts, ids, getattr(splits, f"{split}_labels"))
    return out


@pytest.mark.parametrize("files", ["one", "val_and_test"])
def test_classify_cache_equals_the_in_memory_encoding_and_is_reused(tmp_path: Path, files: str):
    source, cache = _table(tmp_path / "train.csv"), tmp_path / "cache"
    kw = {}
    if files == "val_and_test":
        kw = {
            "val_source": str(_table(tmp_path / "val.csv", 30, 1)),
            "test_source": str(_table(tmp_path / "t.csv", 30, 2)),
        }
    dm = _classify(source, cache, **kw)
    assert dm.cache is not None and dm.cache.folder.parent == cache / "classify"
    assert isinstance(dm.datasets["train"].ids, CachedRows) and isinstance(dm.datasets["train"].ids.tokens, np.memmap)
    reference = _reference_classify(dm.cfg)
    for split in SPLITS:
        texts, ids, labels = reference[split]
        ds = dm.datasets[split]
        assert len(ds) == len(ids) > 0
        assert [ds[i] for i in range(len(ds))] == list(zip(ids, labels))
        assert dm.splits is not None and getattr(dm.splits, f"{split}_texts") == texts
        assert getattr(dm.splits, f"{split}_labels") == labels

    manifest = dm.cache.folder / MANIFEST
    written = {p.name: p.stat().st_mtime_ns for p in dm.cache.folder.iterdir()}
    again = _classify(source, cache, **kw)
    assert again.cache is not None and again.cache.folder == dm.cache.folder
    assert {p.name: p.stat().st_mtime_ns for p in again.cache.folder.iterdir()} == written  # opened, not rebuilt
    assert again.tokenizer == dm.tokenizer and again.label_names == dm.label_names
    assert list(again.datasets["val"]) == list(dm.datasets["val"])
    assert manifest.is_file()
    # a checkpoint's artifacts (the tokenizer in the key) give the same encoded data
    restored = TextClassificationDataModule.from_artifacts(dm.cfg, dm.artifacts(), batch_size=8)
    restored.setup()
    assert list(restored.datasets["test"]) == list(dm.datasets["test"])
    ids, mask, labels = next(iter(again.train_dataloader()))
    assert ids.shape[0] == mask.shape[0] == labels.shape[0] == 8 and ids.shape[1] <= 12


def test_classify_a_changed_file_or_config_makes_a_new_entry(tmp_path: Path):
    source, cache = _table(tmp_path / "train.csv"), tmp_path / "cache"
    first = _classify(source, cache)
    assert _classify(source, cache, max_len=5).cache.folder != first.cache.folder
    source.write_text(source.read_text(encoding="utf-8") + "a brand new review,positive\n", encoding="utf-8")
    changed = _classify(source, cache)
    assert changed.cache.folder != first.cache.folder
    assert sum(changed.splits.sizes().values()) == sum(first.splits.sizes().values()) + 1


def test_classify_a_truncated_tokens_file_is_rebuilt_with_a_warning(tmp_path: Path):
    source, cache = _table(tmp_path / "train.csv"), tmp_path / "cache"
    first = _classify(source, cache)
    _assert_truncation_is_rebuilt(first, "train", "train.tokens", lambda: _classify(source, cache))


def _assert_truncation_is_rebuilt(dm, split: str, name: str, again) -> None:  # type: ignore[no-untyped-def]
    """Cutting the entry's file ``name`` short: the next module warns, rebuilds it and reads the same ``split``."""
    expected = list(dm.datasets[split])
    tokens = dm.cache.folder / name
    size = tokens.stat().st_size
    tokens.write_bytes(tokens.read_bytes()[:-4])
    with pytest.warns(UserWarning, match=f"{name} has .* bytes.*truncated"):
        rebuilt = again()
    assert list(rebuilt.datasets[split]) == expected and tokens.stat().st_size == size


def test_encode_texts_equals_encode_one_by_one():
    texts, _, _ = generate_synthetic_corpus(200, 3)
    texts = [*texts, "", "   ", "zzz unseen words"]
    tok = build_tokenizer("text", texts[:100], min_freq=2)
    for max_len in (3, 40, 1000):
        assert encode_texts(tok, texts, max_len) == [tok.encode(t, max_len) or [tok.unk_id] for t in texts]


def test_cached_rows_pickle_for_dataloader_workers(tmp_path: Path):
    dm = _classify(_table(tmp_path / "train.csv"), tmp_path / "cache")
    ds = dm.datasets["train"]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.ids._tokens is None and list(copy) == list(ds)


# ---------------------------------------------------------------- translate
def _pairs_file(path: Path, n: int = 150, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = ["the", "dog", "cat", "sees", "a", "house", "big", "small", "red", "runs"]
    palabras = ["el", "perro", "gato", "ve", "una", "casa", "grande", "pequeño", "rojo", "corre"]
    lines = []
    for _ in range(n):
        idx = [rng.randrange(len(words)) for _ in range(rng.randint(1, 9))]
        lines.append(" ".join(words[i] for i in idx).capitalize() + ".\t" + " ".join(palabras[i] for i in idx) + ".")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _translate(source: Path, cache: Path, **kw) -> PairsDataModule:
    cfg = PairsDataConfig(source=str(source), cache_dir=str(cache), **{"max_len": 7, **kw})
    dm = PairsDataModule(cfg, batch_size=4)
    dm.prepare_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pairs over max_len are counted in a warning
        dm.setup("fit")
    return dm


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_translate_cache_equals_the_in_memory_encoding_and_is_reused(tmp_path: Path, kind: str):
    source, cache = _pairs_file(tmp_path / "pairs.tsv"), tmp_path / "cache"
    kw = {"tokenizer": kind, "vocab_size": 270 if kind == "bpe" else None, "max_len": 7 if kind != "char" else 30}
    dm = _translate(source, cache, **kw)
    assert dm.cache is not None and dm.cache.folder.parent == cache / "translate"
    # the reference: split and encode in memory, one encode per sentence
    splits = split_pairs(read_pairs(source), dm.cfg.val_fraction, dm.cfg.test_fraction, dm.cfg.seed)
    train_texts = [s for s, _ in splits.train] + [t for _, t in splits.train]
    tok = build_tokenizer(kind, train_texts, vocab_size=dm.cfg.vocab_size)
    assert dm.tokenizers[0] == tok
    m = dm.cfg.max_len
    for split in SPLITS:
        pairs = getattr(splits, split)
        assert getattr(dm.splits, split) == pairs
        encoded = [(tok.encode(s), tok.encode(t), t) for s, t in pairs]
        if split == "train":
            encoded = [e for e in encoded if max(len(e[0]), len(e[1])) <= m]
        expected = [([*s[:m], EOS_ID], [BOS_ID, *t[:m], EOS_ID], i) for i, (s, t, _) in enumerate(encoded)]
        ds = dm.datasets[split]
        assert [ds[i] for i in range(len(ds))] == expected
        assert ds.refs == [t for _, _, t in encoded]
        assert ds.lengths() == [len(s) + len(t) for s, t, _ in expected]
    assert dm.dropped["train"] == len(splits.train) - len(dm.datasets["train"])

    written = {p.name: p.stat().st_mtime_ns for p in dm.cache.folder.iterdir()}
    again = _translate(source, cache, **kw)
    assert again.cache.folder == dm.cache.folder
    assert {p.name: p.stat().st_mtime_ns for p in again.cache.folder.iterdir()} == written  # opened, not rebuilt
    assert again.dropped == dm.dropped and again.tokenizers == dm.tokenizers
    assert list(again.datasets["val"]) == list(dm.datasets["val"])
    restored = PairsDataModule.from_artifacts(dm.cfg, dm.artifacts(), batch_size=4)
    with pytest.warns(UserWarning, match="longer than data.max_len"):  # counted again on every setup
        restored.setup()
    assert list(restored.datasets["test"]) == list(dm.datasets["test"])
    batch = next(iter(again.train_dataloader()))
    assert batch[0].shape[0] <= 4 and len(batch) == 5


def test_translate_a_changed_file_makes_a_new_entry_and_truncation_is_rebuilt(tmp_path: Path):
    source, cache = _pairs_file(tmp_path / "pairs.tsv"), tmp_path / "cache"
    first = _translate(source, cache)
    assert _translate(source, cache, reverse=True).cache.folder != first.cache.folder
    source.write_text(source.read_text(encoding="utf-8") + "A new pair.\tUn par nuevo.\n", encoding="utf-8")
    changed = _translate(source, cache)
    assert changed.cache.folder != first.cache.folder
    assert sum(changed.splits.sizes().values()) == sum(first.splits.sizes().values()) + 1
    _assert_truncation_is_rebuilt(changed, "val", "val.tgt.tokens", lambda: _translate(source, cache))


def test_prepare_builds_the_entry_that_training_opens(tmp_path: Path):
    source, cache = _table(tmp_path / "train.csv"), tmp_path / "cache"
    folder = prepare("classify", data={"source": str(source), "cache_dir": str(cache)})
    assert folder is not None and (folder / MANIFEST).is_file() and folder.parent == cache / "classify"
    cfg = build_config("classify", overrides={"data": {"source": str(source), "cache_dir": str(cache)}})
    dm = get_task("classify").build_datamodule(cfg)
    dm.setup("fit")
    assert dm.cache.folder == folder


def test_group_split_of_strings_equals_the_numpy_array_path():
    rng = random.Random(0)
    for seed in range(10):
        groups = [
            "".join(rng.choice("abñé😀 Z") for _ in range(rng.randint(1, 5))) for _ in range(rng.randint(5, 2000))
        ]
        labels = [rng.randrange(3) for _ in groups]
        for stratify in (None, labels):
            as_list = group_split(groups, [0.1, 0.2], seed, stratify=stratify)
            as_array = group_split(np.asarray(groups), [0.1, 0.2], seed, stratify=stratify)
            assert all(np.array_equal(a, b) for a, b in zip(as_list, as_array))
