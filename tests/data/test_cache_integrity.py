"""Issue 21, the token cache proved: every byte of a cache file is checked when an entry is opened
(a byte flipped anywhere in a file of more than 64 MB is found, the entry rebuilt with a warning
naming the file, never used), and a corpus with one configuration gets one entry, built once, by
``attnkit train`` from the command line (training, testing and the run's report) and by a data
module given the tokenizer of the run that built it (lm, classify, translate)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import attnkit.data.cache as cache_module
from attnkit.data.cache import MANIFEST, CacheWriter, TokenCache, open_or_build
from attnkit.data.classify.config import ClassifyDataConfig
from attnkit.data.classify.module import TextClassificationDataModule
from attnkit.data.generators.reviews import generate_synthetic_corpus
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.translate.config import PairsDataConfig
from attnkit.data.translate.module import PairsDataModule

LARGE = (70 << 20) + 12_346  # bytes of the large file: more than 64 MiB, not a multiple of a block
_OLD_BLOCKS, _OLD_BLOCK = 64, 1 << 16  # format 1 hashed these 64 blocks of 64 KiB only


def _between_old_blocks(size: int, i: int) -> int:
    """A byte in the middle of the gap after block ``i`` of the 64 that format 1 hashed."""
    start = (size - _OLD_BLOCK) * i // (_OLD_BLOCKS - 1)
    following = (size - _OLD_BLOCK) * (i + 1) // (_OLD_BLOCKS - 1)
    return (start + _OLD_BLOCK + following) // 2


def _flip(path: Path, position: int) -> None:
    """Invert every bit of the byte at ``position`` (twice: the file as it was)."""
    with path.open("r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0xFF]))


class _Large:
    """A cache entry whose ``train.tokens`` is ``LARGE`` bytes of seeded random ids, and its builds."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.builds = folder, 0
        self.tokens = np.random.default_rng(21).integers(0, 1 << 16, size=LARGE // 2, dtype=np.uint16)
        self.path = folder / "train.tokens"

    def build(self, tmp: Path) -> None:
        self.builds += 1
        writer = CacheWriter(tmp, ["train"], np.dtype(np.uint16))
        writer.add("train", self.tokens, np.array([self.tokens.size // 2, self.tokens.size - self.tokens.size // 2]))
        writer.finish({"corpus": "generated"})

    def open_or_build(self) -> TokenCache:
        return open_or_build(self.folder, self.build)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> _Large:
    entry = _Large(tmp_path_factory.mktemp("large") / "entry")
    entry.open_or_build()
    assert entry.builds == 1 and entry.path.stat().st_size == LARGE > 64 << 20
    return entry


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.integers(0, LARGE - 1))
@example(position=0)
@example(position=LARGE - 1)
@example(position=_between_old_blocks(LARGE, 0))
@example(position=_between_old_blocks(LARGE, 31))
@example(position=_between_old_blocks(LARGE, 62))
def test_a_byte_flipped_anywhere_in_a_large_file_is_found(large: _Large, position: int):
    _flip(large.path, position)
    try:
        with pytest.warns(UserWarning, match=r"token cache .*: train\.tokens was changed .*rebuilding"):
            assert TokenCache.open(large.folder) is None
    finally:
        _flip(large.path, position)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file as written: opened, no warning
        assert TokenCache.open(large.folder) is not None


def test_a_large_entry_with_a_flipped_byte_is_rebuilt_never_used(large: _Large):
    position = _between_old_blocks(LARGE, 40)
    _flip(large.path, position)
    with pytest.warns(UserWarning, match=r"train\.tokens was changed"):
        cache = large.open_or_build()
    assert large.builds == 2 and cache.folder == large.folder
    assert np.array_equal(cache.tokens("train"), large.tokens)  # the rebuilt bytes, not the flipped one
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert large.open_or_build().folder == large.folder and large.builds == 2  # and now used as it is


def test_an_entry_of_the_sampled_format_is_rebuilt(tmp_path: Path):
    """Entries of format 1 (hashes of sampled blocks) cannot be checked in full: rebuilt (format 2 entries,
    whose manifest has no checksum of its own, too: test_cache_sources.py)."""
    entry = _Large(tmp_path / "entry")
    entry.tokens = entry.tokens[:1000]
    entry.open_or_build()
    manifest = (entry.folder / MANIFEST).read_text()
    (entry.folder / MANIFEST).write_text(manifest.replace('"version": 3', '"version": 1'))
    assert TokenCache.open(entry.folder) is None
    assert entry.open_or_build().manifest["version"] == 3 and entry.builds == 2


# ---------------------------------------------------------------- one entry, built once
def _entries(cache: Path) -> list[Path]:
    return sorted(p.parent for p in cache.glob("*/*/" + MANIFEST))


def _lm(tmp: Path, cache: Path) -> tuple[Any, Callable[[dict[str, Any]], Any]]:
    source = tmp / "corpus.txt"
    source.write_text("\n\n".join(f"Document {i}: {'abc ' * (i % 9)}end." for i in range(60)), encoding="utf-8")
    cfg = LMDataConfig(source=str(source), cache_dir=str(cache), tokenizer="word", val_fraction=0.2, test_fraction=0.2)
    return LanguageModelDataModule(cfg, block=8), lambda art: LanguageModelDataModule.from_artifacts(cfg, art, block=8)


def _classify(tmp: Path, cache: Path) -> tuple[Any, Callable[[dict[str, Any]], Any]]:
    texts, labels, names = generate_synthetic_corpus(120, 0)
    source = tmp / "train.csv"
    rows = ['"' + t.replace('"', '""') + f'",{names[y]}' for t, y in zip(texts, labels)]
    source.write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    cfg = ClassifyDataConfig(source=str(source), cache_dir=str(cache), min_freq=1, max_len=12)
    return TextClassificationDataModule(cfg), lambda art: TextClassificationDataModule.from_artifacts(cfg, art)


def _translate(tmp: Path, cache: Path) -> tuple[Any, Callable[[dict[str, Any]], Any]]:
    source = tmp / "pairs.tsv"
    source.write_text("".join(f"{i} apples and {i % 7} pears.\t{i} manzanas y {i % 7} peras.\n" for i in range(90)))
    cfg = PairsDataConfig(source=str(source), cache_dir=str(cache), max_len=12)
    return PairsDataModule(cfg), lambda art: PairsDataModule.from_artifacts(cfg, art)


@pytest.mark.parametrize("make", [_lm, _classify, _translate], ids=["lm", "classify", "translate"])
def test_a_trained_runs_data_is_built_once_in_one_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Callable[..., Any]
):
    """As ``attnkit train``: ``setup`` before the Trainer, whose ``fit`` and ``test`` call
    ``prepare_data`` again; then the run's report (or ``attnkit evaluate``) makes a module given the
    run's tokenizer. One build, one entry; opened and checked once per module."""
    cache = tmp_path / "cache"
    first, given = make(tmp_path, cache)
    cls = type(first)
    builds: list[Path] = []
    build = cls._build_cache
    monkeypatch.setattr(cls, "_build_cache", lambda self, folder: (builds.append(folder), build(self, folder))[1])
    hashed: list[str] = []
    file_hash = cache_module.file_hash
    monkeypatch.setattr(cache_module, "file_hash", lambda path: (hashed.append(path.name), file_hash(path))[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # translate counts pairs over max_len
        first.setup("fit")
        checked = len(hashed)
        first.prepare_data()  # Trainer.fit
        first.prepare_data()  # Trainer.test
        assert len(hashed) == checked  # not opened (hashed) again
        again = given(first.artifacts())
        again.prepare_data()
        again.setup("validate")
    assert len(builds) == 1 and _entries(cache) == [first.cache.folder] == [again.cache.folder]
    assert again.artifacts() == first.artifacts()
    # the entry is checked when the second module opens it: a flipped byte rebuilds it in place
    tokens = sorted(first.cache.folder.glob("train*.tokens"))[0]
    _flip(tokens, tokens.stat().st_size // 2)
    with pytest.warns(UserWarning, match=rf"{tokens.name} was changed"):
        rebuilt = given(first.artifacts())
        rebuilt.prepare_data()
    assert len(builds) == 2 and _entries(cache) == [first.cache.folder] and rebuilt.artifacts() == first.artifacts()


def test_a_module_given_another_tokenizer_does_not_take_the_entry(tmp_path: Path):
    cache = tmp_path / "cache"
    first, given = _lm(tmp_path, cache)
    first.setup("fit")
    other = LanguageModelDataModule(first.cfg.model_copy(update={"tokenizer": "char"}), block=8)
    other.setup("fit")
    assert other.cache.folder != first.cache.folder
    third = given(other.artifacts())  # the char tokenizer, on the word config
    third.setup("fit")
    assert third.cache.folder not in (first.cache.folder, other.cache.folder) and len(_entries(cache)) == 3
    assert third.tokenizer.to_dict() == other.tokenizer.to_dict()


def test_train_lm_from_the_command_line_builds_one_entry_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The issue's reproduction: ``attnkit train lm --data FILE`` wrote two complete entries with
    the same meta (the report's module, given the run's tokenizer, keyed the data anew)."""
    from click.testing import CliRunner

    from attnkit.cli import main

    source, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    source.write_text("\n\n".join(f"Document {i}: {'abc ' * (i % 9)}end." for i in range(60)), encoding="utf-8")
    builds: list[Path] = []
    build = LanguageModelDataModule._build_cache
    monkeypatch.setattr(
        LanguageModelDataModule, "_build_cache", lambda self, folder: (builds.append(folder), build(self, folder))[1]
    )
    args = ["train", "lm", "--data", str(source), "--output_dir", str(tmp_path / "runs"), f"data.cache_dir={cache}"]
    tiny = ["model.d_model=16", "model.num_layers=1", "model.num_heads=2", "model.dim_feedforward=32"]
    trainer = ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.progress_bar=false"]
    for run in range(2):
        result = CliRunner().invoke(main, [*args, f"name=run{run}", *tiny, *trainer])
        assert result.exit_code == 0, result.output
        assert (tmp_path / "runs" / "lm" / f"run{run}" / "report.html").is_file()  # the report ran too
        assert len(builds) == 1 and len(_entries(cache)) == 1
    assert not list((cache / "lm").glob(".*.tmp"))
