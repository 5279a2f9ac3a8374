"""The explorer's interpretability views of a decoder (what ``attnkit explore`` serves beside the attention maps),
each a thin reading of :mod:`attnkit.models`' techniques for one input:

* :func:`lens_view`: the logit lens (:func:`attnkit.models.lens.logit_lens`): per layer and position the top token
  and its probability;
* :func:`attribution_view`: direct logit attribution (:func:`attnkit.models.lens.logit_attribution`) of each head,
  each MLP and the embeddings to a target token at one position (default: the model's top next token);
* :func:`patching_view`: activation patching of the residual stream by layer x position
  (:func:`attnkit.models.patching.patch_residual`) between a clean and a corrupted text of the same token length;
* :func:`ablation_view`: the next-token distribution with chosen heads switched off (their output zeroed through
  the ``blocks.{l}.attn.hook_z`` hook points), beside the model's own.

A bad input is a :class:`ValueError` whose message names the field that was wrong (the app makes it a 400).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from attnkit.models.lens import logit_attribution, logit_lens
from attnkit.models.patching import logit_diff, patch_residual, target_logprob
from attnkit.nn.hooks import HookPoint, hooks
from attnkit.viz.explorer.views import DecoderExplorer, Explorer

__all__ = ["MAX_PATCH_CELLS", "ablation_view", "attribution_view", "decoder_of", "lens_view", "patching_view"]

MAX_PATCH_CELLS = 4096  # the most layer x position cells a patching view runs (one patched forward pass each)
TOP_K = 10  # the tokens of an ablation view's tables


def decoder_of(explorer: Explorer) -> DecoderExplorer:
    """``explorer`` if it explores a decoder language model, else a :class:`ValueError` saying so."""
    if not isinstance(explorer, DecoderExplorer):
        raise ValueError(
            "the logit lens, attribution, patching and head switches read decoder language models (an lm run, an "
            f"imported GPT-2 / Llama / Qwen2...), and this explorer shows a {explorer.kind} model: explore a decoder"
        )
    return explorer


def _ids(explorer: DecoderExplorer, text: Any, field: str) -> Tensor:
    """The prompt ids ``[1, T]`` of ``text`` (the request's ``field``), on the model's device."""
    if not isinstance(text, str):
        raise ValueError(f"{field} must be a text, got {type(text).__name__}")
    ids = explorer.pretrained.encode_prompt(text)
    context = explorer.model.config.max_len
    if len(ids) > context:
        raise ValueError(f"{field} is {len(ids)} tokens, past the model's context of {context} tokens: shorten it")
    return torch.tensor([ids], device=_device(explorer))


def _device(explorer: DecoderExplorer) -> torch.device:
    return next(explorer.model.parameters()).device


def _position(position: Any, length: int, field: str = "position") -> int:
    if isinstance(position, bool) or not isinstance(position, int) or not -length <= position < length:
        raise ValueError(
            f"{field} must be an int in [-{length}, {length}) (a token's index; -1: the last), got {position!r}"
        )
    return position % length


def _token_id(explorer: DecoderExplorer, token: Any, field: str) -> int:
    """A token id given as an int (an id) or a text that is exactly one token."""
    vocab = explorer.model.config.vocab_size
    if isinstance(token, str):
        ids = explorer.tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{field} {token!r} is {len(ids)} tokens: give one token's text, or its id")
        return ids[0]
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab:
        raise ValueError(f"{field} must be a token id in [0, {vocab}) or one token's text, got {token!r}")
    return token


def _labels(explorer: DecoderExplorer, ids: Tensor) -> list[str]:
    return [explorer.label(int(i)) for i in ids[0].tolist()]


@torch.no_grad()
def lens_view(explorer: Explorer, text: Any) -> dict[str, Any]:
    """The logit lens of ``text``: ``rows`` (``"embed"``, then after each block), and per row and position the top
    token (``top_ids``, ``top_tokens``) and its probability (``top_probs``), ``[L + 1][T]``; the last row is the
    model's own next-token distribution."""
    decoder = decoder_of(explorer)
    ids = _ids(decoder, text, "text")
    lens = logit_lens(decoder.model, ids)
    logits = lens.logits[:, 0].float()  # [L + 1, T, V]
    best = logits.max(dim=-1)  # the top token's probability: exp(its logit - logsumexp), no softmax kept
    probs = (best.values - logits.logsumexp(dim=-1)).exp()
    top_ids = best.indices.tolist()
    labels = {i: decoder.label(i) for i in set(best.indices.flatten().tolist())}  # each token's label once
    n = len(top_ids) - 1
    return {
        "tokens": _labels(decoder, ids),
        "ids": ids[0].tolist(),
        "rows": ["embed"] + [f"block {i + 1}" for i in range(n)],
        "hooks": lens.names,
        "top_ids": top_ids,
        "top_tokens": [[labels[i] for i in row] for row in top_ids],
        "top_probs": probs.double().mul(1e4).round().div(1e4).tolist(),  # 4 decimals, in one op
    }


@torch.no_grad()
def attribution_view(explorer: Explorer, text: Any, target: Any = None, position: Any = -1) -> dict[str, Any]:
    """Direct logit attribution to ``target`` (a token id or one token's text; None: the model's top next token)
    at ``position`` of ``text``: ``heads [L][H]``, ``mlps [L]``, ``embed``, ``rest`` (biases), adding up to
    ``total``, the model's logit of the target."""
    decoder = decoder_of(explorer)
    ids = _ids(decoder, text, "text")
    pos = _position(position, ids.shape[1])
    tgt = int(decoder.model(ids)[0, pos].argmax()) if target is None else _token_id(decoder, target, "target")
    parts = logit_attribution(decoder.model, ids, tgt)

    def rounded(t: Tensor) -> Any:
        return [[round(v, 4) for v in row] for row in t.tolist()] if t.dim() == 2 else [round(v, 4) for v in t.tolist()]

    return {
        "tokens": _labels(decoder, ids),
        "position": pos,
        "target": {"id": tgt, "token": decoder.label(tgt)},
        "heads": rounded(parts.heads[0, pos].float()),
        "mlps": rounded(parts.mlps[0, pos].float()),
        "embed": round(float(parts.embed[0, pos]), 4),
        "rest": round(float(parts.rest[0, pos]), 4),
        "total": round(float(parts.total[0, pos]), 4),
    }


@torch.no_grad()
def patching_view(explorer: Explorer, clean: Any, corrupted: Any) -> dict[str, Any]:
    """Activation patching from ``clean`` into ``corrupted`` (texts of the same token length): per layer and position
    the share of the clean behaviour that patching that residual stream (entering the block) brings back, ``scores
    [L][T]`` (0: the corrupted run, 1: the clean run). The metric: at the last position ``logit(a) - logit(b)``, ``a``
    the clean run's top next token and ``b`` the corrupted run's (the log-probability of ``a`` when they agree)."""
    decoder = decoder_of(explorer)
    clean_ids = _ids(decoder, clean, "clean")
    corrupted_ids = _ids(decoder, corrupted, "corrupted")
    length = clean_ids.shape[1]
    if corrupted_ids.shape[1] != length:
        raise ValueError(
            f"corrupted is {corrupted_ids.shape[1]} tokens and clean {length}: patching needs texts of the same "
            "token length; reword the corrupted text (e.g. change one word for another of one token)"
        )
    layers = len(decoder.model.decoder.layers)
    if layers * length > MAX_PATCH_CELLS:
        raise ValueError(
            f"clean is {length} tokens: patching {layers} layers x {length} positions would run {layers * length} "
            f"forward passes, more than the explorer's {MAX_PATCH_CELLS}; shorten the texts"
        )
    model = decoder.model
    a = int(model(clean_ids)[0, -1].argmax())
    b = int(model(corrupted_ids)[0, -1].argmax())
    metric = target_logprob(a) if a == b else logit_diff(a, b)
    result = patch_residual(model, clean_ids, corrupted_ids, metric)
    what = f"log p({decoder.label(a)})" if a == b else f"logit({decoder.label(a)}) - logit({decoder.label(b)})"
    return {
        "tokens": _labels(decoder, clean_ids),
        "corrupted_tokens": _labels(decoder, corrupted_ids),
        "rows": [f"block {i + 1}" for i in range(layers)],
        "metric": what + " at the last position",
        "clean": round(result.clean, 4),
        "corrupted": round(result.corrupted, 4),
        "scores": [[round(v, 4) for v in row] for row in result.scores.tolist()],
    }


def _heads(heads: Any, layers: int, per_layer: int) -> list[tuple[int, int]]:
    shape = "a list of [layer, head] pairs (from 0)"
    if not isinstance(heads, list):
        raise ValueError(f"heads must be {shape}, got {heads!r}")
    out: set[tuple[int, int]] = set()
    for pair in heads:
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)
        ):
            raise ValueError(f"heads must be {shape}, got the item {pair!r}")
        layer, head = pair
        if not (0 <= layer < layers and 0 <= head < per_layer):
            raise ValueError(
                f"heads: {pair} is not a head of this model ({layers} layers of {per_layer} heads, from 0)"
            )
        out.add((layer, head))
    return sorted(out)


