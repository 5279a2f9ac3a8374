"""A decoder-only (GPT-style) language model.

``ids [B, T]`` -> token embedding + positions -> dropout -> a stack of causal self-attention
blocks (:class:`attnkit.nn.TransformerDecoder` without cross-attention; pre-norm by default, with a
final LayerNorm) -> ``lm_head`` -> next-token logits ``[B, T, V]``. ``logits[:, t]`` predicts
``ids[:, t + 1]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, ClassVar, Literal, Self, overload

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from attnkit.models.checks import check_ids
from attnkit.models.config import EncoderConfig, OneOf, StrictModel
from attnkit.models.generation import (
    CausalDecoding,
    check_beam_size,
    check_left_padding,
    check_sampling,
    check_stop_strings,
    left_pad,
    run_beam_search,
    sample,
    seen_tokens,
)
from attnkit.models.registry import register_model
from attnkit.nn import (
    IGNORE_INDEX,
    NORMS,
    POSITIONS,
    DecoderCache,
    StackSpec,
    TransformerDecoder,
    document_mask,
    document_positions,
    embedding_positions,
    linear_cross_entropy,
    positions_from_padding_mask,
)

__all__ = ["PRESETS", "LanguageModel", "LanguageModelArchitecture", "LanguageModelConfig", "RopeScaling"]


class RopeScaling(StrictModel):
    """Rotary context extension, as Hugging Face transformers' ``rope_scaling`` / ``rope_type``.

    ``type``: ``"linear"`` (inverse frequencies divided by ``factor``), ``"dynamic"`` (NTK-aware: the
    base grows with the sequence once it exceeds ``original_max_position_embeddings``) or ``"llama3"``
    (Llama 3.1's per-wavelength blend of the two, with ``low_freq_factor`` / ``high_freq_factor``).
    ``original_max_position_embeddings``: the pre-training context; ``None`` = 8192 for ``llama3``
    (Llama 3.1's) and the model's ``max_len`` otherwise (transformers' ``max_position_embeddings``).
    """

    type: Literal["linear", "dynamic", "llama3"]
    factor: float = Field(..., gt=0.0)
    low_freq_factor: float = Field(1.0, gt=0.0)
    high_freq_factor: float = Field(4.0, gt=0.0)
    original_max_position_embeddings: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check_factors(self) -> RopeScaling:
        if self.type == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"llama3 rope_scaling needs high_freq_factor > low_freq_factor, "
                f"got {self.high_freq_factor} and {self.low_freq_factor}"
            )
        return self

    def as_mapping(self, max_len: int) -> dict[str, object]:
        """The ``rope_scaling`` mapping of :class:`attnkit.nn.StackSpec` (``original_max_position_embeddings``
        resolved for a model of context ``max_len``)."""
        original = self.original_max_position_embeddings
        if original is None:
            original = 8192 if self.type == "llama3" else max_len
        return dict(
            type=self.type,
            factor=self.factor,
            low_freq_factor=self.low_freq_factor,
            high_freq_factor=self.high_freq_factor,
            original_max_position_embeddings=original,
        )


_LLAMA: dict[str, Any] = dict(
    norm="rmsnorm",
    activation="swiglu",
    positional="rotary",
    bias=False,
    qkv_bias=None,
    tie_weights=False,
    norm_first=True,
    layer_norm_eps=1e-6,
    sliding_window=None,
)
PRESETS: dict[str, dict[str, Any]] = {
    "gpt2": dict(
        norm="layernorm",
        activation="gelu_tanh",
        positional="learned",
        bias=True,
        qkv_bias=None,
        tie_weights=True,
        norm_first=True,
        layer_norm_eps=1e-5,
        sliding_window=None,
    ),
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "sliding_window": 4096},
    "qwen2": {**_LLAMA, "qkv_bias": True},
}
"""The family of each preset: the fields it sets (sizes are left to the config)."""


class LanguageModelArchitecture(EncoderConfig):
    """Everything of a language model but its vocabulary (the stack fields as :class:`EncoderConfig`;
    by default 4 pre-norm GELU blocks); tasks build their ``model`` config section on it and add the
    vocabulary from their data.

    ``preset`` (``"gpt2"``, ``"llama"``, ``"mistral"``, ``"qwen2"``) sets the family's fields
    (:data:`PRESETS`: norm, activation, positions, biases, tied head, sliding window) wherever they are
    left at their defaults; fields given other values keep them. :meth:`from_preset` does the same
    from Python.
    """

    field_overrides: ClassVar[dict[str, Any]] = {"num_layers": 4, "activation": "gelu", "norm_first": True}

    preset: Literal["gpt2", "llama", "mistral", "qwen2"] | None = Field(
        None, description="a model family's architecture: gpt2, llama, mistral or qwen2"
    )
    norm: Annotated[str, OneOf(NORMS)] = Field("layernorm", description="LayerNorm or RMSNorm (eps: layer_norm_eps)")
    positional: Annotated[str, OneOf(POSITIONS, exclude=("none",))] = "learned"
    max_len: int = Field(256, gt=0, description="the context: most positions the model attends over")
    tie_weights: bool = Field(True, description="lm_head shares its weight with token_embedding")
    bias: bool = Field(True, description="biases in the linear layers and LayerNorms")
    qkv_bias: bool | None = Field(None, description="biases in the q/k/v projections (None = follow bias)")
    layer_norm_eps: float = Field(1e-5, gt=0.0)
    num_kv_heads: int | None = Field(
        None, gt=0, description="key/value heads (grouped-query attention): None = num_heads, 1 = multi-query"
    )
    rope_theta: float = Field(10000.0, gt=0.0, description="rotary base")
    rope_scaling: RopeScaling | None = None
    sliding_window: int | None = Field(
        None, gt=0, description="each token attends to at most the last sliding_window tokens (itself included)"
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        name = data["preset"]
        if not isinstance(name, str) or name not in PRESETS:  # (a list is unhashable)
            return data  # the field's own validation names the choices
        out = dict(data)
        for key, value in PRESETS[name].items():
            field = cls.model_fields[key]
            if key not in out or out[key] == field.default:
                out[key] = value
        return out

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> Self:
        """The ``name`` family's architecture (:data:`PRESETS`) with ``overrides`` (e.g. sizes) on top."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls.model_validate({**PRESETS[name], **overrides, "preset": name})

    @model_validator(mode="after")
    def _check_positions(self) -> LanguageModelArchitecture:
        head_dim = self.head_dim or self.d_model // self.num_heads
        if self.positional == "rotary" and head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        if self.rope_scaling is not None and self.positional != "rotary":
            raise ValueError(f"rope_scaling needs positional='rotary', got positional={self.positional!r}")
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            options = [h for h in range(1, min(self.num_heads, 1024) + 1) if self.num_heads % h == 0][:10]
            raise ValueError(
                f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads}); choose one of {options}"
            )
        return self

    def stack_spec(self, **fields: Any) -> StackSpec:
        """The :class:`attnkit.nn.StackSpec` of the decoder stack (without cross-attention)."""
        own: dict[str, Any] = dict(
            bias=self.bias,
            layer_norm_eps=self.layer_norm_eps,
            cross_attention=False,
            norm=self.norm,
            num_kv_heads=self.num_kv_heads,
            qkv_bias=self.qkv_bias,
            positional=self.positional,
            max_len=self.max_len,
            rope_theta=self.rope_theta,
            rope_scaling=None if self.rope_scaling is None else self.rope_scaling.as_mapping(self.max_len),
            sliding_window=self.sliding_window,
        )
        return super().stack_spec(**{**own, **fields})


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


@register_model("lm", LanguageModelConfig)
class LanguageModel(nn.Module):
    """GPT-style language model; attribute names follow nanoGPT/GPT-2 roles:

    ``token_embedding`` (``nn.Embedding``), ``positional`` (learned or sinusoidal positions added
    to the embeddings; ``None`` for rotary and ALiBi, which act inside attention), ``dropout`` (on the
    embedding sum), ``decoder`` (:class:`TransformerDecoder`, ``cross_attention=False``; pre-norm
    stacks end with a final norm, LayerNorm or RMSNorm as ``config.norm``), ``lm_head``
    (``nn.Linear(d_model, vocab_size, bias=False)``, its weight *is* ``token_embedding.weight`` when
    ``tie_weights``).

    Checkpoint layout for importers (``decoder.layers.{i}.``): ``self_attn.in_proj`` (``q``, ``k``, ``v``
    projection rows concatenated: ``[(H + 2 Hkv) * head_dim, d_model]``), ``self_attn.out_proj``,
    ``norm1`` (before attention), ``norm3`` (before the feed-forward), ``ff.linear1`` (with
    ``activation="swiglu"`` the rows of ``gate_proj`` then ``up_proj``), ``ff.linear2`` (``down_proj``);
    ``decoder.norm`` is the final norm.

    Initialisation: token (and learned position) embeddings ``N(0, 0.02)`` as GPT-2, so that with
    tied weights the initial logits are small and the first predictions near uniform (loss about
    ``log V``); the attention and feed-forward layers keep attnkit's defaults (Xavier-uniform
    attention projections, PyTorch's Linear init).

    Masks are True = may attend: ``key_padding_mask [B, T]`` (``[B, past + T]`` with a cache) is
    True at real tokens. With a ``key_padding_mask`` each token's position is the number of real
    tokens before it in its row, so a left-padded row computes what the row alone would.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model)
        nn.init.normal_(self.token_embedding.weight, mean=0.0, std=0.02)
        spec = c.stack_spec()
        self.positional = embedding_positions(spec)
        self.dropout = nn.Dropout(c.dropout)
        self.decoder = TransformerDecoder(spec)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.lm_head.weight = self.token_embedding.weight

    # ------------------------------------------------------------------ forward
    def new_cache(self) -> DecoderCache:
        """An empty key/value cache for incremental decoding (:meth:`forward` with ``cache=``)."""
        return self.decoder.new_cache()

    def _hidden(self, ids: Tensor, key_padding_mask: Tensor | None, cache: DecoderCache | None, need_weights: bool,
                document_ids: Tensor | None = None) -> tuple[Tensor, list[Tensor]]:  # fmt: skip
        if ids.dim() != 2:
            raise ValueError(f"expected token ids [batch, seq], got shape {tuple(ids.shape)}")
        if ids.shape[1] == 0:
            raise ValueError("expected at least one token per row (start a text with bos_id)")
        check_ids(ids, self.config.vocab_size)
        offset = cache.length if cache is not None else 0
        end = offset + ids.shape[1]
        if end > self.config.max_len:
            raise ValueError(
                f"input reaches position {end} ({offset} cached + {ids.shape[1]} new tokens) but the model's "
                f"context is max_len={self.config.max_len}; pass at most the last {self.config.max_len} tokens "
                "(generate() slides this window itself)"
            )
        positions = None
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool or key_padding_mask.shape != (ids.shape[0], end):
                raise ValueError(
                    f"key_padding_mask must be a boolean [B, past + T]=[{ids.shape[0]}, {end}] tensor (True = real "
                    f"token), got {key_padding_mask.dtype} {tuple(key_padding_mask.shape)}"
                )
            positions = positions_from_padding_mask(key_padding_mask)[:, offset:]
        mask = None
        if document_ids is not None:  # packed rows: attention and positions kept inside each document
            if cache is not None or key_padding_mask is not None or document_ids.shape != ids.shape:
                raise ValueError(f"document_ids must be [B, T]={list(ids.shape)}, without cache or key_padding_mask")
            mask, positions = document_mask(document_ids), document_positions(document_ids)
        h = self.token_embedding(ids)
        if self.positional is not None:
            h = self.positional.add(h, offset, positions)
        h = self.dropout(h)
        kwargs: dict[str, Any] = dict(
            tgt_mask=mask, tgt_key_padding_mask=key_padding_mask, tgt_is_causal=True, cache=cache, positions=positions
        )
        if need_weights:
            h, maps, _ = self.decoder.forward_with_attention(h, **kwargs)
            return h, maps
        return self.decoder(h, **kwargs), []

    @overload
    def forward(
        self,
        ids: Tensor,
        key_padding_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        document_ids: Tensor | None = None,
        only: Tensor | None = None,
        targets: None = None,
    ) -> Tensor: ...
    @overload
    def forward(
        self,
        ids: Tensor,
        key_padding_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
        document_ids: Tensor | None = None,
        only: None = None,
        targets: Tensor,
    ) -> tuple[Tensor, Tensor]: ...
    def forward(self, ids: Tensor, key_padding_mask: Tensor | None = None, *, cache: DecoderCache | None = None,
                document_ids: Tensor | None = None, only: Tensor | None = None,
                targets: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
        """``ids [B, T]`` -> next-token logits ``[B, T, V]``.

        With ``cache`` (from :meth:`new_cache`), ``ids`` are only the new positions: they are
        placed after the ``cache.length`` cached ones (positions offset accordingly) and their
        keys/values are appended to the cache. ``document_ids [B, T]`` (packed rows of several
        documents, :func:`attnkit.nn.document_mask`): each token attends only to its own document
        (True = may attend, with the causal mask) and positions restart at each document's start. ``only``
        (boolean ``[B, T]``): the logits ``[N, V]`` of those positions alone (the head skips the others).

        With ``targets [B, T]`` (each position's next token, -100 where the loss does not count it) it
        returns ``(loss, predictions [N])`` instead: the mean cross-entropy over the ``N`` counted
        positions and the head's most likely token at each, computed by
        :func:`attnkit.nn.linear_cross_entropy` chunk by chunk, without the ``[N, V]`` logits.
        """
        h, _ = self._hidden(ids, key_padding_mask, cache, False, document_ids)
        if targets is None:
            return self.lm_head(h if only is None else h[only])
        if only is not None or targets.shape != ids.shape:
            raise ValueError(f"targets must be [B, T]={list(ids.shape)} (-100 = not counted), without `only`")
        keep = targets != IGNORE_INDEX
        return linear_cross_entropy(h[keep], self.lm_head.weight, targets[keep], self.lm_head.bias)

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
        prompt_ids: Tensor | Sequence[Sequence[int] | Tensor],
        max_new_tokens: int,
        *,
        padding_mask: Tensor | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repetition_penalty: float = 1.0,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
        stop_at_eos: bool = True,
        stop_ids: Sequence[int] | None = None,
        stop_strings: Sequence[str] | None = None,
        decode: Callable[[list[int]], str] | None = None,
        on_token: Callable[[Tensor], None] | None = None,
        num_beams: int = 1,
        length_penalty: float = 1.0,
    ) -> Tensor:
        """Continue a batch of prompts by up to ``max_new_tokens`` tokens -> ``[B, T + n]``.

        Args:
            prompt_ids: ``[B, T]`` token ids, left-padded when ``padding_mask`` is given; or a list of
                prompts (token-id lists / 1-D tensors) of any lengths, left-padded here. Each prompt has
                at least one token (start from ``[bos_id]`` for no prompt).
            padding_mask: ``[B, T]``, True = real token, False = padding (all padding on the left).
                Each row is generated as if alone: its positions count its own tokens only.
            temperature: 0 = greedy; otherwise sampling (see :func:`sample_next_token`).
            top_k, top_p, min_p: sampling filters.
            repetition_penalty: transformers' semantics: the logits of tokens already in the row
                (prompt or generated, padding excluded) are divided by it when positive, multiplied
                when negative (``1`` = off; ``> 1`` discourages repeats). Applies to greedy too.
            generator: a seeded ``torch.Generator`` makes sampling reproducible.
            use_cache: decode one position per step with the key/value cache; ``False``
                recomputes the whole context every step (same tokens, slower).
            stop_at_eos: a row that produced ``eos_id`` gets ``pad_id`` afterwards.
            stop_ids: more ids that end a row like ``eos_id`` (e.g. a chat template's end-of-turn token,
                ``<|im_end|>`` or ``<|eot_id|>``); the row keeps the id it stopped at.
            stop_strings: a row stops (``pad_id`` afterwards) once the text of its new tokens,
                ``decode(token ids)``, contains one of them (the text is trimmed by the caller, e.g.
                :func:`attnkit.tasks.lm.generate_text`). Needs ``decode``.
            on_token: called after every step with the new tokens ``[B]`` (for streaming).
            num_beams: ``> 1``: beam search (:func:`attnkit.models.generation.beam_search`) with that many
                beams and ``length_penalty`` instead of sampling: each row continues with its best
                finished hypothesis (up to and with EOS), then ``pad_id``. Takes no sampling filters,
                repetition penalty, stop strings or ``on_token``; ``temperature`` is not used.

        Generation stops when every row has stopped (so ``n`` may be less than ``max_new_tokens``).
        The result is the (left-padded) prompts followed by the new tokens.

        The context is ``max_len`` tokens. A longer prompt, or generation past the context,
        slides a window: each next token is predicted from the last ``max_len`` columns,
        re-encoded from position 0 (as nanoGPT crops its input). With the cache, decoding is
        incremental while the text fits the context, then recomputes the window every step.

        The model is in eval mode during generation (dropout off) and its mode restored after.
        """
        c = self.config
        check_sampling(temperature, top_k, top_p, min_p, repetition_penalty)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        check_stop_strings(stop_strings, decode)
        if num_beams != 1:
            check_beam_size(num_beams)
            given = dict(
                top_k=top_k, top_p=top_p, min_p=min_p, stop_ids=stop_ids, stop_strings=stop_strings, on_token=on_token
            )
            unused = [k for k, v in given.items() if v is not None]
            if repetition_penalty != 1.0 or not stop_at_eos or unused:
                raise ValueError(
                    "num_beams > 1 is beam search: it takes no sampling filters, repetition_penalty, "
                    f"stop_strings, on_token or stop_at_eos=False (got {unused or 'those'})"
                )
        was_training = self.training
        self.eval()
        try:
            decoding = self.decoding(
                prompt_ids, padding_mask, repeat=num_beams, max_len=max_new_tokens, use_cache=use_cache
            )
            prompt = decoding.tokens[::num_beams]
            if max_new_tokens == 0:
                return prompt
            if num_beams != 1:
                hyps = run_beam_search(
                    decoding,
                    prompt.shape[0],
                    beam_size=num_beams,
                    max_len=max_new_tokens,
                    length_penalty=length_penalty,
                )
                return torch.cat([prompt, hyps.tokens], dim=1)
            seen = None
            if repetition_penalty != 1.0:
                seen = seen_tokens(prompt, decoding.prompt_mask, c.vocab_size)
            new = sample(
                decoding,
                max_new_tokens,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
                generator=generator,
                repetition_penalty=repetition_penalty,
                seen=seen,
                stop_at_eos=stop_at_eos,
                stop_ids=stop_ids,
                stop_strings=stop_strings,
                decode=decode,
                on_token=on_token,
            )
            return torch.cat([prompt, new], dim=1)
        finally:
            self.train(was_training)

    def decoding(
        self,
        inputs: Tensor | Sequence[Sequence[int] | Tensor],
        padding_mask: Tensor | None = None,
        *,
        repeat: int = 1,
        max_len: int,
        use_cache: bool = True,
    ) -> CausalDecoding:
        """The incremental decoding of prompts (as :meth:`generate`'s ``prompt_ids``/``padding_mask``;
        True = real token), each repeated ``repeat`` times (beams), with room for ``max_len`` new tokens:
        what :func:`attnkit.models.generation.greedy_decode` and :func:`~attnkit.models.generation.beam_search`
        decode with. Runs in the model's current mode (call ``eval()`` first)."""
        c = self.config
        device = self.token_embedding.weight.device
        if not isinstance(inputs, Tensor):
            if padding_mask is not None:
                raise ValueError("padding_mask goes with a [B, T] tensor of prompt_ids, not with a list of prompts")
            inputs, padding_mask = left_pad(inputs, c.pad_id)
        if inputs.dim() != 2 or inputs.shape[1] == 0:
            raise ValueError(
                f"prompt_ids must be [batch, seq] with seq >= 1 (use [[bos_id]] for no prompt), "
                f"got shape {tuple(inputs.shape)}"
            )
        check_ids(inputs, c.vocab_size)
        if padding_mask is not None:
            check_left_padding(padding_mask, inputs.shape)
            padding_mask = padding_mask.to(device)
            if bool(padding_mask.all()):
                padding_mask = None  # no padding: the plain (offset) positions are the same
        prompt = inputs.long().to(device)
        if repeat != 1:
            prompt = prompt.repeat_interleave(repeat, dim=0)
            padding_mask = None if padding_mask is None else padding_mask.repeat_interleave(repeat, dim=0)
        return CausalDecoding(
            self._last_logits,
            prompt,
            padding_mask,
            cache=self.new_cache() if use_cache else None,
            context=c.max_len,
            max_new_tokens=max_len,
            pad_id=c.pad_id,
            eos_id=c.eos_id,
        )

    def _last_logits(self, ids: Tensor, padding_mask: Tensor | None, cache: DecoderCache | None) -> Tensor:
        """Logits ``[B, V]`` of the last position only (the head is not applied to the others)."""
        h, _ = self._hidden(ids, padding_mask, cache, need_weights=False)
        return self.lm_head(h[:, -1])
