"""What the explorer page receives for one input: attention packed compactly, masks, next-token tables.

Pure functions over tensors (no model, no server): :func:`pack_attention` turns per-layer weights into
bytes the page unpacks (all layers, or the one layer the page shows; :func:`unpack_attention` does the
same here, for tests and notebooks), :func:`next_token_table` the top-k of a decoder's logits with the
exact normaliser of every temperature the page's slider offers (:func:`table_probabilities` is the
page's formula).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ATTENTION_BUDGET",
    "TEMPERATURES",
    "next_token_table",
    "pack_attention",
    "payload_bytes",
    "table_probabilities",
    "token_label",
    "unpack_attention",
]

# Raw bytes of packed attention per update (base64 makes them 4/3 larger in the JSON): with the rest of
# the payload a view of 30 layers x 9 heads x 128 tokens stays under 1 MB.
ATTENTION_BUDGET = 600_000
# The temperatures the page's slider offers (0: greedy); the normaliser of each is sent per position.
TEMPERATURES = (0.0, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0)
# The most logits (positions x temperatures x vocabulary) one batched normaliser op reads at once (memory).
BATCH_ELEMENTS = 1 << 23


def token_label(text: str) -> str:
    """A token's text as the page shows it: spaces as ``␣``, line breaks as ``\\n``, empty as ``∅``."""
    return text.replace(" ", "\u2423").replace("\n", "\\n").replace("\t", "\\t") or "\u2205"


def _layers(maps: Sequence[Tensor]) -> Tensor:
    """``[L, H, Tq, Tk]`` float32 from per-layer ``[H, Tq, Tk]`` or ``[1, H, Tq, Tk]`` weights."""
    if len(maps) == 0:
        raise ValueError("no attention maps (the model returned no attention layer)")
    out: list[Tensor] = []
    for i, m in enumerate(maps):
        m = m.detach().float().cpu()
        if m.dim() == 4 and m.shape[0] == 1:
            m = m[0]
        if m.dim() != 3:
            raise ValueError(
                f"layer {i}: expected attention weights [heads, Tq, Tk] of one input, got {tuple(m.shape)}"
            )
        if out and m.shape != out[0].shape:
            raise ValueError(f"layer {i} has weights of shape {tuple(m.shape)}, layer 0 of {tuple(out[0].shape)}")
        out.append(m)
    return torch.stack(out)


