"""The one Tokenizer class: fixed special ids, round trips, unknown text, save/load, errors, and the
same ids as attnkit 0.1's hand-written tokenizers (kept in ``legacy_tokenizers.py`` as the reference)."""

from __future__ import annotations

import itertools
import json
import random
import re

import legacy_tokenizers as legacy
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import (
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    UNK,
    UNK_ID,
    Tokenizer,
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
    tok = build_tokenizer("char", ["aab", "abc"], min_freq=2)
    assert tok.vocab == [PAD, BOS, EOS, UNK, "a", "b"]  # by count, then alphabetically; "c" seen once
    assert tok.encode("abcz😀") == [4, 5, UNK_ID, UNK_ID, UNK_ID]
    assert tok.decode(tok.encode("ba c")) == "ba<unk><unk>"
    capped = build_tokenizer("char", ["aaabbc"], vocab_size=5)
    assert capped.vocab == [PAD, BOS, EOS, UNK, "a"]


def test_char_tokenizer_counts_code_points():
    tok = build_tokenizer("char", ["👍🏽 é"])
    assert len(tok.encode("👍🏽")) == 2  # thumbs up + skin tone modifier
    assert tok.decode(tok.encode("é👍🏽")) == "é👍🏽"
    assert tok.encode("e\u0301") == [UNK_ID, UNK_ID]  # no normalisation: decomposed é is not é
    assert tok.token_to_id("e") is None and tok.token_to_id("é") is not None


def test_word_level_tokenizer_pieces_keep_case_and_spacing():
    tok = build_tokenizer("word", ["The cat. the cat!"])
    assert tok.pieces("Hi, you!\n") == ["Hi", ",", " you", "!", "\n"]
    assert tok.pieces("a  b\tc") == ["a", " ", " b", "\t", "c"]
    assert tok.pieces("I don't 😀.") == ["I", " don't", " 😀", "."]
    assert {"The", " the", " cat", ".", "!"} <= set(tok.vocab)
    assert tok.tokens("The cat!") == ["The", " cat", "!"]


def test_word_level_unknown_words_are_one_unk():
    tok = build_tokenizer("word", ["the cat sat"])
    assert " " in tok and tok.vocab[4] == " "  # right after the specials, as in attnkit 0.1
    # documented difference from 0.1: an unknown " dog" is one <unk> (0.1 gave " " + <unk>)
    assert tok.decode(tok.encode("the dog sat")) == "the<unk> sat"
    assert tok.decode(tok.encode("the sat")) == "the sat"
    assert tok.encode("dog") == [UNK_ID]
    assert tok.decode(tok.encode("cat the")) == "<unk><unk>"  # " the" is unknown (0.1: " " + "the")


def test_word_level_vocab_size_and_min_freq():
    tok = build_tokenizer("word", ["a a a b b c"], vocab_size=6)
    assert tok.vocab == [PAD, BOS, EOS, UNK, " ", " a"]  # " a" and " b" tie at 2: by text
    tok = build_tokenizer("word", ["x y y z z z"], min_freq=2)
    assert " z" in tok and " y" in tok and "x" not in tok


def test_word_level_keeps_more_than_30000_words():
    # tokenizers' WordLevelTrainer stops at 30,000 pieces unless told otherwise
    texts = [" ".join(f"w{i}x" for i in range(j, j + 1000)) for j in range(0, 31000, 1000)]
    assert build_tokenizer("word", texts).vocab_size == 4 + 1 + 31000  # specials, " ", every word
    assert build_tokenizer("word", texts, vocab_size=30500).vocab_size == 30500


def test_bpe_round_trips_any_text_and_never_uses_unk():
    corpus = _generated_corpus(400, seed=1)
    tok = build_tokenizer("bpe", corpus, vocab_size=400, min_freq=2)
    assert tok.vocab_size <= 400
    unseen = [*_generated_corpus(200, seed=2), "Ω≈ç√ unseen ☃ symbols", "", "\n\n", "<bos> typed <eos> <pad>"]
    for text in corpus + unseen:
        ids = tok.encode(text)
        assert UNK_ID not in ids
        assert tok.decode(ids) == text, text
    # special-token strings typed in a text are text, never special ids
    assert not {PAD_ID, BOS_ID, EOS_ID} & set(tok.encode("<bos> typed <eos> <pad>"))


def test_bpe_merges_frequent_words():
    tok = build_tokenizer("bpe", ["the theme of the thesis"] * 50, vocab_size=300, min_freq=2)
    assert len(tok.encode("the thesis")) < len("the thesis") / 2
    with pytest.raises(ValueError, match="vocab_size must be None or an int >= 260"):
        build_tokenizer("bpe", ["abc"], vocab_size=100)


@pytest.mark.parametrize("kind", KINDS)
def test_save_load_equality_through_json(kind):
    tok = _build(kind)
    d = tok.to_dict()
    again = tokenizer_from_dict(json.loads(json.dumps(d)))
    assert isinstance(again, Tokenizer) and again == tok
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
        ({"format": "attnkit.word_tokenizer", "version": 1, "vocab": []}, ValueError, "must start with"),
        ({"format": "attnkit.tokenizer", "version": 99, "kind": "char"}, ValueError, "unsupported version 99"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "sentencepiece"}, ValueError, "unknown kind"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "char"}, ValueError, "'vocab' must be a list"),
        ({"format": "attnkit.tokenizer", "version": 2, "kind": "char", "tokenizer": "{"}, ValueError, "cannot be read"),
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
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "bpe", "hf_tokenizer": "x"}, ValueError, "be read"),
        ({"format": "attnkit.tokenizer", "version": 1, "kind": "bpe", "hf_tokenizer": {"a": 1}}, ValueError, "be read"),
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


