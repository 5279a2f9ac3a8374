"""The logit lens and direct logit attribution of a decoder-only :class:`LanguageModel`.

* :func:`logit_lens`: each layer's residual stream read through the final norm and the unembedding, as if
  the model stopped there: ``[L + 1, B, T, V]`` logits (layer 0: the embeddings; the last: the model's own).
* :func:`logit_attribution`: how much each attention head, each MLP and the embeddings write directly
  into the logit of a target token (or a logit difference), through the final norm's scale of that position.
  The parts (biases in ``rest``) add up to the model's logit. Pre-norm models (all decoder families attnkit reads).

Both run the model once with :func:`attnkit.nn.hooks.run_with_cache`; own runs and imported checkpoints alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.models.lm import LanguageModel
from attnkit.nn import DecoderBlock, MultiHeadAttention
from attnkit.nn.hooks import run_with_cache
from attnkit.nn.normalization import RMSNorm

__all__ = ["Attribution", "LogitLens", "logit_attribution", "logit_lens"]


def _check(model: nn.Module) -> LanguageModel:
    if not isinstance(model, LanguageModel):
        raise TypeError(
            f"the logit lens reads a decoder-only LanguageModel (lm runs, imported GPT-2/Llama models), "
            f"got {type(model).__name__}"
        )
    return model


def _blocks(model: LanguageModel) -> list[DecoderBlock]:
    return [block for block in model.decoder.layers if isinstance(block, DecoderBlock)]


def _final_norm(model: LanguageModel, x: Tensor) -> Tensor:
    norm = model.decoder.norm
    return x if norm is None else norm(x)


@dataclass
class LogitLens:
    """``logits [L + 1, B, T, V]``: row ``l`` reads the residual stream entering block ``l`` (the last row: after
    the last block, the model's logits); ``names``: the hook each row was read at."""

    logits: Tensor
    names: list[str]

    def probs(self) -> Tensor:
        return self.logits.float().softmax(dim=-1)

    def top(self, k: int = 1) -> tuple[Tensor, Tensor]:
        """The ``k`` most likely tokens of every layer and position: ``(probabilities, ids)``, ``[L + 1, B, T, k]``."""
        return self.probs().topk(k, dim=-1)

    def target_probs(self, target: Tensor) -> Tensor:
        """The probability of ``target [B, T]`` (e.g. each position's next token) per layer: ``[L + 1, B, T]``."""
        probs = self.probs()
        if target.shape != probs.shape[1:3]:
            raise ValueError(f"target must be [B, T]={list(probs.shape[1:3])} token ids, got {list(target.shape)}")
        return probs.gather(-1, target.expand(probs.shape[0], -1, -1).unsqueeze(-1).long()).squeeze(-1)


@torch.no_grad()
def logit_lens(model: nn.Module, ids: Tensor, key_padding_mask: Tensor | None = None) -> LogitLens:
    """The logit lens of ``ids [B, T]`` (``key_padding_mask`` as the model's: True = real token)."""
    lm = _check(model)
    n = len(lm.decoder.layers)
    names = [f"blocks.{i}.hook_resid_pre" for i in range(n)] + [f"blocks.{n - 1}.hook_resid_post"]
    cache = run_with_cache(lm, ids, key_padding_mask, names=names)
    resid = torch.stack([cache[name] for name in names])
    return LogitLens(lm.lm_head(_final_norm(lm, resid)), names)


@dataclass
class Attribution:
    """Direct logit attribution at every position, ``[B, T]`` leading: ``heads [B, T, L, H]`` (each head's output
    through ``out_proj``), ``mlps [B, T, L]``, ``embed [B, T]`` (tokens and added positions), ``rest [B, T]``
    (the attention output biases, the final norm's and the head's biases); ``total [B, T]`` is the model's logit
    (difference), which the parts add up to (computed apart: a check of each other)."""

    heads: Tensor
    mlps: Tensor
    embed: Tensor
    rest: Tensor
    total: Tensor


@torch.no_grad()
def logit_attribution(
    model: nn.Module,
    ids: Tensor,
    target: Tensor | int,
    against: Tensor | int | None = None,
    key_padding_mask: Tensor | None = None,
) -> Attribution:
    """Direct logit attribution of the logit of ``target`` (ids ``[B, T]``, or one id for every position), or
    of the difference ``logit(target) - logit(against)``, to every head and MLP of ``ids [B, T]``."""
    lm = _check(model)
    if not all(block.norm_first for block in _blocks(lm)):
        raise ValueError("logit attribution needs a pre-norm model (norm_first): post-norm blocks renormalise the sum")
    if any(block.attn_out_norm is not None for block in _blocks(lm)):
        raise ValueError("logit attribution needs sublayer outputs added as they are: sandwich_norm (Gemma) norms them")
    n = len(lm.decoder.layers)
    names = ["hook_embed", "hook_pos_embed", f"blocks.{n - 1}.hook_resid_post"]
    names += [f"blocks.{i}.attn.hook_z" for i in range(n)] + [f"blocks.{i}.hook_mlp_out" for i in range(n)]
    present = {name for name in names if name != "hook_pos_embed" or lm.positional is not None}
    cache = run_with_cache(lm, ids, key_padding_mask, names=sorted(present))
    logits = cache.logits
    batch, length = ids.shape
    w_u = lm.lm_head.weight  # [V, D]

    def ids_of(t: Tensor | int, what: str) -> Tensor:
        t = torch.as_tensor(t, device=ids.device).long()
        if t.dim() == 0:
            t = t.expand(batch, length)
        if t.shape != ids.shape:
            raise ValueError(f"{what} must be one token id or [B, T]={list(ids.shape)} ids, got {list(t.shape)}")
        if bool((t < 0).any()) or bool((t >= w_u.shape[0]).any()):
            raise ValueError(f"{what} has ids outside the vocabulary [0, {w_u.shape[0]})")
        return t

    tgt = ids_of(target, "target")
    direction = w_u[tgt]  # [B, T, D]
    head_bias = lm.lm_head.bias
    bias = torch.zeros_like(direction[..., 0]) if head_bias is None else head_bias[tgt]
    total = logits.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    if against is not None:
        other = ids_of(against, "against")
        direction = direction - w_u[other]
        bias = bias if head_bias is None else bias - head_bias[other]
        total = total - logits.gather(-1, other.unsqueeze(-1)).squeeze(-1)
    resid = cache[f"blocks.{n - 1}.hook_resid_post"]
    norm = lm.decoder.norm
    if isinstance(norm, nn.LayerNorm) and norm.bias is not None:
        bias = bias + (direction * norm.bias).sum(-1)
    if norm is None:
        scale, centre = torch.ones_like(resid[..., :1]), False
    elif isinstance(norm, RMSNorm):
        scale, centre = resid.pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt(), False
        direction = direction * norm.weight
    elif isinstance(norm, nn.LayerNorm):
        scale, centre = resid.var(-1, keepdim=True, unbiased=False).add(norm.eps).sqrt(), True
        direction = direction * norm.weight if norm.weight is not None else direction
    else:
        raise TypeError(f"logit attribution knows LayerNorm and RMSNorm final norms, not {type(norm).__name__}")

    def read(part: Tensor) -> Tensor:
        """``part [B, T, ..., D]``'s direct contribution ``[B, T, ...]``."""
        if centre:
            part = part - part.mean(-1, keepdim=True)
        s = scale.view(batch, length, *([1] * (part.dim() - 3)), 1)
        d = direction.view(batch, length, *([1] * (part.dim() - 3)), -1)
        return (part / s * d).sum(-1)

    heads = []
    for i, block in enumerate(_blocks(lm)):
        attn: MultiHeadAttention = block.self_attn
        if attn.out_proj.bias is not None:
            bias = bias + read(attn.out_proj.bias.expand_as(resid))
        z = cache[f"blocks.{i}.attn.hook_z"]  # [B, T, H, hd]
        w_o = attn.out_proj.weight.view(attn.embed_dim, attn.num_heads, attn.head_dim)  # [D, H, hd]
        heads.append(read(torch.einsum("bthd,ehd->bthe", z, w_o)))
    embed = cache["hook_embed"] + (cache["hook_pos_embed"] if "hook_pos_embed" in present else 0)
    mlps = torch.stack([read(cache[f"blocks.{i}.hook_mlp_out"]) for i in range(n)], dim=-1)
    head_parts = torch.stack(heads, dim=-2)  # [B, T, L, H]
    return Attribution(heads=head_parts, mlps=mlps, embed=read(embed), rest=bias, total=total)
