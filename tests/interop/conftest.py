"""Small random BERT and GPT-2 models and their tokenizers, built locally with ``transformers`` and
``tokenizers`` and saved as Hugging Face folders (nothing is downloaded)."""

from __future__ import annotations

import csv
import json
import random
import sys
from pathlib import Path

import pytest
import torch
from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer

from attnkit.data.generators.reviews import generate_synthetic_corpus

# The tests run the real `attnkit` command with tests/training/cli_helpers.run_cli.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

# Accents, punctuation, unknown words, CJK, emoji, special tokens written in the text, odd spaces.
SENTENCES = [
    "The film was good, not bad!",
    "Café, naïve résumé — Ünïcödé façade?",
    "xylophonist qwzx blorptastic unbelievably",
    "Hello,world!!! (really?) 3.14 ... 'quoted' \"double\"",
    "日本語 and 中文 mixed with English 😀 emoji",
    "A [MASK] token and a [SEP] token <|endoftext|> inside",
    "  leading and trailing spaces\tand a tab\nand a newline  ",
    "",
    "the acting was wonderful the plot was dull " * 12,
]


def corpus() -> list[str]:
    texts, _, _ = generate_synthetic_corpus(600, seed=3)
    return texts + SENTENCES[:4]


@pytest.fixture(scope="session")
def wordpiece_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with only a WordPiece ``vocab.txt`` (lower-casing BERT), trained on a small corpus."""
    folder = tmp_path_factory.mktemp("wordpiece")
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(corpus(), vocab_size=400, min_frequency=1)
    trainer.save_model(str(folder))
    return folder


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a GPT-2 style byte-level BPE (``vocab.json`` + ``merges.txt``)."""
    folder = tmp_path_factory.mktemp("bpe")
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(corpus(), vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"])
    trainer.save_model(str(folder))
    return folder


def _vocab_size(folder: Path) -> int:
    if (folder / "vocab.txt").is_file():
        return len((folder / "vocab.txt").read_text(encoding="utf-8").splitlines())
    return len(json.loads((folder / "vocab.json").read_text(encoding="utf-8")))


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory: pytest.TempPathFactory, wordpiece_dir: Path) -> Path:
    """A random ``BertModel`` (with pooler) saved by ``save_pretrained``, plus the WordPiece ``vocab.txt``."""
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("bert")
    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=_vocab_size(wordpiece_dir),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
    )
    BertModel(config).save_pretrained(folder)
    (folder / "vocab.txt").write_bytes((wordpiece_dir / "vocab.txt").read_bytes())
    return folder


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory, bpe_dir: Path) -> Path:
    """A random ``GPT2LMHeadModel`` saved by ``save_pretrained``, plus ``vocab.json`` + ``merges.txt``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path_factory.mktemp("gpt2")
    vocab = json.loads((bpe_dir / "vocab.json").read_text(encoding="utf-8"))
    eot = vocab["<|endoftext|>"]
    torch.manual_seed(2)
    config = GPT2Config(
        vocab_size=len(vocab),
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=eot,
        eos_token_id=eot,
        initializer_range=0.2,  # larger than GPT-2's 0.02, so that greedy decoding does not repeat one token
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((bpe_dir / name).read_bytes())
    return folder


@pytest.fixture(scope="session")
def reviews_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 short reviews whose label is carried by one opinion word (an easy task to fine-tune on)."""
    rng = random.Random(0)
    filler = ["the", "film", "movie", "plot", "acting", "story", "was", "is", "and", "a", "of", "it", "this", "with"]
    opinion = {"positive": ["good", "great", "wonderful"], "negative": ["bad", "awful", "dull"]}
    path = tmp_path_factory.mktemp("reviews") / "reviews.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for _ in range(400):
            label = rng.choice(["positive", "negative"])
            words = [rng.choice(filler) for _ in range(rng.randint(4, 12))]
            words.insert(rng.randint(0, len(words)), rng.choice(opinion[label]))
            writer.writerow([" ".join(words).capitalize() + ".", label])
    return path
