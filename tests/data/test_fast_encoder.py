"""The token cache's encoder (attnkit.data.encode.fast_encoder; attnkit.text.chunk_encoder.ChunkEncoder for
word and BPE) gives exactly the ids of Tokenizer.encode(doc, add_bos=True, add_eos=True)."""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer as HFTokenizer

import attnkit.text.chunk_encoder as chunk_encoder_module
from attnkit.data.cache import token_dtype
from attnkit.data.encode import fast_encoder
from attnkit.data.generators.grammar import generate_grammar_corpus
from attnkit.text.chunk_encoder import ChunkEncoder, fits, merge_unsafe_cuts, safe_chunks
from attnkit.text.tokenizers import Tokenizer, build_tokenizer

KINDS = ["word", "bpe"]
# Pieces where GPT-2's regex and WORD_PATTERN are easy to get wrong: contractions, whitespace runs
# of every kind before words, digits and punctuation, control characters (\x1c-\x1f are not \s).
ASCII_PIECES = [
    *["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "'", " '", " 's", "'S", "' s", "don't", " o'clock"],
    *[" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", " \n", "\n ", "\r\n", "\r", "\x0b", "\x0c", " \t ", "\n  \n"],
    *["a", "Ab", "dog", " the", " The", "x1", "42", " 7", "3.14", "_", "__init__", " _x", "...", "!?", " -", "--"],
    *["\x1c", "\x1f", " \x1e", "\x7f", "\x01", "\x08 ", "~ ", " (", ") ", '"', " $5", "a.b", "#!", " <bos>"],
]
# Not ASCII: letters, digits and spaces of other scripts, combining marks, emoji, U+00A0, U+2028, U+0085.
OTHER_PIECES = [
    *["é", "café", " über", "naïve ", "日本語", " 日本", "😀", " 😀", "e\u0301", " e\u0301", "Ω", "١٢٣", "²"],
    *["\u00a0", " \u00a0", "\u00a0 ", "\u2028", " \u2028 ", "\u3000", "\u0085", "\u200b", " \u2019s", "’ "],
]
ASCII_CHARS = "".join(map(chr, range(1, 128)))  # "\x00" has a test of its own (it joins the documents)


def _ascii_doc(rng: random.Random) -> str:
    return "".join(
        rng.choice(ASCII_PIECES) if rng.random() < 0.7 else "".join(rng.choices(ASCII_CHARS, k=rng.randint(1, 4)))
        for _ in range(rng.randint(0, 12))
    )


@functools.cache
def _training_texts() -> list[str]:
    rng = random.Random(0)
    texts = [_ascii_doc(rng) for _ in range(3000)]
    texts += ["".join(rng.choices(OTHER_PIECES + ASCII_PIECES, k=8)) for _ in range(300)]
    return texts + generate_grammar_corpus(500, seed=3)


@functools.cache
def _tokenizer(kind: str) -> Tokenizer:
    """Trained on text like the tests' (so that most pieces are known: a wrong cut changes the ids)."""
    return build_tokenizer(kind, _training_texts(), **({"vocab_size": 800} if kind == "bpe" else {}))


@functools.cache
def _encoders(kind: str) -> tuple[ChunkEncoder, ...]:
    """Kept across examples: one encoder as the cache makes it, one with a small memory (it keeps the
    chunks of the last call), one with a tiny memory (it forgets every time)."""
    tok = _tokenizer(kind)
    dtype = token_dtype(tok.vocab_size)
    return (
        ChunkEncoder(tok, dtype),
        ChunkEncoder(tok, dtype, max_chunks=64, max_ids=512, max_chunk_chars=16),
        ChunkEncoder(tok, dtype, max_chunks=8, max_ids=64, max_chunk_chars=3),
    )


def _check(encode, tok: Tokenizer, docs: list[str]) -> None:  # type: ignore[no-untyped-def]
    tokens, lengths = encode(docs)
    expected = [tok.encode(d, add_bos=True, add_eos=True) for d in docs]
    assert tokens.dtype == token_dtype(tok.vocab_size) and lengths.dtype == np.int64
    assert lengths.tolist() == [len(e) for e in expected]
    assert tokens.tolist() == [i for e in expected for i in e]


@pytest.mark.parametrize("kind", KINDS)
def test_cache_encoder_is_the_chunk_encoder_for_word_and_bpe(kind: str):
    assert isinstance(fast_encoder(_tokenizer(kind)), ChunkEncoder)
    assert not fits(_tokenizer("char")) and not isinstance(fast_encoder(_tokenizer("char")), ChunkEncoder)


@pytest.mark.parametrize("kind", KINDS)
def test_grammar_corpus_gives_the_tokenizer_ids(kind: str):
    pool = generate_grammar_corpus(3000, seed=1)
    tok = build_tokenizer(kind, pool[:2000])
    encode = fast_encoder(tok)
    for batch in (pool[:1500], pool[1500:], pool[:1500]):  # the second and third calls reuse the chunks
        _check(encode, tok, batch)


ascii_doc = st.lists(
    st.one_of(st.sampled_from(ASCII_PIECES), st.text(alphabet=ASCII_CHARS, max_size=4)), max_size=12
).map("".join)
mixed_doc = st.lists(
    st.one_of(st.sampled_from(ASCII_PIECES), st.sampled_from(OTHER_PIECES), st.text(max_size=3)), max_size=10
).map("".join)
batches = st.lists(st.one_of(ascii_doc, ascii_doc, ascii_doc, mixed_doc), min_size=1, max_size=10)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=batches)
def test_adversarial_text_gives_the_tokenizer_ids(kind: str, docs: list[str]):
    tok = _tokenizer(kind)
    for encode in _encoders(kind):
        _check(encode, tok, docs)


