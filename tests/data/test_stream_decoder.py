"""StreamDecoder on Hugging Face tokenizers whose decoders render a token by its neighbours
(SentencePiece-style Metaspace with byte fallback, as Llama/Mistral; WordPiece, as BERT) and on
byte-level BPE: the pieces add up to the whole decoded text, never half a character, and each step
decodes a short window rather than every id so far."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import Tokenizer

CORPUS = ["Hello, world! The café is naïve.", "the quick brown fox jumps over the lazy dog"] * 20
TEXT = "Hello, café 😀 — naïve! the quick  brown fox, jumps."


def _save(tok: HFTokenizer, folder: Path, config: str) -> Tokenizer:
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(config)
    return tokenizer_from_folder(folder)


def llama_like(folder: Path) -> Tokenizer:
    """BPE with byte fallback and a Metaspace pre-tokenizer/decoder (``▁`` for spaces, the first one dropped)."""
    tok = HFTokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens])
    )
    return _save(tok, folder, '{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}')


def bert_like(folder: Path) -> Tokenizer:
    tok = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(cleanup=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials))
    return _save(tok, folder, '{"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]"}')


def gpt2_like(folder: Path) -> Tokenizer:
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return _save(tok, folder, '{"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}')


BUILDERS = {"llama": llama_like, "bert": bert_like, "gpt2": gpt2_like}


@pytest.mark.parametrize("name", BUILDERS)
def test_the_pieces_add_up_to_the_whole_decoded_text(tmp_path: Path, name: str) -> None:
    tok = BUILDERS[name](tmp_path / name)
    ids = tok.encode(TEXT)
    assert len(ids) > 10
    for skip_special in (True, False):
        stream = StreamDecoder(tok, skip_special=skip_special)
        pieces = [stream.push(i) for i in ids] + [stream.flush()]
        assert "".join(pieces) == tok.decode(ids, skip_special=skip_special)
        assert all("\ufffd" not in p for p in pieces)  # never half a character
    if name == "llama":  # the emoji is four byte tokens: held back until the fourth
        stream = StreamDecoder(tok)
        emoji = tok.encode("😀")
        assert [stream.push(i) for i in emoji[-4:]][:3] == ["", "", ""]


@pytest.mark.parametrize("name", BUILDERS)
def test_each_step_decodes_a_short_window(tmp_path: Path, name: str) -> None:
    """A long stream costs each step a few ids of decoding, not the whole text so far."""
    tok = BUILDERS[name](tmp_path / name)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world", "café", "naïve"]
    rng = random.Random(0)
    ids = tok.encode(" ".join(rng.choice(words) for _ in range(300)))
    decoded: list[int] = []
    decode = tok.decode

    def counting(batch: list[int], **kwargs: object) -> str:
        decoded.append(len(batch))
        return decode(batch, **kwargs)

    tok.decode = counting  # type: ignore[method-assign]  # instance patch to count the ids each step decodes
    stream = StreamDecoder(tok)
    text = "".join(stream.push(i) for i in ids) + stream.flush()
    tok.decode = decode  # type: ignore[method-assign]
    assert text == tok.decode(ids)
    assert len(ids) > 200 and max(decoded) <= 8
