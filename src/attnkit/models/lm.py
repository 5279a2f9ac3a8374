"""A decoder-only (GPT-style) language model.

``ids [B, T]`` -> token embedding + positions -> dropout -> a stack of causal self-attention
blocks (:class:`attnkit.nn.TransformerDecoder` without cross-attention; pre-norm by default, with a
final LayerNorm) -> ``lm_head`` -> next-token logits ``[B, T, V]``. ``logits[:, t]`` predicts
``ids[:, t + 1]``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, overload

import torch
from torch import Tensor, nn

from attnkit.models.checks import check_ids
from attnkit.models.generation import FIELDS as SAMPLING_FIELDS
from attnkit.models.generation import (
    CausalDecoding,
    SamplingParams,
    check_beam_size,
    check_left_padding,
    check_sampling,
    check_stop_strings,
    left_pad,
    run_beam_search,
    sample,
)
from attnkit.models.lm_config import PRESETS, LanguageModelArchitecture, LanguageModelConfig, RopeScaling
from attnkit.models.registry import register_model
from attnkit.nn import (
    IGNORE_INDEX,
    DecoderCache,
    TransformerDecoder,
    document_mask,
    document_positions,
    embedding_positions,
    linear_cross_entropy,
    positions_from_padding_mask,
)
from attnkit.nn.dropout import Dropout
from attnkit.nn.hooks import HookPoint, embed_positions

__all__ = ["PRESETS", "LanguageModel", "LanguageModelArchitecture", "LanguageModelConfig", "RopeScaling"]


@functools.cache
def _rounded(value: float, dtype: torch.dtype) -> float:
    """``value`` as ``dtype`` holds it (transformers multiplies Gemma's embeddings by a scale in their dtype)."""
    return float(torch.tensor(value, dtype=dtype).item())


@register_model("lm", LanguageModelConfig)
class LanguageModel(nn.Module):
    """GPT-style language model; attribute names follow nanoGPT/GPT-2 roles:

    ``token_embedding`` (``nn.Embedding``; its output times ``sqrt(d_model)`` with ``embed_scale``),
    ``positional`` (learned or sinusoidal positions added to the embeddings; ``None`` for rotary and ALiBi,
    which act inside attention), ``dropout`` (on the embedding sum), ``decoder`` (:class:`TransformerDecoder`,
    ``cross_attention=False``; pre-norm stacks end with a final norm of the kind ``config.norm``), ``lm_head``
    (``nn.Linear(d_model, vocab_size, bias=False)``, its weight *is* ``token_embedding.weight`` when ``tie_weights``).

    Checkpoint layout for importers (``decoder.layers.{i}.``): ``self_attn.in_proj`` (``q``, ``k``, ``v``
    projection rows concatenated: ``[(H + 2 Hkv) * head_dim, d_model]``), ``self_attn.out_proj``,
    ``norm1`` (before attention), ``norm3`` (before the feed-forward), ``ff.linear1`` (with
    ``activation="swiglu"`` the rows of ``gate_proj`` then ``up_proj``), ``ff.linear2`` (``down_proj``;
    ``norm3`` and ``ff`` are absent with ``mlp=False``, attention-only blocks);
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
        self.hook_embed = HookPoint()  # the token embeddings (attnkit.nn.hooks: every activation is hookable)
        if self.positional is not None:
            self.hook_pos_embed = HookPoint()  # the position encoding added to them
        self.dropout = Dropout(c.dropout)
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
        if self.config.embed_scale:  # sqrt(d_model) rounded to the embedding's dtype first, as Gemma
            h = h * _rounded(self.config.d_model**0.5, h.dtype)
        h = self.hook_embed(h)
        if (pos := self.positional) is not None:
            h = embed_positions(h, lambda t: pos.add(t, offset, positions), self.hook_pos_embed)
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
        params: SamplingParams | None = None,
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
            params: every sampling option at once, a
                :class:`~attnkit.models.generation.params.SamplingParams` (its penalties and ``logit_bias``
                too), instead of the keywords ``temperature`` ... ``repetition_penalty`` (left at their
                defaults); ``stop_strings`` and ``stop_ids`` add to its ``stop`` / ``stop_ids``, and its
                ``seed`` seeds the draw when no ``generator`` is given. Its ``max_tokens`` and ``n`` are the
                caller's business (``max_new_tokens`` counts here). Not with beam search.

        Generation stops when every row has stopped (so ``n`` may be less than ``max_new_tokens``).
        The result is the (left-padded) prompts followed by the new tokens.

        The context is ``max_len`` tokens. A longer prompt, or generation past the context,
        slides a window: each next token is predicted from the last ``max_len`` columns,
        re-encoded from position 0 (as nanoGPT crops its input). With the cache, decoding is
        incremental while the text fits the context, then recomputes the window every step.

        The model is in eval mode during generation (dropout off) and its mode restored after.
        """
        keywords: dict[str, Any] = dict(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty
        )
        if params is None:
            check_sampling(temperature, top_k, top_p, min_p, repetition_penalty)
        else:
            if not isinstance(params, SamplingParams):
                raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
            given = sorted(k for k, v in keywords.items() if v != SAMPLING_FIELDS[k].default)
            if given or num_beams != 1:
                raise ValueError(
                    "pass the sampling options either as `params` or as keywords, not both (got params and "
                    f"{given or 'num_beams'}); beam search takes no params"
                )
            if stop_strings is not None or stop_ids is not None:
                extra = tuple(int(i) for i in stop_ids or ())
                params = params.replace(stop=params.stop + tuple(stop_strings or ()), stop_ids=params.stop_ids + extra)
            stop_strings = list(params.stop) or None
            if generator is None and params.seed is not None:
                generator = torch.Generator(device=self.token_embedding.weight.device).manual_seed(params.seed)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        check_stop_strings(stop_strings, decode)
        if num_beams != 1:
            check_beam_size(num_beams)
            beam_unused = dict(
                top_k=top_k, top_p=top_p, min_p=min_p, stop_ids=stop_ids, stop_strings=stop_strings, on_token=on_token
            )
            unused = [k for k, v in beam_unused.items() if v is not None]
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
            if params is None:
                params = SamplingParams(
                    max_tokens=None,
                    **keywords,
                    stop=tuple(stop_strings or ()),
                    stop_ids=tuple(int(i) for i in stop_ids or ()),
                )
            new = sample(
                decoding,
                max_new_tokens,
                params,
                generator=generator,
                stop_at_eos=stop_at_eos,
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
