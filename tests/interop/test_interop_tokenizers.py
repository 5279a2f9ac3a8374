"""Pretrained tokenizers give the ids of Hugging Face's own tokenizers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import BertTokenizer, GPT2Tokenizer

from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.tokenizers import Tokenizer, tokenizer_from_dict
from conftest import SENTENCES


def _check_same_ids(ours: Tokenizer, ref, max_len: int = 12) -> None:
    for text in SENTENCES:
        expected = ref(text)["input_ids"]
        assert ours.encode(text) == expected, text
        truncated = ref(text, truncation=True, max_length=max_len)["input_ids"]
        assert ours.encode(text, max_len) == truncated, text
        assert ours.decode(expected) == ref.decode(expected, skip_special_tokens=True), text


def test_wordpiece_vocab_txt_matches_bert_tokenizer(wordpiece_dir: Path):
    ours = tokenizer_from_folder(wordpiece_dir)
    ref = BertTokenizer.from_pretrained(str(wordpiece_dir))
    _check_same_ids(ours, ref)
    assert "[UNK]" in ours.tokens("日本語 qwzx")  # characters out of the vocabulary
    assert ours.cls_id == ref.cls_token_id and ours.sep_id == ref.sep_token_id and ours.pad_id == ref.pad_token_id
    assert ours.vocab_size == len(ref)


def test_cased_wordpiece_follows_tokenizer_config(wordpiece_dir: Path, tmp_path: Path):
    shutil.copy(wordpiece_dir / "vocab.txt", tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "strip_accents": False}))
    ours = tokenizer_from_folder(tmp_path)
    ref = BertTokenizer.from_pretrained(str(tmp_path))
    _check_same_ids(ours, ref)
    assert ours.encode("The Café") != tokenizer_from_folder(wordpiece_dir).encode("The Café")


def test_byte_level_bpe_matches_gpt2_tokenizer(bpe_dir: Path):
    ours = tokenizer_from_folder(bpe_dir)
    ref = GPT2Tokenizer.from_pretrained(str(bpe_dir))
    _check_same_ids(ours, ref)
    for text in SENTENCES:  # byte-level: every text round-trips, unknown characters included
        assert ours.decode(ours.encode(text), skip_special=False) == text
    assert ours.eos_id == ref.eos_token_id and ours.pad_id is None


def test_tokenizer_json_written_by_transformers(wordpiece_dir: Path, bpe_dir: Path, tmp_path: Path):
    for folder, cls in ((wordpiece_dir, BertTokenizer), (bpe_dir, GPT2Tokenizer)):
        saved = tmp_path / folder.name
        cls.from_pretrained(str(folder)).save_pretrained(str(saved))
        assert (saved / "tokenizer.json").is_file() and not (saved / "vocab.txt").exists()
        ours = tokenizer_from_folder(saved)
        _check_same_ids(ours, cls.from_pretrained(str(saved)))
        assert ours.special_tokens == tokenizer_from_folder(folder).special_tokens


def test_round_trip_through_dict_and_folder(wordpiece_dir: Path, tmp_path: Path):
    ours = tokenizer_from_folder(wordpiece_dir)
    again = tokenizer_from_dict(json.loads(json.dumps(ours.to_dict())))
    assert again == ours and again.encode(SENTENCES[1], 10) == ours.encode(SENTENCES[1], 10)
    ours.save(tmp_path)
    assert tokenizer_from_folder(tmp_path) == ours


def test_bad_tokenizer_files_are_clear_errors(tmp_path: Path, wordpiece_dir: Path):
    with pytest.raises(FileNotFoundError, match=r"expected tokenizer.json, vocab.txt .* vocab.json \+ merges.txt"):
        tokenizer_from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"cannot read .*tokenizer.json"):
        tokenizer_from_folder(tmp_path)
    with pytest.raises(ValueError, match=r"'format' must be 'attnkit.tokenizer'"):
        tokenizer_from_dict({"format": "something else"})
    ours = tokenizer_from_folder(wordpiece_dir)
    with pytest.raises(ValueError, match=r"max_len must be None or an int > 2"):
        ours.encode("hello", 2)
