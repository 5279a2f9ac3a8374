"""Language-modelling data: reading a corpus, the built-in grammar, packing into blocks, the data module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from attnkit.data.generators.grammar import generate_grammar_corpus
from attnkit.data.lm.blocks import IGNORE_INDEX, pack_documents
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.lm.module import LanguageModelDataModule
from attnkit.data.readers.text_files import read_corpus, split_documents
from attnkit.text.tokenizers import BOS_ID, EOS_ID, PAD_ID, UNK_ID, build_tokenizer


def test_split_documents_on_blank_lines_and_lines():
    text = "First doc\nline two\n\n  \t\nSecond doc\r\n\r\nThird\n\n\n\n"
    assert split_documents(text) == ["First doc\nline two", "Second doc", "Third"]
    assert split_documents(text, "line") == ["First doc", "line two", "Second doc", "Third"]
    assert split_documents("\n \n") == []
    with pytest.raises(ValueError, match="split_on must be"):
        split_documents(text, "sentence")


def test_read_corpus(tmp_path: Path):
    path = tmp_path / "c.txt"
    path.write_bytes("\ufeffCafé 😀\n\nDeux\n".encode())
    assert read_corpus(path) == ["Café 😀", "Deux"]  # BOM dropped


def test_non_utf8_file_names_line_and_byte_offset(tmp_path: Path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"good line\nsecond line\ncaf\xe9 au lait\n")
    with pytest.raises(ValueError, match=r"latin1.txt:3: not valid UTF-8 at byte offset 25 \(line 3, byte 4"):
        read_corpus(path)


def test_empty_missing_and_folder_sources(tmp_path: Path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\t\n")
    with pytest.raises(ValueError, match=r"empty\.txt: the corpus is empty"):
        read_corpus(empty)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_corpus(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="the corpus is empty"):
        read_corpus(tmp_path)  # a folder: its *.txt files (here only empty.txt)


def test_pack_documents_layout():
    inputs, targets = pack_documents([[5, 6], [7]], block=3)
    # stream: <bos> 5 6 <eos> <bos> 7 <eos>
    assert inputs.tolist() == [[BOS_ID, 5, 6], [EOS_ID, BOS_ID, 7]]
    assert targets.tolist() == [[5, 6, EOS_ID], [IGNORE_INDEX, 7, EOS_ID]]  # the <bos> target is ignored
    inputs, targets = pack_documents([[5, 6], [7]], block=4)
    assert inputs.tolist() == [[BOS_ID, 5, 6, EOS_ID], [BOS_ID, 7, PAD_ID, PAD_ID]]
    assert targets.tolist() == [[5, 6, EOS_ID, IGNORE_INDEX], [7, EOS_ID, IGNORE_INDEX, IGNORE_INDEX]]


def test_pack_documents_predicts_every_token_once():
    docs = [list(range(4, 4 + n)) for n in (5, 1, 17, 3, 0, 9)]
    for block in (1, 4, 7, 64):
        inputs, targets = pack_documents(docs, block)
        real = targets[targets != IGNORE_INDEX]
        expected = [t for d in docs for t in (*d, EOS_ID)]
        assert real.tolist() == expected
        assert torch.equal(inputs.flatten()[1:][: len(expected)].ne(PAD_ID).sum(), torch.tensor(len(expected)))


def test_grammar_corpus_is_deterministic_and_well_formed():
    docs = generate_grammar_corpus(300, seed=3)
    assert docs == generate_grammar_corpus(300, seed=3) != generate_grammar_corpus(300, seed=4)
    text = " ".join(docs)
    sentences = re.split(r"(?<=[.?]) ", text)
    assert all(s[0].isupper() and s[-1] in ".?" for s in sentences)
    assert not re.search(r"\ba [aeiou]", text) and not re.search(r"\ban [^aeiou]", text)  # a/an
    for s in sentences:  # questions: do/does/did + subject + base form
        if s.startswith("Does "):
            assert not re.search(r"^Does (the|some|these|those|many|two|three) \w+s\b", s) or "that" in s
    assert re.search(r"\bDoes (the|a|an|this|that|every) \w+ \w+", text)
    assert "\n" not in text
    mean_len = sum(map(len, docs)) / len(docs)
    assert 60 < mean_len < 250


def _corpus_file(tmp_path: Path, n: int = 40) -> Path:
    path = tmp_path / "corpus.txt"
    docs = [f"Document number {i}: the {'cat' if i % 2 else 'dog'} sat." for i in range(n)]
    docs[7] = "Only here: ζ and 😀."
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["char", "word", "bpe"])
def test_data_module_tokenizer_is_trained_on_the_training_split_only(tmp_path: Path, kind: str):
    cfg = LMDataConfig(source=str(_corpus_file(tmp_path)), tokenizer=kind, val_fraction=0.2, test_fraction=0.2)
    dm = LanguageModelDataModule(cfg, block=16, batch_size=4)
    dm.setup()
    sizes = {s: len(dm.documents[s]) for s in ("train", "val", "test")}
    assert sizes == {"train": 24, "val": 8, "test": 8}
    assert sorted(d for docs in dm.documents.values() for d in docs) == sorted(read_corpus(cfg.source))
    assert dm.tokenizer == build_tokenizer(kind, dm.documents["train"])
    inputs, targets = next(iter(dm.train_dataloader()))
    assert inputs.shape == targets.shape == (4, 16) and inputs.dtype == torch.long
    # within a block, the target of position t is the input of position t + 1
    shifted = (targets[:, :-1] != IGNORE_INDEX) & (inputs[:, 1:] != PAD_ID)
    assert shifted.any() and torch.equal(inputs[:, 1:][shifted], targets[:, :-1][shifted])
    rare_in_train = any("ζ" in d for d in dm.documents["train"])
    if kind == "char":
        assert ("ζ" in dm.tokenizer) == rare_in_train


def test_data_module_counts_artifacts_and_stats(tmp_path: Path):
    cfg = LMDataConfig(source=str(_corpus_file(tmp_path)), val_fraction=0.2, test_fraction=0.2)
    dm = LanguageModelDataModule(cfg, block=16)
    dm.setup()
    for split in ("train", "val", "test"):
        assert dm.num_chars(split) == sum(len(d) + 1 for d in dm.documents[split])
    stats = dm.stats()
    assert stats["train"]["tokens"] == dm.num_chars("train")  # char level: one token per char (+ <eos>)
    assert 3.0 < stats["unigram_bits_per_char"] < 6.0
    again = LanguageModelDataModule.from_artifacts(cfg, dm.artifacts(), block=16)
    again.setup()
    assert again.tokenizer == dm.tokenizer
    for split in ("train", "val", "test"):
        n = len(dm.datasets[split])
        a, b = again.datasets[split].__getitems__(list(range(n))), dm.datasets[split].__getitems__(list(range(n)))
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        # the cached blocks are exactly pack_documents of the split's documents
        packed = pack_documents([dm.tokenizer.encode(d) for d in dm.documents[split]], 16)
        assert torch.equal(b[0], packed[0]) and torch.equal(b[1], packed[1])
    # a val-only character is <unk> in the val blocks when the tokenizer never saw it
    if not any("ζ" in d for d in dm.documents["train"]):
        split = "val" if any("ζ" in d for d in dm.documents["val"]) else "test"
        assert (dm.datasets[split].tokens == UNK_ID).any()


def test_builtin_corpus_is_the_default():
    cfg = LMDataConfig(builtin_documents=60)
    assert cfg.source == "grammar" and cfg.split_on == "blank_line" and cfg.tokenizer == "char"
    dm = LanguageModelDataModule(cfg, block=32)
    dm.setup()
    assert len(dm.documents["train"]) == 54 and dm.vocab_size < 60


def test_data_errors(tmp_path: Path):
    one = tmp_path / "one.txt"
    one.write_text("a single paragraph\nwithout blank lines\n")
    dm = LanguageModelDataModule(LMDataConfig(source=str(one)), block=8)
    with pytest.raises(ValueError, match=r"has 1 document\(s\); at least 3.*data.split_on=line"):
        dm.setup()
    for kw, match in [
        (dict(split_on="sentence"), "split_on\n  Input should be 'blank_line' or 'line'"),
        (dict(tokenizer="sentencepiece"), "tokenizer\n  Input should be 'char', 'word' or 'bpe'"),
        (dict(val_fraction=0.0), "val_fraction\n  Input should be greater than 0"),
        (dict(val_fraction=0.6, test_fraction=0.5), "val_fraction \\+ test_fraction must be below 1"),
        (dict(vocab_size=2), "vocab_size\n  Input should be greater than or equal to 5"),
        (dict(tokenizer="bpe", vocab_size=100), "a bpe vocabulary needs vocab_size >= 260"),
        (dict(source=""), "source\n  String should have at least 1 character"),
        (dict(source=" "), "data.source must be 'grammar' or the path"),
    ]:
        with pytest.raises(ValueError, match=match):
            LMDataConfig(**kw)
    with pytest.raises(RuntimeError, match="call setup"):
        LanguageModelDataModule(LMDataConfig(), block=8).train_dataloader()
