"""Small random BERT, GPT-2, Llama, Mistral and Qwen2 models and their tokenizers, built locally with
``transformers`` and ``tokenizers`` and saved as Hugging Face folders (nothing is downloaded). Every
parameter of each model is randomised by :func:`interop_parity.perturb` before it is saved, its biases and
norm weights included (a fresh init leaves them at 0 and 1, where a dropped bias or a swapped norm
weight would go unnoticed)."""

from __future__ import annotations

import csv
import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from interop_parity import perturb
from tokenizers import ByteLevelBPETokenizer
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

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
    (folder / "vocab.txt").write_text("\n".join(wordpiece_vocab(corpus(), 400)) + "\n", encoding="utf-8")
    return folder


def wordpiece_vocab(texts: list[str], size: int) -> list[str]:
    """A lower-casing BERT WordPiece vocabulary of ``size`` entries, the same on every run: the
    special tokens, every character alone and as a ``##`` continuation, then the most frequent
    words (ties in alphabetical order). (``tokenizers``' WordPiece trainer breaks frequency ties
    in a different order on every run, which made the fine-tuning tests' data differ per run.)"""
    normalizer = BertNormalizer(lowercase=True)
    pre_tokenizer = BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for word in counts for c in word})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    words = sorted((w for w in counts if len(w) > 1), key=lambda w: (-counts[w], w))
    return vocab + words[: max(0, size - len(vocab))]


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


def build_bert(folder: Path, vocab_dir: Path, *, perturbed: bool = True) -> Path:
    """A random ``BertModel`` (with pooler) saved by ``save_pretrained`` into ``folder``, plus the
    WordPiece ``vocab.txt`` of ``vocab_dir``; every tensor perturbed unless ``perturbed`` is false."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(1)
    config = BertConfig(
        vocab_size=_vocab_size(vocab_dir),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.1,
    )
    model = BertModel(config)
    if perturbed:
        perturb(model, seed=1)
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_bytes((vocab_dir / "vocab.txt").read_bytes())
    return folder


@pytest.fixture(scope="session")
def bert_dir(tmp_path_factory: pytest.TempPathFactory, wordpiece_dir: Path) -> Path:
    """A random BERT, every tensor perturbed (what the parity tests import)."""
    return build_bert(tmp_path_factory.mktemp("bert"), wordpiece_dir)


@pytest.fixture(scope="session")
def bert_init_dir(tmp_path_factory: pytest.TempPathFactory, wordpiece_dir: Path) -> Path:
    """The same BERT as transformers initialises it (biases 0, norm weights 1), unperturbed: the encoder
    the LoRA fine-tuning test learns from (its accuracy bound was measured on it; a perturbed random
    encoder is a worse feature extractor for that small task, 0.73 instead of 0.85)."""
    return build_bert(tmp_path_factory.mktemp("bert-init"), wordpiece_dir, perturbed=False)


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
    model = GPT2LMHeadModel(config)
    perturb(model, seed=2)
    model.save_pretrained(folder)
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


# ---------------------------------------------------------------------- Llama, Mistral, Qwen2
# Every variant: 2 layers, 4 query heads over 2 key/value heads (grouped-query attention) unless
# set otherwise, a larger init than the families' 0.02 so that greedy decoding does not repeat one
# token, and contexts of 64 so that the tests' 40-token inputs cross Mistral's window of 8.
LLAMA_FAMILY = {
    # rope_scaling llama3 (original context 16 < 64, so the scaled frequencies matter), untied head
    "llama": dict(
        model_type="llama",
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ),
    # rope_scaling linear, tied embeddings, one key/value head (multi-query attention), head_dim 16
    "llama_linear": dict(
        model_type="llama",
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
        tie_word_embeddings=True,
        num_key_value_heads=1,
        head_dim=16,
    ),
    "mistral": dict(model_type="mistral", sliding_window=8),
    "qwen2": dict(model_type="qwen2", tie_word_embeddings=True),  # q/k/v biases
}
_SPECIALS = {
    "llama": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "qwen2": {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
}


def save_llama_tokenizer(model_type: str, folder: Path) -> int:
    """A byte-level BPE ``tokenizer.json`` (+ ``tokenizer_config.json``) of the family: Llama and
    Mistral put ``<s>`` before every text, Qwen2 nothing. Returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE

    specials = _SPECIALS[model_type]
    tokens = list(dict.fromkeys(specials.values()))
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        min_frequency=2,
        special_tokens=tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if "bos_token" in specials:
        bos = specials["bos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    tok.save(str(folder / "tokenizer.json"))
    options = {**specials, "tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": "bos_token" in specials}
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    return tok.get_vocab_size()


def build_llama_family(variant: str, folder: Path, **save_kwargs: object) -> Path:
    """A random ``...ForCausalLM`` of ``variant`` (see :data:`LLAMA_FAMILY`) and its tokenizer,
    saved by ``save_pretrained`` into ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = dict(LLAMA_FAMILY[variant])
    model_type = options.pop("model_type")
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = save_llama_tokenizer(model_type, folder)
    specials = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in specials}
    names = _SPECIALS[model_type]
    config = AutoConfig.for_model(
        model_type,
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=options.pop("num_key_value_heads", 2),
        max_position_embeddings=64,
        initializer_range=0.2,
        bos_token_id=ids.get(names.get("bos_token")),
        eos_token_id=ids[names["eos_token"]],
        pad_token_id=ids.get(names.get("pad_token")),
        tie_word_embeddings=options.pop("tie_word_embeddings", False),
        **options,
    )
    torch.manual_seed(sum(map(ord, variant)))
    model = AutoModelForCausalLM.from_config(config)
    perturb(model, seed=sum(map(ord, variant)))
    model.save_pretrained(folder, **save_kwargs)
    return folder


@pytest.fixture(scope="session", params=sorted(LLAMA_FAMILY))
def llama_family_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each variant of :data:`LLAMA_FAMILY` in turn, as a Hugging Face folder."""
    return build_llama_family(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``llama`` variant (llama3 rope scaling, GQA, untied head)."""
    return build_llama_family("llama", tmp_path_factory.mktemp("llama"))
