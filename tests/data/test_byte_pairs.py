"""attnkit.text.byte_pairs.BytePairs: byte-level BPE of many pieces at once gives Hugging Face's ids, and
is refused (None: Hugging Face encodes) for merge lists where its steps could differ."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

from attnkit.data.encode import fast_encoder
from attnkit.text.byte_pairs import BytePairs, split_ascii_bpe
from attnkit.text.tokenizer_kinds import kind_spec
from attnkit.text.tokenizers import Tokenizer, build_tokenizer

RUNS = ["a" * 9, "aa", "!" * 7, " " * 6, "ab" * 5, "0" * 8, "x" * 3 + "y" * 5, "\n" * 4, ".-" * 4]


@functools.cache
def _tokenizer(vocab_size: int) -> Tokenizer:
    """Trained on text with runs of one character and of a pair, so that merges (x, x) and (xx, x) exist."""
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "mat", "don't", "3.14", "__init__", "'s", "...", "(x)", "a-b", *RUNS]
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(3000)]
    return build_tokenizer("bpe", texts, vocab_size=vocab_size)


def _spec(tok: Tokenizer) -> dict:
    return json.loads(tok.backend.to_str())


def _hugging_face(tok: Tokenizer, pieces: list[str]) -> tuple[list[int], list[int]]:
    encoding = tok.backend.encode(pieces, is_pretokenized=True, add_special_tokens=False)
    return encoding.ids, np.bincount(np.asarray(encoding.word_ids, dtype=np.int64), minlength=len(pieces)).tolist()


def _ours(pairs: BytePairs, pieces: list[str]) -> tuple[list[int], list[int]]:
    lengths = np.array([len(p.encode()) for p in pieces], dtype=np.int64)
    ids, counts = pairs(b"".join(p.encode() for p in pieces), lengths)
    return ids.tolist(), counts.tolist()


def _pieces(text: str) -> list[str]:
    """``text`` split as the BPE tokenizer splits ASCII text."""
    return kind_spec("bpe").chunks.pieces.findall(text)


ascii_text = st.lists(
    st.one_of(st.sampled_from(RUNS), st.text(alphabet="".join(map(chr, range(1, 128))), max_size=6)), max_size=15
).map(" ".join)


@pytest.mark.parametrize("vocab_size", [300, 900])
@pytest.mark.parametrize("dense", [2048, 40])  # a table for every pair; or most pairs found by sorted search
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=ascii_text)
def test_ids_are_hugging_faces(vocab_size: int, dense: int, text: str):
    tok = _tokenizer(vocab_size)
    model = _spec(tok)["model"]
    pairs = BytePairs(model["vocab"], [tuple(m) for m in model["merges"]], dense=dense)
    pieces = _pieces(text) + RUNS
    assert _ours(pairs, pieces) == _hugging_face(tok, pieces)


def test_trained_tokenizers_are_accepted_and_encode_any_bytes():
    tok = _tokenizer(900)
    pairs = BytePairs.of(_spec(tok))
    assert pairs is not None
    pieces = [bytes([b]).decode("latin-1") for b in range(128)] + ["héllo", " 日本", "😀😀", "\x00\x01"]
    assert _ours(pairs, pieces) == _hugging_face(tok, pieces)  # every byte, UTF-8 of any text
    assert _ours(pairs, []) == ([], [])


def _respec(tok: Tokenizer, change) -> Tokenizer:  # type: ignore[no-untyped-def]
    spec = _spec(tok)
    change(spec["model"])
    return Tokenizer(HFTokenizer.from_str(json.dumps(spec)), "bpe", dict(tok.special_tokens))


def _merge_before_its_part(model: dict) -> None:
    merges = model["merges"]
    made = {a + b: i for i, (a, b) in enumerate(merges)}
    i = next(i for i, (a, b) in enumerate(merges) if a in made or b in made)  # a part made by merge j < i
    j = made.get(merges[i][0], made.get(merges[i][1]))
    merges.insert(j, merges.pop(i))


def _token_made_twice(model: dict) -> None:
    a, b = next((a, b) for a, b in model["merges"] if len(a) > 1)  # "ab" + "c" made as "a" + "bc" too
    model["merges"].append([a[:1], a[1:] + b]) if a[1:] + b in model["vocab"] else model["merges"].append([a, b])


@pytest.mark.parametrize(
    "change",
    [
        _merge_before_its_part,
        _token_made_twice,
        lambda m: m.update(dropout=0.1),
        lambda m: m.update(ignore_merges=True),
        lambda m: m.update(byte_fallback=True),
    ],
)
def test_merge_lists_it_cannot_follow_are_refused_and_hugging_face_encodes(change):  # type: ignore[no-untyped-def]
    tok = _tokenizer(900)
    other = _respec(tok, change)
    assert BytePairs.of(_spec(other)) is None
    if _spec(other)["model"]["dropout"]:
        return  # Hugging Face's own ids are drawn at random
    docs = [" ".join(RUNS), "the cat's mat (x) 3.14", "don't a-b ..."]
    tokens, lengths = fast_encoder(other)(docs)  # a ChunkEncoder where fits(other) (the merge lists)
    expected = [other.encode(d, add_bos=True, add_eos=True) for d in docs]
    assert lengths.tolist() == [len(e) for e in expected]
    assert tokens.tolist() == [i for e in expected for i in e]


@pytest.mark.parametrize(
    "option", [{"continuing_subword_prefix": "##"}, {"end_of_word_suffix": "</w>"}, {"type": "WordPiece"}]
)
def test_other_models_are_refused(option: dict):
    spec = _spec(_tokenizer(300))
    spec["model"].update(option)
    assert BytePairs.of(spec) is None


def test_a_missing_byte_is_refused():
    spec = _spec(_tokenizer(300))
    del spec["model"]["vocab"]["Ā"]  # the byte 0x00
    assert BytePairs.of(spec) is None


SPLIT_PIECES = [*RUNS, "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'l", "'r", "'v", "''s", " 's", "don't"]
SPLIT_PIECES += [" ", "  ", "\t", "\n", " \n", "\n ", "\r\n", "a", "Ab", "42", "...", " -", "\x1c", "\x7f", "_"]


@settings(max_examples=3000, deadline=None)
@given(
    text=st.lists(
        st.one_of(st.sampled_from(SPLIT_PIECES), st.text(alphabet="".join(map(chr, range(1, 128))), max_size=3)),
        max_size=14,
    ).map("".join)
)
def test_ascii_split_is_the_patterns(text: str):
    assert split_ascii_bpe(text) == kind_spec("bpe").chunks.pieces.findall(text)


def test_ascii_split_of_every_pair_and_triple_of_classes():
    chars = ["a", "Z", "0", "'", "!", " ", "\t", "\n", "s", "l", "e", "r", "v", "d", "\x01"]
    for a in chars:
        for b in chars:
            for c in chars:
                for text in (a + b + c, a + b + c + "'s", " " + a + b + c + "ll", a + b + "'" + c + "e"):
                    assert split_ascii_bpe(text) == kind_spec("bpe").chunks.pieces.findall(text), repr(text)
