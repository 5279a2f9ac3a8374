"""Generation/translation tokenizers: fixed special ids, round trips, unknown text, save/load, errors."""

from __future__ import annotations

import json
import random

import pytest
import torch

from attnkit.data.tokenizers import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    UNK,
    UNK_ID,
    BPETokenizer,
    CharTokenizer,
    StreamDecoder,
    WordLevelTokenizer,
    WordTokenizer,
    build_tokenizer,
    tokenizer_from_dict,
)

CORPUS = [
    "Hello, world! It's a café, naïve señor.",
    "Ünïcödé: 😀 👍🏽 — «quotes» and 'apostrophes'.\n\nNew paragraph\twith a tab.",
    "The cat sat on the mat. the cat? THE CAT!",
    "  leading spaces, trailing spaces  ",
    "日本語のテキストも。 Zahlen: 3.14, 42 и кириллица.",
]
KINDS = ("char", "word", "bpe")


def _build(kind: str, texts=CORPUS, **kw):
    if kind == "bpe":
        kw.setdefault("vocab_size", 300)
    return build_tokenizer(kind, texts, **kw)


def _generated_corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ éàüñç.,;:!?'\"-()\n\t0123456789😀👍🏽€中文"
    words = ["".join(rng.choice(alphabet[:36]) for _ in range(rng.randint(1, 8))) for _ in range(60)]
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(
                rng.choice(words) if rng.random() < 0.7 else "".join(rng.choices(alphabet, k=rng.randint(1, 4)))
            )
        texts.append(rng.choice(["", " ", "  "]).join(parts) if rng.random() < 0.3 else " ".join(parts))
    return texts


@pytest.mark.parametrize("kind", KINDS)
def test_fixed_special_ids_and_strings(kind):
    tok = _build(kind)
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert tok.decode([PAD_ID, BOS_ID, EOS_ID, UNK_ID], skip_special=False) == PAD + BOS + EOS + UNK
    assert (PAD, BOS, EOS, UNK) == ("<pad>", "<bos>", "<eos>", "<unk>")
    ids = tok.encode("Hello", add_bos=True, add_eos=True)
    assert ids[0] == BOS_ID and ids[-1] == EOS_ID and BOS_ID not in ids[1:-1]
    assert tok.encode("Hello") == ids[1:-1]


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_of_training_text(kind):
    tok = _build(kind)
    for text in CORPUS:
        ids = tok.encode(text, add_bos=True, add_eos=True)
        assert UNK_ID not in ids
        assert tok.decode(ids) == text  # specials are skipped by default
        assert tok.decode(torch.tensor(ids)) == text  # tensors are accepted


@pytest.mark.parametrize("kind", KINDS)
def test_skip_special_keeps_unk_visible(kind):
    tok = _build(kind)
    hello = tok.encode("Hello")
    assert tok.decode([BOS_ID, *hello, PAD_ID, EOS_ID]) == "Hello"
    assert tok.decode([BOS_ID, *hello, EOS_ID], skip_special=False) == "<bos>Hello<eos>"
    assert tok.decode([*hello, UNK_ID]) == "Hello<unk>"


def test_char_tokenizer_unknown_characters_and_min_freq():
    tok = CharTokenizer.build(["aab", "abc"], min_freq=2)
    assert tok.vocab == [PAD, BOS, EOS, UNK, "a", "b"]  # by count, then alphabetically; "c" seen once
    assert tok.encode("abcz😀") == [4, 5, UNK_ID, UNK_ID, UNK_ID]
    assert tok.decode(tok.encode("ba c")) == "ba<unk><unk>"
    capped = CharTokenizer.build(["aaabbc"], vocab_size=5)
    assert capped.vocab == [PAD, BOS, EOS, UNK, "a"]


def test_char_tokenizer_counts_code_points():
    tok = CharTokenizer.build(["👍🏽 é"])
    assert len(tok.encode("👍🏽")) == 2  # thumbs up + skin tone modifier
    assert tok.decode(tok.encode("é👍🏽")) == "é👍🏽"
    assert tok.encode("e\u0301") == [tok.token_to_id("e"), UNK_ID]  # no normalisation: decomposed é is not é


def test_word_level_tokenizer_pieces_keep_case_and_spacing():
    assert WordLevelTokenizer.split("Hi, you!\n") == ["Hi", ",", " you", "!", "\n"]
    assert WordLevelTokenizer.split("a  b\tc") == ["a", " ", " b", "\t", "c"]
    assert WordLevelTokenizer.split("I don't 😀.") == ["I", " don't", " 😀", "."]
    tok = WordLevelTokenizer.build(["The cat. the cat!"])
    assert {"The", " the", " cat", ".", "!"} <= set(tok.vocab)
    assert tok.tokens("The cat!") == ["The", " cat", "!"]


def test_word_level_unknown_words_keep_their_spacing():
    tok = WordLevelTokenizer.build(["the cat sat"])
    assert " " in tok  # always there, for unknown words after a space
    assert tok.decode(tok.encode("the dog sat")) == "the <unk> sat"
    assert tok.decode(tok.encode("the sat")) == "the sat"
    assert tok.encode("dog") == [UNK_ID]
    # an unknown " cat," splits into " " + known "cat"? Here "cat" is only known with its space:
    assert tok.decode(tok.encode("cat the")) == "<unk> the"


