"""A tiny random chat model saved as a Hugging Face folder (a locally trained tokenizer.json, a ChatML chat
template, ``save_pretrained``; nothing is downloaded): what the chat, serve and model-folder tests talk to."""

from __future__ import annotations

import json
from pathlib import Path

import torch

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    f"The {a} {b} sat on the {c} and looked at the {d}. It was {e}."
    for a in ("old", "young", "small", "big", "quiet")
    for b in ("owl", "cat", "fox", "dog")
    for c in ("mat", "hill", "roof")
    for d in ("moon", "river", "stars")
    for e in ("late", "cold", "calm")
]


def build_chat_model(
    folder: Path,
    *,
    context: int = 128,
    seed: int = 0,
    model_type: str = "llama",
    template: str = CHATML,
    eos: tuple[str, ...] = ("<|im_end|>",),
    tie_word_embeddings: bool = False,
) -> Path:
    """Save a random ``...ForCausalLM`` of ``model_type`` (2 layers, width 32, GQA) with a ChatML chat template
    (``template``), a byte-level BPE tokenizer without BOS whose EOS is ``<|im_end|>``, and the ``eos`` tokens as
    the config's (and generation config's) ``eos_token_id``."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import AutoConfig, AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    options = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    ids = {t: tok.token_to_id(t) for t in SPECIALS}
    config = AutoConfig.for_model(
        model_type,
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        initializer_range=0.3,
        bos_token_id=None,
        eos_token_id=ids[eos[0]] if len(eos) == 1 else [ids[t] for t in eos],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=tie_word_embeddings,
    )
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder
