"""How a language model's documents and prompts are framed with special tokens.

attnkit's own tokenizers (``char``, ``word``, ``bpe``) frame every document as ``<bos> tokens <eos>``
with the fixed ids ``BOS_ID`` / ``EOS_ID``. A pretrained tokenizer (a Hugging Face ``tokenizer.json``)
frames documents as its model was trained: with the BOS token first only when the tokenizer's own
encoding starts with it (Llama and Mistral do; GPT-2 and Qwen2 do not: their documents are separated
by the end-of-text token alone), and its EOS token last.
"""

from __future__ import annotations

from attnkit.text.tokenizer_kinds import BOS_ID, EOS_ID
from attnkit.text.tokenizers import Tokenizer

__all__ = ["body_ids", "document_bounds", "document_ids", "prompt_ids"]


def document_bounds(tokenizer: Tokenizer) -> tuple[int | None, int | None]:
    """``(bos, eos)``: the ids written before and after every document (``None``: nothing)."""
    if not tokenizer.spec.pretrained:
        return BOS_ID, EOS_ID
    bos = tokenizer.bos_id
    starts_with_bos = bos is not None and tokenizer.encode("a")[:1] == [bos]
    return (bos if starts_with_bos else None), tokenizer.eos_id


def body_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids of ``text`` alone, without the special tokens that frame a document."""
    if not tokenizer.spec.pretrained:
        return tokenizer.encode(text)
    return list(tokenizer.backend.encode(text, add_special_tokens=False).ids)


def document_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids of ``text`` as one training document (see :func:`document_bounds`)."""
    if not tokenizer.spec.pretrained:
        return tokenizer.encode(text, add_bos=True, add_eos=True)
    bos, eos = document_bounds(tokenizer)
    body = body_ids(tokenizer, text)
    return [*([bos] if bos is not None else []), *body, *([eos] if eos is not None else [])]


def prompt_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The ids a language model continues for the prompt ``text``: the start of a document (its BOS
    where documents have one, then the text's tokens). An empty prompt of a tokenizer whose documents
    have no BOS starts from its EOS (the end of a previous document), as GPT-2's generation does."""
    if not isinstance(text, str):
        raise TypeError(f"a prompt must be a str, got {type(text).__name__}")
    if not tokenizer.spec.pretrained:
        return tokenizer.encode(text, add_bos=True)
    bos, eos = document_bounds(tokenizer)
    body = body_ids(tokenizer, text) if text else []
    start = [bos] if bos is not None else ([eos] if not body and eos is not None else [])
    ids = [*start, *body]
    if not ids:
        raise ValueError("an empty prompt needs a BOS or EOS token to start from, and this tokenizer has neither")
    return ids