def test_classification_text_tokenizer_layout():
    tok = build_tokenizer("text", ["I didn't like it.<br /><br />Really!"] * 2)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, None, None)  # the 0.1 classify layout
    assert tok.pieces("I didn't like it.<br />Really!") == ["i", "didn't", "like", "it", ".", "really", "!"]
    assert tokenizer_from_dict(tok.to_dict()) == tok
    assert tok.decode([*tok.encode("really liked it"), 0]) == "really <unk> it"
    with pytest.raises(ValueError, match="has no bos token"):
        tok.encode("x", add_bos=True)


# ---------------------------------------------------------------------------- same ids as attnkit 0.1
SAMPLES = [
    *CORPUS,
    *_generated_corpus(150, seed=3),
    "<bos> typed <pad> specials",
    "e\u0301 decomposed, \r\n windows line, \u2019 quote",
    "",
]


@pytest.mark.parametrize(("kind", "old_cls"), [("char", legacy.CharTokenizer), ("word", legacy.WordLevelTokenizer)])
def test_same_vocabulary_and_ids_as_legacy(kind, old_cls):
    train = _generated_corpus(300, seed=4) + CORPUS
    old, new = old_cls.build(train, min_freq=2), build_tokenizer(kind, train, min_freq=2)
    assert new.vocab == old.vocab
    converted = tokenizer_from_dict(json.loads(json.dumps(old.to_dict())))  # a checkpoint of attnkit 0.1
    assert converted == new
    differ = []
    for text in SAMPLES:
        if new.encode(text, add_bos=True) != old.encode(text, add_bos=True):
            differ.append(text)
        else:
            assert new.decode(new.encode(text)) == old.decode(old.encode(text))
    if kind == "char":
        assert differ == []
    else:  # the documented differences: unknown pieces after a space, combining marks inside words
        for text in differ:
            if "\u0301" in text:
                continue
            # every piece of 0.1's split is one id: its own, or <unk> (0.1: " " + the bare piece or <unk>)
            expected = [old.token_to_id(p) if p in old else UNK_ID for p in old_cls.split(text)]
            assert new.encode(text) == expected, text


def test_word_documented_differences_exactly():
    old = legacy.WordLevelTokenizer.build(["the cat sat"])
    new = tokenizer_from_dict(old.to_dict())
    assert old.encode("the dog") == [old.token_to_id("the"), old.token_to_id(" "), UNK_ID]
    assert new.encode("the dog") == [new.token_to_id("the"), UNK_ID]
    assert legacy.WordLevelTokenizer.split("e\u0301t") == ["e", "\u0301", "t"]
    assert new.pieces("e\u0301t") == ["e\u0301t"]


def test_bpe_same_ids_as_legacy():
    train = _generated_corpus(300, seed=5)
    old, new = legacy.BPETokenizer.train(train, vocab_size=400), build_tokenizer("bpe", train, vocab_size=400)
    converted = tokenizer_from_dict(old.to_dict())
    for text in SAMPLES:
        assert new.encode(text, add_eos=True) == old.encode(text, add_eos=True) == converted.encode(text, add_eos=True)
        assert new.decode(new.encode(text)) == old.decode(old.encode(text))


def test_text_same_vocabulary_and_ids_as_legacy_word_tokenizer():
    from attnkit.data.generators.reviews import generate_synthetic_corpus

    texts = generate_synthetic_corpus(300, seed=1)[0] + ["I didn't LIKE it.<br /><br />Really!<BR>ok don\u2019t `x`"]
    old = legacy.WordTokenizer.build(texts, max_size=150, min_freq=2)
    new = build_tokenizer("text", texts, vocab_size=150, min_freq=2)
    assert new.vocab == old.vocab and tokenizer_from_dict(old.to_dict()) == new
    for text in texts + SAMPLES[:-3]:
        assert new.encode(text, 20) == old.encode(text, 20)
        assert new.decode(new.encode(text)) == old.decode(old.encode(text))


def test_pretrained_tokenizer_of_attnkit_0_1_still_loads():
    bpe = build_tokenizer("bpe", CORPUS, vocab_size=300)
    old_dict = {  # what attnkit 0.1's PretrainedTokenizer.to_dict() wrote
        "format": "attnkit.pretrained_tokenizer",
        "version": 1,
        "tokenizer": bpe.backend.to_str(),
        "special_tokens": {"eos": EOS, "unk": UNK},
    }
    tok = tokenizer_from_dict(old_dict)
    assert tok.kind == "pretrained" and (tok.eos_id, tok.unk_id, tok.pad_id) == (EOS_ID, UNK_ID, None)
    assert tok.encode(CORPUS[0]) == bpe.encode(CORPUS[0])
    assert tokenizer_from_dict(tok.to_dict()) == tok


def test_save_writes_one_tokenizer_json(tmp_path):
    from attnkit.text.pretrained_tokenizer import tokenizer_from_folder

    tok = _build("word")
    tok.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    again = tokenizer_from_folder(tmp_path)
    assert again == tok and again.kind == "word" and again.encode(CORPUS[1]) == tok.encode(CORPUS[1])


def _log_text(n_lines: int, seed: int = 0) -> str:
    """A log file as one document: many lines, no blank line."""
    rng = random.Random(seed)
    words = ["Running", "PASS:", "FAIL:", "gdb.base/break.exp", "foo_bar", "x=42", "'quoted'", "don't", "(1.5)"]
    lines = [
        " ".join(rng.choices(words, k=rng.randint(1, 8))) + rng.choice(["", " ", ".", "  "]) for _ in range(n_lines)
    ]
    return "\n".join(lines)


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_a_huge_document_is_trained_on_in_parts_with_the_same_vocabulary(kind: str, monkeypatch: pytest.MonkeyPatch):
    import attnkit.text.tokenizers as tokenizers_module

    text = _log_text(70_000)  # about 2.5 MB in one text
    assert len(text) > 2 * (1 << 20)
    parts: list[int] = []
    cut = tokenizers_module.cut_long_texts
    monkeypatch.setattr(
        tokenizers_module, "cut_long_texts", lambda texts: (parts.append(len(p)) or p for p in cut(texts))
    )
    in_parts = build_tokenizer(kind, ["a short one", text], **({"vocab_size": 400} if kind == "bpe" else {}))
    assert len(parts) >= 3 and max(parts) < 1.01 * (1 << 20) + 1000  # it was cut
    monkeypatch.setattr(tokenizers_module, "cut_long_texts", lambda texts: texts)
    whole = build_tokenizer(kind, ["a short one", text], **({"vocab_size": 400} if kind == "bpe" else {}))
    assert in_parts.backend.to_str() == whole.backend.to_str()


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "b c", " ", "\n", "\n\n", " \n", "\t", "'s", "x!", "é", "9"]), max_size=60).map(
        "".join
    ),
    size=st.integers(1, 20),
)
def test_cut_long_texts_cuts_where_both_splits_are_unchanged(text: str, size: int):
    from attnkit.text.tokenizer_kinds import kind_spec
    from attnkit.text.tokenizers import WORD_PATTERN, cut_long_texts

    parts = list(cut_long_texts([text], size))
    assert "".join(parts) == text and (all(parts) or parts == [text])
    for a, b in itertools.pairwise(parts):
        assert a.endswith("\n") and "!" <= a[-2] <= "~" and "!" <= b[0] <= "~"
    for pattern in (kind_spec("bpe").chunks.pieces, re.compile(WORD_PATTERN)):
        assert [p for part in parts for p in pattern.findall(part)] == pattern.findall(text)