def pack_attention(
    maps: Sequence[Tensor],
    *,
    name: str,
    query_labels: Sequence[str],
    key_labels: Sequence[str],
    causal: bool = False,
    key_mask: Sequence[bool] | Tensor | None = None,
    budget: int = ATTENTION_BUDGET,
    layer: int | None = None,
) -> dict[str, Any]:
    """One attention block (self-attention, cross-attention...) of every layer and head, or of one layer's
    heads (``layer``), for the page.

    Args:
        maps: per layer the weights ``[H, Tq, Tk]`` of one input (rows: queries, summing to 1).
        name: what the block is ("self-attention", "cross-attention"...).
        query_labels, key_labels: the ``Tq`` / ``Tk`` tokens.
        causal: query ``i`` may attend to keys ``<= i`` only (the page marks the rest as masked).
        key_mask: ``[Tk]``, True = a real token that may be attended to; False = padding (marked).
        budget: the most raw bytes the weights may take.
        layer: only this layer's heads (from 0), whole: ``only_layer`` says which (None: every layer).

    Weights are quantised to bytes (``round(w * 255)``: steps of 1/255). When all of them fit
    ``budget`` they are sent whole (``k == Tk``); otherwise each query row keeps its ``k`` largest
    weights with their key positions (``k`` as large as the budget allows, at least 1): the page
    shows the others as 0 and says so. One layer is always sent whole (``Tq x Tk`` bytes a head).
    """
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(maps):
            raise ValueError(f"layer must be an int in [0, {len(maps)}) (or all layers), got {layer!r}")
        w = _layers(maps[layer : layer + 1])
        num_layers = len(maps)
        _, heads, tq, tk = w.shape
    else:
        w = _layers(maps)
        num_layers, heads, tq, tk = w.shape
    if len(query_labels) != tq or len(key_labels) != tk:
        raise ValueError(f"{len(query_labels)} query / {len(key_labels)} key labels for weights [.., {tq}, {tk}]")
    mask = None
    if key_mask is not None:
        mask = [bool(v) for v in (key_mask.tolist() if isinstance(key_mask, Tensor) else key_mask)]
        if len(mask) != tk:
            raise ValueError(f"key_mask has {len(mask)} entries for {tk} keys")
    rows = w.shape[0] * heads * tq
    index_bytes = 1 if tk <= 256 else 2
    k = tk if layer is not None or rows * tk <= budget else max(1, min(tk, budget // (rows * (1 + index_bytes))))
    block: dict[str, Any] = {
        "name": name,
        "queries": list(query_labels),
        "keys": list(key_labels),
        "layers": num_layers,
        "heads": heads,
        "causal": causal,
        "key_mask": mask,
        "k": k,
        "indices": None,
        "only_layer": layer,
    }
    if k == tk:
        block["values"] = _b64(_quantise(w.numpy()))
        block["kept"] = 1.0
    else:
        top = w.topk(k, dim=-1)
        block["values"] = _b64(_quantise(top.values.numpy()))
        block["indices"] = _b64(top.indices.numpy().astype(np.uint8 if index_bytes == 1 else "<u2"))
        block["index_bytes"] = index_bytes
        block["kept"] = round(float(top.values.sum(-1).mean()), 4)  # the mean weight a row keeps
    return block


def _quantise(w: np.ndarray) -> np.ndarray:
    """``round(w * 255)`` as bytes, ``w`` clipped to [0, 1] (one vectorised pass, one scratch array)."""
    scratch = np.clip(w, 0.0, 1.0)
    np.multiply(scratch, 255.0, out=scratch)
    np.rint(scratch, out=scratch)
    return scratch.astype(np.uint8)


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def unpack_attention(block: dict[str, Any]) -> np.ndarray:
    """The weights ``[L, H, Tq, Tk]`` (float32, in steps of 1/255) of a block of :func:`pack_attention`,
    as the page reads them (weights a row did not keep are 0; of a one-layer block: ``[1, H, Tq, Tk]``)."""
    layers = 1 if block.get("only_layer") is not None else block["layers"]
    shape = (layers, block["heads"], len(block["queries"]), len(block["keys"]))
    values = np.frombuffer(base64.b64decode(block["values"]), dtype=np.uint8).astype(np.float32) / 255
    if block["indices"] is None:
        return values.reshape(shape)
    k = block["k"]
    dtype = np.uint8 if block["index_bytes"] == 1 else np.dtype("<u2")
    idx = np.frombuffer(base64.b64decode(block["indices"]), dtype=dtype).astype(np.int64).reshape(*shape[:3], k)
    out = np.zeros(shape, dtype=np.float32)
    np.put_along_axis(out, idx, values.reshape(*shape[:3], k), axis=-1)
    return out


def next_token_table(
    logits: Tensor,
    label: Callable[[int], str],
    *,
    k: int = 10,
    temperatures: Sequence[float] = TEMPERATURES,
    positions: Sequence[int] | None = None,
) -> dict[str, Any]:
    """At the positions ``positions`` (None: every one) of ``logits [T, V]`` the ``k`` most likely next
    tokens (ids, labels, logits) and, per temperature of ``temperatures``, the exact
    ``log Z(t) = logsumexp(logits / t)`` over the whole vocabulary: the page computes
    ``p = exp(logit / t - log Z(t))`` (:func:`table_probabilities`) at each temperature its slider offers;
    at ``t = 0`` (greedy) the top token has 1. ``label``: a token id's label.

    The normalisers of all temperatures are one batched ``logsumexp`` over ``[temperatures, P, V]``
    (in chunks of positions: at most :data:`BATCH_ELEMENTS` logits at once)."""
    if logits.dim() != 2:
        raise ValueError(f"expected next-token logits [T, V], got {tuple(logits.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    length, vocab = logits.shape
    if positions is None:
        positions = list(range(length))
    positions = list(positions)
    bad = [p for p in positions if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < length]
    if bad:
        raise ValueError(f"position(s) {bad} out of range: the input has {length} positions (from 0)")
    rows = logits.detach().float().cpu()
    if positions != list(range(length)):
        rows = rows[positions]
    k = min(k, vocab)
    top = rows.topk(k, dim=-1)
    hot = [t for t in temperatures if t != 0]
    log_z = torch.empty(len(positions), len(temperatures))
    if 0 in temperatures:  # greedy: the top token has probability 1 (p = exp(logit / t - log Z) is not used)
        log_z[:, list(temperatures).index(0)] = top.values[:, 0]
    if hot:
        inverse = torch.tensor([1.0 / t for t in hot]).view(-1, 1, 1)
        peak = top.values[:, :1]  # [P, 1]: logsumexp(x / t) = peak / t + logsumexp((x - peak) / t)
        chunk = max(1, BATCH_ELEMENTS // (len(hot) * vocab))
        columns = [i for i, t in enumerate(temperatures) if t != 0]
        for start in range(0, len(positions), chunk):
            shifted = rows[start : start + chunk] - peak[start : start + chunk]  # [p, V], <= 0
            z = torch.logsumexp(shifted.unsqueeze(0) * inverse, dim=-1)  # [temperatures, p]
            z += peak[start : start + chunk].T * inverse[:, :, 0]
            log_z[start : start + chunk, columns] = z.T
    ids = top.indices.tolist()
    return {
        "temperatures": list(temperatures),
        "positions": positions,
        "ids": ids,
        "tokens": [[label(i) for i in row] for row in ids],
        "logits": [[round(v, 4) for v in row] for row in top.values.tolist()],
        "log_z": [[round(v, 4) for v in row] for row in log_z.tolist()],  # [P, temperatures]
    }


def table_probabilities(table: dict[str, Any], position: int, temperature: float) -> list[float]:
    """The probabilities of the top tokens at ``position`` (of the input; one of the table's) at
    ``temperature`` (one of the table's), as the page computes them: ``exp(logit / t - log Z(t))``;
    ``t = 0``: 1 for the first (most likely)."""
    temps = table["temperatures"]
    if temperature not in temps:
        raise ValueError(f"temperature {temperature} is not one of the table's {temps}")
    if position not in table["positions"]:
        raise ValueError(f"position {position} is not one of the table's {table['positions']}")
    row = table["positions"].index(position)
    logits = table["logits"][row]
    if temperature == 0:
        return [1.0] + [0.0] * (len(logits) - 1)
    log_z = table["log_z"][row][temps.index(temperature)]
    return [math.exp(v / temperature - log_z) for v in logits]


def payload_bytes(payload: dict[str, Any]) -> int:
    """The size of ``payload`` as the server sends it (compact JSON, UTF-8)."""
    return len(json.dumps(payload, separators=(",", ":")).encode())
