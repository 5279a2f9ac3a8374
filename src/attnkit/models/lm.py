"""A decoder-only (GPT-style) language model.

``ids [B, T]`` -> token embedding + positions -> dropout -> a stack of causal self-attention
blocks (:class:`attnkit.nn.TransformerDecoder` without cross-attention; pre-norm by default, with a
final LayerNorm) -> ``lm_head`` -> next-token logits ``[B, T, V]``. ``logits[:, t]`` predicts
``ids[:, t + 1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from attnkit.models.config import EncoderConfig
from attnkit.models.encoders import _check_ids
from attnkit.models.generation import check_sampling, sample_next_token
from attnkit.nn import DecoderCache, LearnedPositionalEncoding, SinusoidalPositionalEncoding, TransformerDecoder

__all__ = ["LanguageModel", "LanguageModelArchitecture", "LanguageModelConfig"]


class LanguageModelArchitecture(EncoderConfig):
    """Everything of a language model but its vocabulary (the stack fields as :class:`EncoderConfig`);
    tasks build their ``model`` config section on it and add the vocabulary from their data."""

    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    dim_feedforward: int = 512
    dropout: float = 0.1
    activation: Literal["relu", "gelu", "gelu_tanh", "swiglu"] = "gelu"
    norm_first: bool = Field(True, description="pre-norm (GPT-2) instead of the paper's post-norm")
    positional: Literal["learned", "sinusoidal", "rotary"] = "learned"
    max_len: int = Field(256, gt=0, description="the context: most positions the model attends over")
    tie_weights: bool = Field(True, description="lm_head shares its weight with token_embedding")
    bias: bool = Field(True, description="biases in the linear layers and LayerNorms")
    layer_norm_eps: float = Field(1e-5, gt=0.0)

    @model_validator(mode="after")
    def _check_rotary(self) -> LanguageModelArchitecture:
        head_dim = self.head_dim or self.d_model // self.num_heads
        if self.positional == "rotary" and head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        return self


class LanguageModelConfig(LanguageModelArchitecture):
    """A decoder-only language model: the architecture, the vocabulary size and its special ids."""

    vocab_size: int = Field(..., gt=0, description="token ids lie in [0, vocab_size)")
    pad_id: int = Field(0, ge=0)
    bos_id: int = Field(1, ge=0)
    eos_id: int = Field(2, ge=0)

    @model_validator(mode="after")
    def _check_lm(self) -> LanguageModelConfig:
        for name in ("pad_id", "bos_id", "eos_id"):
            if getattr(self, name) >= self.vocab_size:
                raise ValueError(f"{name} ({getattr(self, name)}) must be < vocab_size ({self.vocab_size})")
        return self


class LanguageModel(nn.Module):
    """GPT-style language model; attribute names follow nanoGPT/GPT-2 roles:

    ``token_embedding`` (``nn.Embedding``), ``positional`` (learned or sinusoidal positions added
    to the embeddings; ``None`` for rotary, which acts inside attention), ``dropout`` (on the
    embedding sum), ``decoder`` (:class:`TransformerDecoder`, ``cross_attention=False``; pre-norm
    stacks end with a final LayerNorm), ``lm_head`` (``nn.Linear(d_model, vocab_size, bias=False)``,
    its weight *is* ``token_embedding.weight`` when ``tie_weights``).

    Initialisation: token (and learned position) embeddings ``N(0, 0.02)`` as GPT-2, so that with
    tied weights the initial logits are small and the first predictions near uniform (loss about
    ``log V``); the attention and feed-forward layers keep attnkit's defaults (Xavier-uniform
    attention projections, PyTorch's Linear init).

    Masks are True = may attend: ``key_padding_mask [B, T]`` (``[B, past + T]`` with a cache) is
    True at real tokens.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        nn.init.normal_(self.token_embedding.weight, mean=0.0, std=0.02)
        self.positional: nn.Module | None
        if c.positional == "learned":
            self.positional = LearnedPositionalEncoding(c.d_model, c.max_len)
        elif c.positional == "sinusoidal":
            self.positional = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        else:
            self.positional = None
        self.dropout = nn.Dropout(c.dropout)
        self.decoder = TransformerDecoder(
            **c.stack_kwargs(),  # type: ignore[arg-type]
            bias=c.bias,
            layer_norm_eps=c.layer_norm_eps,
            cross_attention=False,
            rotary=c.positional == "rotary",
        )
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.token_embedding.weight

    # ------------------------------------------------------------------ forward
    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding (:meth:`forward` with ``cache=``)."""
        return self.decoder.new_cache()

    def _hidden(
        self, ids: Tensor, key_padding_mask: Tensor | None, cache: DecoderCache | None, need_weights: bool
    ) -> tuple[Tensor, list[Tensor]]:
        if ids.dim() != 2:
            raise ValueError(f"expected token ids [batch, seq], got shape {tuple(ids.shape)}")
        if ids.shape[1] == 0:
            raise ValueError("expected at least one token per row (start a text with bos_id)")
        _check_ids(ids, self.config.vocab_size)
        offset = cache.length if cache is not None else 0
        end = offset + ids.shape[1]
        if end > self.config.max_len:
            raise ValueError(
                f"input reaches position {end} ({offset} cached + {ids.shape[1]} new tokens) but the model's "
                f"context is max_len={self.config.max_len}; pass at most the last {self.config.max_len} tokens "
                "(generate() slides this window itself)"
            )
        h = self.token_embedding(ids)
        if self.positional is not None:
            h = self.positional(h, offset)
        h = self.dropout(h)
        # One new position after cached ones may attend to all of them: causal without a mask.
        causal = not (cache is not None and ids.shape[1] == 1 and key_padding_mask is None)
        if need_weights:
            h, maps, _ = self.decoder.forward_with_attention(
                h, tgt_key_padding_mask=key_padding_mask, tgt_is_causal=True, cache=cache
            )
            return h, maps
        return self.decoder(h, tgt_key_padding_mask=key_padding_mask, tgt_is_causal=causal, cache=cache), []

    def forward(
        self, ids: Tensor, key_padding_mask: Tensor | None = None, *, cache: DecoderCache | None = None
    ) -> Tensor:
        """``ids [B, T]`` -> next-token logits ``[B, T, V]``.

        With ``cache`` (from :meth:`new_cache`), ``ids`` are only the new positions: they are
        placed after the ``cache.length`` cached ones (positions offset accordingly) and their
        keys/values are appended to the cache.
        """
        h, _ = self._hidden(ids, key_padding_mask, cache, need_weights=False)
        return self.lm_head(h)

    def forward_with_attention(
        self, ids: Tensor, key_padding_mask: Tensor | None = None, *, cache: DecoderCache | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """Logits ``[B, T, V]`` and, per layer, the causal self-attention weights ``[B, H, T, past + T]``."""
        h, maps = self._hidden(ids, key_padding_mask, cache, need_weights=True)
        return self.lm_head(h), maps

    @torch.no_grad()
    def get_attention_maps(self, ids: Tensor, key_padding_mask: Tensor | None = None) -> list[Tensor]:
        """Per layer, the causal self-attention weights ``[B, H, T, T]`` for ``ids [B, T]``."""
        return self.forward_with_attention(ids, key_padding_mask)[1]

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
        stop_at_eos: bool = True,
        on_token: Callable[[Tensor], None] | None = None,
    ) -> Tensor:
        """Continue ``prompt_ids [B, T]`` by up to ``max_new_tokens`` tokens -> ``[B, T + n]``.

        Args:
            prompt_ids: ``[B, T]`` with ``T >= 1`` (start from ``[[bos_id]]`` for no prompt); the
                rows of a batch share their length (e.g. several samples of one prompt).
            temperature: 0 = greedy; otherwise sampling (see :func:`sample_next_token`).
            top_k, top_p: sampling filters.
            generator: a seeded ``torch.Generator`` makes sampling reproducible.
            use_cache: decode one position per step with the key/value cache; ``False``
                recomputes the whole context every step (same tokens, slower).
            stop_at_eos: a row that produced ``eos_id`` gets ``pad_id`` afterwards; generation
                stops when every row has (so ``n`` may be less than ``max_new_tokens``).
            on_token: called after every step with the new tokens ``[B]`` (for streaming).

        The context is ``max_len`` tokens. A longer prompt, or generation past the context,
        slides a window: each next token is predicted from the last ``max_len`` tokens,
        re-encoded from position 0 (as nanoGPT crops its input). With the cache, decoding is
        incremental while the text fits the context, then recomputes the window every step.

        The model is in eval mode during generation (dropout off) and its mode restored after.
        """
        c = self.config
        check_sampling(temperature, top_k, top_p)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0:
            raise ValueError(
                f"prompt_ids must be [batch, seq] with seq >= 1 (use [[bos_id]] for no prompt), "
                f"got shape {tuple(prompt_ids.shape)}"
            )
        _check_ids(prompt_ids, c.vocab_size)
        was_training = self.training
        self.eval()
        try:
            return self._generate(
                prompt_ids.long(),
                max_new_tokens,
                temperature,
                top_k,
                top_p,
                generator,
                use_cache,
                stop_at_eos,
                on_token,
            )
        finally:
            self.train(was_training)

    def _last_logits(self, ids: Tensor, cache: DecoderCache | None) -> Tensor:
        """Logits ``[B, V]`` of the last position only (the head is not applied to the others)."""
        h, _ = self._hidden(ids, None, cache, need_weights=False)
        return self.lm_head(h[:, -1])

    def _generate(
        self,
        out: Tensor,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        generator: torch.Generator | None,
        use_cache: bool,
        stop_at_eos: bool,
        on_token: Callable[[Tensor], None] | None,
    ) -> Tensor:
        c = self.config
        if max_new_tokens == 0:
            return out
        context = c.max_len
        cache = self.new_cache() if use_cache else None
        logits = self._last_logits(out[:, -context:], cache)
        finished = torch.zeros(out.shape[0], dtype=torch.bool, device=out.device)
        pieces = [out]
        for step in range(max_new_tokens):
            token = sample_next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
            if stop_at_eos:
                token = token.masked_fill(finished, c.pad_id)
                finished |= token == c.eos_id
            pieces.append(token[:, None])
            if on_token is not None:
                on_token(token)
            if step == max_new_tokens - 1 or (stop_at_eos and bool(finished.all())):
                break
            if cache is not None and cache.length < context:
                logits = self._last_logits(token[:, None], cache)
            else:  # past the context (or no cache): re-encode the last `context` tokens
                cache = None
                window = torch.cat(pieces, dim=1)[:, -context:]
                logits = self._last_logits(window, None)
        return torch.cat(pieces, dim=1)
