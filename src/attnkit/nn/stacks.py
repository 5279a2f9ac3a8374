"""Encoder and decoder stacks, built from a :class:`attnkit.nn.StackSpec`.

Masks are validated and merged once per stack (:func:`attnkit.nn.masks.prepare_attention`: padding,
causal, sliding window and the positional encoding's attention bias, e.g. ALiBi, in one mask) and
every layer receives the prepared result; the rotary cosines/sines are computed once per stack too.
With ``sliding_window_pattern`` (Gemma 3) there are two of each: the sliding layers' (the window, and their
own rotary base ``rope_local_theta`` where set) and the global layers' (no window).
Pre-norm stacks end with a final norm. Boolean masks mean **True = may attend**.

Activation checkpointing: with ``stack.activation_checkpointing = True`` each block's activations are
not kept for the backward pass while training (a grad-enabled forward in training mode, no decoding
cache): the block is run again in backward (``torch.utils.checkpoint``, non-reentrant, with the random
state of the first run, so dropout draws the same masks). Outputs and gradients are those of the
plain stack; memory is traded for a second forward of every block.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from attnkit.nn.blocks import DecoderBlock, DecoderCache, EncoderBlock
from attnkit.nn.hooks import HookPoint, pin_hook_points
from attnkit.nn.masks import PreparedAttention, prepare_attention
from attnkit.nn.normalization import make_norm
from attnkit.nn.positional import PositionalEncoding, RotaryEmbedding
from attnkit.nn.positions import attention_positions
from attnkit.nn.specs import StackSpec

__all__ = ["TransformerDecoder", "TransformerEncoder"]


class _Stack(nn.Module):
    """What encoder and decoder stacks share: building ``num_layers`` blocks from the spec, the
    positional encoding that acts inside attention (:func:`attnkit.nn.attention_positions`: rotary,
    ALiBi), the sliding window, the final norm, and preparing the self-attention's mask once per forward."""

    def __init__(self, spec: StackSpec, block: type[EncoderBlock] | type[DecoderBlock]) -> None:
        super().__init__()
        if spec.num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {spec.num_layers}")
        if spec.sliding_window is not None and spec.sliding_window < 1:
            raise ValueError(f"sliding_window must be None or >= 1, got {spec.sliding_window}")
        if spec.rope_scaling is not None and spec.positional != "rotary":
            raise ValueError(f"rope_scaling needs positional='rotary', got positional={spec.positional!r}")
        _check_interleaving(spec)
        self.spec = spec
        self.num_heads = spec.num_heads
        self.sliding_window = spec.sliding_window
        self.positional = attention_positions(spec)
        # Interleaved windows (sliding_window_pattern): the global layers' indices, and the sliding layers' own
        # rotary positions (rope_local_theta); empty / None otherwise, and then every layer is prepared alike.
        pattern = spec.sliding_window_pattern
        self.global_layers = frozenset(i for i in range(spec.num_layers) if pattern and (i + 1) % pattern == 0)
        self.local_positional = None
        if spec.rope_local_theta is not None:
            local = replace(spec, rope_theta=spec.rope_local_theta, rope_scaling=None)
            self.local_positional = attention_positions(local)
        rotary = self.positional.rotary_embedding() if self.positional is not None else None
        local_rotary = rotary if self.local_positional is None else self.local_positional.rotary_embedding()
        self.layers = nn.ModuleList(
            block(spec, rotary=rotary if i in self.global_layers else local_rotary) for i in range(spec.num_layers)
        )
        self.activation_checkpointing = False  # recompute each block in backward (see the module's docstring)
        use_final_norm = spec.norm_first if spec.final_norm is None else spec.final_norm
        self.norm = (
            make_norm(spec.norm, spec.d_model, eps=spec.layer_norm_eps, bias=spec.bias) if use_final_norm else None
        )
        self.hook_norm = HookPoint()  # the final norm's output (TransformerLens: ln_final.hook_out)
        pin_hook_points(self)  # hook points read as plain attributes: free when no hook is added

    def _call_layer(self, layer: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """``layer(*args, **kwargs)``, checkpointed when :attr:`activation_checkpointing` is on and the
        call is a training forward that records gradients (not decoding: a block's cache would be
        appended to twice)."""
        recompute = self.training and torch.is_grad_enabled() and kwargs.get("cache") is None
        if self.activation_checkpointing and recompute:
            return checkpoint(layer, *args, use_reentrant=False, **kwargs)
        return layer(*args, **kwargs)

    @property
    def rotary(self) -> RotaryEmbedding | None:
        """The rotary embedding of the self-attention (``None`` without rotary positions)."""
        return self.positional.rotary_embedding() if self.positional is not None else None

    def _prepare_self(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
        past: int,
        positions: Tensor | None,
        names: tuple[str, str],
    ) -> list[PreparedAttention]:
        """Each layer's :class:`PreparedAttention` (one object for every layer but with interleaved windows)."""
        args = (x, attn_mask, key_padding_mask, is_causal, need_weights, past, positions, names)
        local = self.local_positional
        sliding = self._prepare(*args, self.sliding_window, self.positional if local is None else local)
        if not self.global_layers:
            return [sliding] * len(self.layers)
        full = self._prepare(*args, None, self.positional)
        return [full if i in self.global_layers else sliding for i in range(len(self.layers))]

    def _prepare(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        need_weights: bool,
        past: int,
        positions: Tensor | None,
        names: tuple[str, str],
        window: int | None,
        pos: PositionalEncoding | None,
    ) -> PreparedAttention:
        if x.dim() != 3:
            raise ValueError(f"x must be [batch, seq, features], got shape {tuple(x.shape)}")
        batch, q_len = x.shape[0], x.shape[1]
        prepared = prepare_attention(
            attn_mask,
            key_padding_mask,
            batch=batch,
            q_len=q_len,
            k_len=past + q_len,
            num_heads=self.num_heads,
            is_causal=is_causal,
            window=window,
            bias=None if pos is None else pos.attention_bias(q_len, past + q_len, x.device),
            need_weights=need_weights,
            dtype=x.dtype,
            device=x.device,
            names=names,
        )
        if pos is not None:
            if positions is None:
                positions = torch.arange(past, past + q_len, device=x.device)
            elif positions.shape not in ((q_len,), (batch, q_len)):
                raise ValueError(
                    f"positions has shape {tuple(positions.shape)}; expected [T]=[{q_len}] or [B, T]=[{batch}, {q_len}]"
                )
            prepared.rope = pos.rope(positions, x.dtype)
        return prepared


class TransformerEncoder(_Stack):
    """A stack of ``spec.num_layers`` :class:`EncoderBlock` s, built from a :class:`StackSpec`."""

    def __init__(self, spec: StackSpec) -> None:
        super().__init__(spec, EncoderBlock)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x [B, T, D]`` -> ``[B, T, D]``. Masks as :meth:`EncoderBlock.forward`; ``positions``
        (``[T]`` or ``[B, T]``) are the rotary positions (default ``0 .. T-1``)."""
        return self._run(x, attn_mask, key_padding_mask, is_causal, positions, need_weights=False)[0]

    def forward_with_attention(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor]]:
        """The output and, per layer, the attention weights ``[B, H, T, T]`` of the same pass."""
        return self._run(x, attn_mask, key_padding_mask, is_causal, positions, need_weights=True)

    def get_attention_maps(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> list[Tensor]:
        """Per layer, the attention weights ``[B, H, T, T]`` for input ``x``."""
        return self.forward_with_attention(
            x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal
        )[1]

    def _run(
        self,
        x: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool,
        positions: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[Tensor]]:
        prepared = self._prepare_self(
            x, attn_mask, key_padding_mask, is_causal, need_weights, 0, positions, ("attn_mask", "key_padding_mask")
        )
        maps: list[Tensor] = []
        for layer, layer_prepared in zip(self.layers, prepared):
            x, weights = self._call_layer(layer, x, need_weights=need_weights, prepared=layer_prepared)
            if weights is not None:
                maps.append(weights)
        if self.norm is not None:
            x = self.hook_norm(self.norm(x))
        return x, maps


class TransformerDecoder(_Stack):
    """A stack of ``spec.num_layers`` :class:`DecoderBlock` s, built from a :class:`StackSpec`.

    With ``spec.cross_attention=False`` the blocks have no cross-attention: the stack of a
    decoder-only (GPT-style) language model. Incremental decoding: ``cache = decoder.new_cache()``,
    then call the decoder with only the new positions and ``cache=cache``.
    """

    def __init__(self, spec: StackSpec) -> None:
        super().__init__(spec, DecoderBlock)

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with this stack."""
        return DecoderCache(len(self.layers))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        tgt_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = True,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``x [B, T, D]`` (only the new positions when ``cache`` is given) -> ``[B, T, D]``.

        Masks as :meth:`DecoderBlock.forward` (True = may attend); ``positions`` (``[T]`` or ``[B, T]``)
        are the rotary positions of the new tokens (default ``past .. past + T - 1``).
        """
        out, _, _ = self._run(
            x,
            memory,
            tgt_mask,
            tgt_key_padding_mask,
            memory_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            cache,
            positions,
            False,
        )
        return out

    def forward_with_attention(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        tgt_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = True,
        cache: DecoderCache | None = None,
        positions: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The output and, per layer, self-attention ``[B, H, Tq, Tk]`` and cross-attention
        ``[B, H, Tq, Tm]`` weights of the same pass (the cross list is empty without cross-attention)."""
        return self._run(
            x,
            memory,
            tgt_mask,
            tgt_key_padding_mask,
            memory_mask,
            memory_key_padding_mask,
            tgt_is_causal,
            cache,
            positions,
            True,
        )

    def get_attention_maps(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        **kwargs: Any,
    ) -> dict[str, list[Tensor]]:
        """``{"self": [per-layer [B, H, Tq, Tk]], "cross": [per-layer [B, H, Tq, Tm]]}``."""
        _, self_maps, cross_maps = self.forward_with_attention(x, memory, **kwargs)
        return {"self": self_maps, "cross": cross_maps}

    def _run(
        self,
        x: Tensor,
        memory: Tensor | None,
        tgt_mask: Tensor | None,
        tgt_key_padding_mask: Tensor | None,
        memory_mask: Tensor | None,
        memory_key_padding_mask: Tensor | None,
        tgt_is_causal: bool,
        cache: DecoderCache | None,
        positions: Tensor | None,
        need_weights: bool,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        if cache is not None and len(cache.layers) != len(self.layers):
            raise ValueError(
                f"cache has {len(cache.layers)} layers, the decoder {len(self.layers)}: use decoder.new_cache()"
            )
        past = cache.length if cache is not None else 0
        prepared_self = self._prepare_self(
            x,
            tgt_mask,
            tgt_key_padding_mask,
            tgt_is_causal,
            need_weights,
            past,
            positions,
            ("tgt_mask", "tgt_key_padding_mask"),
        )
        prepared_cross = None
        memory_len = _memory_length(memory, cache)
        if memory_len is not None:
            prepared_cross = prepare_attention(
                memory_mask,
                memory_key_padding_mask,
                batch=x.shape[0],
                q_len=x.shape[1],
                k_len=memory_len,
                num_heads=self.num_heads,
                need_weights=need_weights,
                dtype=x.dtype,
                device=x.device,
                names=("memory_mask", "memory_key_padding_mask"),
            )
        self_maps: list[Tensor] = []
        cross_maps: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            x, self_w, cross_w = self._call_layer(
                layer,
                x,
                memory,
                need_weights=need_weights,
                cache=cache.layers[i] if cache is not None else None,
                prepared_self=prepared_self[i],
                prepared_cross=prepared_cross,
            )
            if self_w is not None:
                self_maps.append(self_w)
            if cross_w is not None:
                cross_maps.append(cross_w)
        if self.norm is not None:
            x = self.hook_norm(self.norm(x))
        return x, self_maps, cross_maps


def _check_interleaving(spec: StackSpec) -> None:
    """``sliding_window_pattern`` and ``rope_local_theta`` make sense only together with what they refine."""
    pattern, local = spec.sliding_window_pattern, spec.rope_local_theta
    if pattern is not None and (pattern < 2 or spec.sliding_window is None):
        raise ValueError(
            f"sliding_window_pattern={pattern} needs a sliding_window and a pattern >= 2 (every pattern-th layer "
            "is global, the others slide); leave it None for the same window on every layer"
        )
    if local is not None and (pattern is None or spec.positional != "rotary" or not local > 0):
        raise ValueError(
            f"rope_local_theta={local} is the sliding layers' rotary base: it needs positional='rotary', a "
            "sliding_window_pattern and a positive value; leave it None for one rotary base on every layer"
        )


def _memory_length(memory: Tensor | None, cache: DecoderCache | None) -> int | None:
    """Length of the cross-attention keys: the memory's, or the cached one's; ``None`` without either."""
    if memory is not None and memory.dim() == 3:
        return memory.shape[1]
    if cache is not None and cache.layers and not cache.layers[0].cross_attn.empty:
        return cache.layers[0].cross_attn.length
    return None