def test_word_level_vocab_size_and_min_freq():
    tok = WordLevelTokenizer.build(["a a a b b c"], vocab_size=6)
    assert tok.vocab == [PAD, BOS, EOS, UNK, " ", " a"]  # " a" and " b" tie at 2: by text
    tok = WordLevelTokenizer.build(["x y y z z z"], min_freq=2)
    assert " z" in tok and " y" in tok and "x" not in tok


def test_bpe_round_trips_any_text_and_never_uses_unk():
    corpus = _generated_corpus(400, seed=1)
    tok = BPETokenizer.train(corpus, vocab_size=400, min_freq=2)
    assert tok.vocab_size <= 400
    unseen = [*_generated_corpus(200, seed=2), "Ω≈ç√ unseen ☃ symbols", "", "\n\n", "<bos> typed <eos> <pad>"]
    for text in corpus + unseen:
        ids = tok.encode(text)
        assert UNK_ID not in ids
        assert tok.decode(ids) == text, text
    # special-token strings typed in a text are text, never special ids
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(tok.encode("<bos> typed <eos> <pad>"))


def test_bpe_merges_frequent_words():
    tok = BPETokenizer.train(["the theme of the thesis"] * 50, vocab_size=300, min_freq=2)
    assert len(tok.encode("the thesis")) < len("the thesis") / 2
    with pytest.raises(ValueError, match="vocab_size must be None or an int >= 260"):
        BPETokenizer.train(["abc"], vocab_size=100)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_equality_through_json(kind):
    tok = _build(kind)
    d = tok.to_dict()
    again = tokenizer_from_dict(json.loads(json.dumps(d)))
    assert type(again) is type(tok) and again == tok
    for text in [*CORPUS, "unseen 🦀 text"]:
        assert again.encode(text) == tok.encode(text)
    assert again.kind == kind and d["kind"] == kind
    assert tok != _build(kind, ["something else entirely 😀"] * 3)


def test_build_is_independent_of_text_order():
    for kind in ("char", "word"):
        assert _build(kind, CORPUS) == _build(kind, CORPUS[::-1])


@pytest.mark.parametrize("kind", KINDS)
def test_stream_decoder_pieces_add_up_to_the_decoded_text(kind):
    tok = _build(kind)
    text = "Hello, café 😀 — naïve!"
    ids = tok.encode(text, add_eos=True)
    stream = StreamDecoder(tok)
    pieces = [stream.push(i) for i in ids] + [stream.flush()]
    assert "".join(pieces) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces)  # never half a character


@pytest.mark.parametrize(
    ("bad", "error", "match"),
    [
        ("not a dict", TypeError, "expects a dict"),
        ({"format": "x"}, ValueError, "'format' must be 'attnkit.tokenizer'"),
        ({"format": "attnkit.word_tokenizer", "version": 1, "vocab": []}, ValueError, "use WordTokenizer.from_dict"),
        ({"format": "attnkit.tokenizer", "version": 99, "kind": "char"}, ValueError, "unsupported version 99"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "sentencepiece"}, ValueError, "unknown kind"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "char"}, ValueError, "needs 'vocab'"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "char", "vocab": ["a", "b"]}, ValueError, "must start"),
        (
            {"format": "attnkit.tokenizer", "version": 1, "kind": "char", "vocab": [PAD, BOS, EOS, UNK, "ab"]},
            ValueError,
            "single characters",
        ),
        (
            {"format": "attnkit.tokenizer", "version": 1, "kind": "char", "vocab": [PAD, BOS, EOS, UNK, "a", "a"]},
            ValueError,
            "duplicate",
        ),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "bpe", "hf_tokenizer": "x"}, ValueError, "JSON object"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "bpe", "hf_tokenizer": {"a": 1}}, ValueError, "valid"),
    ],
)
def test_bad_dicts_give_clear_errors(bad, error, match):
    with pytest.raises(error, match=match):
        tokenizer_from_dict(bad)


def test_bad_inputs_give_clear_errors():
    tok = _build("char")
    with pytest.raises(TypeError, match="expected a str"):
        tok.encode(["not", "a", "str"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"id 9999 out of range \[0, "):
        tok.decode([4, 9999])
    with pytest.raises(TypeError, match="token ids must be ints"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match="unknown tokenizer kind 'bytes'"):
        build_tokenizer("bytes", CORPUS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="corpus is empty"):
        build_tokenizer("char", ["", ""])
    with pytest.raises(TypeError, match="single str"):
        build_tokenizer("word", "a text, not a list")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_freq must be an int >= 1"):
        build_tokenizer("word", CORPUS, min_freq=0)


def test_classification_word_tokenizer_is_unchanged():
    tok = WordTokenizer.build(["I didn't like it.<br /><br />Really!"] * 2)
    assert tok.pad_id == 0 and tok.unk_id == 1
    assert WordTokenizer.tokenize("I didn't like it.<br />Really!") == ["i", "didn't", "like", "it", ".", "really", "!"]
    assert WordTokenizer.from_dict(tok.to_dict()) == tok
