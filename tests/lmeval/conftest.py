"""A small random Llama (a Hugging Face folder, its byte-level BPE ``tokenizer.json`` trained here) and
three local lm-evaluation-harness tasks (YAML beside a JSONL file): multiple choice, generate_until
and a perplexity (loglikelihood_rolling) task. Nothing is downloaded: the datasets library reads the
local files (``dataset_path: json``) into a cache under the test's temporary folder."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

WORDS = (  # noqa: SIM905  (one string reads better than 38 list items)
    "the cat dog bird sat ran flew on under over a mat tree roof red green blue small big old young "
    "and then it was is saw ate one two three four five what where who answer question"
).split()


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))).capitalize() + "." for _ in range(n)]


def build_llama(folder: Path) -> Path:
    """A random 2-layer ``LlamaForCausalLM`` (GQA, untied head, context 64; seeded) and a byte-level BPE
    ``tokenizer.json`` that puts ``<s>`` before every text, as Llama's does, saved in ``folder``."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
    from tokenizers.models import BPE
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        min_frequency=2,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts(300, seed=0), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(folder / "tokenizer.json"))
    options = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": True,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.3,  # larger than Llama's 0.02: answers differ and greedy text does not repeat one token
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(7)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_llama(tmp_path_factory.mktemp("llama"))


def write_tasks(folder: Path, cache: Path) -> Path:
    """``folder`` with four task YAMLs, each beside its JSONL file: ``mini_mc`` (12 questions, 3-4
    choices), ``mini_gen`` (6 prompts, greedy, cut at a full stop or a newline), ``mini_gen_default``
    (the same without ``max_gen_toks``, as most benchmarks: lm_eval's default of 256 new tokens, more
    than the model's context) and ``mini_ppl`` (6 texts, one longer than the model's context of 64
    tokens so that it takes several windows)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(1)
    questions = texts(12, seed=2)
    mc = [{"question": q, "choices": rng.sample(WORDS, 3 + i % 2), "answer": i % 3} for i, q in enumerate(questions)]
    gen = [{"question": q, "answer": "the"} for q in texts(6, seed=3)]
    ppl = [{"text": t} for t in texts(5, seed=4)] + [{"text": " ".join(texts(12, seed=5))}]
    common = {"dataset_path": "json", "test_split": "train"}
    tasks = {
        "mini_mc": (
            mc,
            {
                "output_type": "multiple_choice",
                "doc_to_text": "Question: {{question}}\nAnswer:",
                "doc_to_choice": "{{choices}}",
                "doc_to_target": "{{answer}}",
                "metric_list": [{"metric": "acc"}, {"metric": "acc_norm"}],
            },
        ),
        "mini_gen": (
            gen,
            {
                "output_type": "generate_until",
                "doc_to_text": "{{question}}",
                "doc_to_target": "{{answer}}",
                "generation_kwargs": {"until": [".", "\n"], "do_sample": False, "max_gen_toks": 12},
                "metric_list": [{"metric": "exact_match"}],
            },
        ),
        "mini_gen_default": (
            gen,
            {
                "output_type": "generate_until",
                "doc_to_text": "{{question}}",
                "doc_to_target": "{{answer}}",
                "generation_kwargs": {"until": ["\n\n"], "do_sample": False},
                "metric_list": [{"metric": "exact_match"}],
            },
        ),
        "mini_ppl": (
            ppl,
            {
                "output_type": "loglikelihood_rolling",
                "doc_to_text": "",
                "doc_to_target": "{{text}}",
                "metric_list": [{"metric": "word_perplexity"}, {"metric": "bits_per_byte"}],
            },
        ),
    }
    import yaml

    for name, (rows, spec) in tasks.items():
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows))
        kwargs = {"data_files": {"train": str(data)}, "cache_dir": str(cache)}
        config = {"task": name, **common, "dataset_kwargs": kwargs, **spec, "metadata": {"version": 1}}
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


@pytest.fixture(scope="session")
def tasks_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The folder of :func:`write_tasks`; while it is in use nothing comes from the Hugging Face Hub
    (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``) and the datasets cache is a temporary folder."""
    root = tmp_path_factory.mktemp("lmeval-tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_CACHE", str(root / "hf-datasets"))
        yield write_tasks(root / "tasks", root / "hf-datasets")