def _table(explorer: DecoderExplorer, probs: Tensor) -> dict[str, Any]:
    top = probs.topk(min(TOP_K, probs.shape[-1]))
    ids = top.indices.tolist()
    return {"ids": ids, "tokens": [explorer.label(i) for i in ids], "probs": [round(p, 6) for p in top.values.tolist()]}


@torch.no_grad()
def ablation_view(explorer: Explorer, text: Any, heads: Any, position: Any = -1) -> dict[str, Any]:
    """The next-token distribution at ``position`` of ``text`` (temperature 1) with ``heads`` (``[[layer, head],
    ...]``) switched off, their output zeroed, beside the model's own: the top tokens of each (``base``,
    ``ablated``), the ablated probabilities of the base's top tokens (``ablated_of_base``) and the total variation
    distance between the two distributions (``tv``). No head: the model's own distribution, bit for bit."""
    decoder = decoder_of(explorer)
    ids = _ids(decoder, text, "text")
    pos = _position(position, ids.shape[1])
    config = decoder.model.config
    off = _heads(heads, len(decoder.model.decoder.layers), config.num_heads)
    by_layer: dict[int, list[int]] = {}
    for layer, head in off:
        by_layer.setdefault(layer, []).append(head)

    def zero(chosen: Sequence[int]) -> Any:
        def fn(z: Tensor, hook: HookPoint) -> Tensor:  # z [B, T, H, head_dim]
            z = z.clone()
            z[:, :, list(chosen)] = 0
            return z

        return fn

    model = decoder.model
    base = model(ids)[0, pos].float().softmax(-1)
    with hooks(model, {f"blocks.{layer}.attn.hook_z": zero(chosen) for layer, chosen in by_layer.items()}):
        ablated = model(ids)[0, pos].float().softmax(-1)
    base_table = _table(decoder, base)
    return {
        "tokens": _labels(decoder, ids),
        "position": pos,
        "heads": [list(pair) for pair in off],
        "base": base_table,
        "ablated": _table(decoder, ablated),
        "ablated_of_base": [round(float(ablated[i]), 6) for i in base_table["ids"]],
        "tv": round(float((base - ablated).abs().sum() / 2), 6),
    }