@pytest.mark.parametrize("kind", KINDS)
def test_edge_documents(kind: str):
    tok = _tokenizer(kind)
    encode, small, forgetful = _encoders(kind)
    assert [a.size for a in encode([])] == [0, 0]
    edge = ["", " ", "  ", "\n", " a", "a ", "a  ", " a b  c\n", "\x00", "'s", "x\n y", "é b", "\t \u00a0 z"]
    for docs in (edge[:8], [d for d in edge if d != "\x00"], edge):  # "\x00" in a text: the plain way
        for encoder in (encode, small, forgetful):
            _check(encoder, tok, docs)
    long_docs = [_ascii_doc(random.Random(i)) * 50 for i in range(20)]  # long documents, long chunks
    _check(encode, tok, long_docs)
    _check(encode, tok, long_docs[::-1])


def test_chunks_are_cut_at_spaces_next_to_ascii_that_is_not_whitespace():
    """After such a character, or before one (the last space of an indentation); not between
    whitespace, nor where only a non-ASCII character (U+00A0 is whitespace to Hugging Face) decides."""
    text = "\x00def f(x):\n    return  x\n\t\u00a0 y é z \u00a0 \u00a0\n \n"
    expected = ["\x00def", "f(x):\n   ", "return", "", "x\n\t\u00a0", "y", "é", "z", "\u00a0 \u00a0\n \n"]
    assert safe_chunks(text) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_indented_code_gives_the_tokenizer_ids(kind: str):
    tok = _tokenizer(kind)
    lines = ["def f(x):", "    return  x", "\tif y:", "  \t z = 'a'", "        pass", "\u00a0 q", " ", "  ", "\n w"]
    rng = random.Random(0)
    docs = ["\n".join(rng.choices(lines, k=rng.randint(1, 12))) for _ in range(200)]
    for encoder in _encoders(kind):
        _check(encoder, tok, docs)


@pytest.mark.parametrize("kind", KINDS)
def test_text_holding_every_mark_character(kind: str, monkeypatch: pytest.MonkeyPatch):
    """The safe spaces are marked with a character the text does not hold; a text holding all of
    them is split at every space and the chunks around the unsafe spaces joined again."""
    merged = []
    monkeypatch.setattr(chunk_encoder_module, "merge_unsafe_cuts", lambda *a: merged.append(1) or merge_unsafe_cuts(*a))
    tok = _tokenizer(kind)
    marks = "".join(map(chr, range(1, 32)))
    docs = [marks, "a\t b  c d", " x\n y z\x1c w", "q " + marks + " r  ", "é s t", "", "x  "]
    for encoder in _encoders(kind):
        _check(encoder, tok, docs)
        _check(encoder, tok, [d for d in docs if marks not in d])  # marked with a free one
    assert len(merged) == 3
    _check(ChunkEncoder(tok, token_dtype(tok.vocab_size)), tok, [d + " " + marks + " e" for d in ASCII_PIECES])


@pytest.mark.parametrize("kind", KINDS)
def test_a_pipeline_it_does_not_know_uses_hugging_face(kind: str):
    tok = _tokenizer(kind)
    spec = json.loads(tok.backend.to_str())
    if kind == "bpe":
        spec["model"]["dropout"] = 0.5
    else:
        spec["pre_tokenizer"]["pattern"]["Regex"] = r"\w+|\s+|[^\w\s]"
    other = Tokenizer(HFTokenizer.from_str(json.dumps(spec)), kind, dict(tok.special_tokens))
    assert not fits(other) and not isinstance(fast_encoder(other), ChunkEncoder)
    with pytest.raises(ValueError, match="not one it handles"):
        ChunkEncoder(other, np.uint16)
    if kind == "word":
        _check(fast_encoder(other), other, ["a  b", "c\n\nd e"])
