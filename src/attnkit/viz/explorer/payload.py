"""What the explorer page receives for one input: attention packed compactly, masks, next-token tables.

Pure functions over tensors (no model, no server): :func:`pack_attention` turns per-layer weights into
bytes the page unpacks (and :func:`unpack_attention` does the same here, for tests and notebooks),
:func:`next_token_table` the top-k of a decoder's logits with what the page needs to re-weight them
at another temperature (:func:`table_probabilities` is the page's formula).
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
    "EXACT_LOGITS",
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
# The most likely logits whose normaliser is computed exactly at every temperature (see next_token_table).
EXACT_LOGITS = 1024


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
) -> dict[str, Any]:
    """One attention block (self-attention, cross-attention...) of every layer and head, for the page.

    Args:
        maps: per layer the weights ``[H, Tq, Tk]`` of one input (rows: queries, summing to 1).
        name: what the block is ("self-attention", "cross-attention"...).
        query_labels, key_labels: the ``Tq`` / ``Tk`` tokens.
        causal: query ``i`` may attend to keys ``<= i`` only (the page marks the rest as masked).
        key_mask: ``[Tk]``, True = a real token that may be attended to; False = padding (marked).
        budget: the most raw bytes the weights may take.

    Weights are quantised to bytes (``round(w * 255)``: steps of 1/255). When all of them fit
    ``budget`` they are sent whole (``k == Tk``); otherwise each query row keeps its ``k`` largest
    weights with their key positions (``k`` as large as the budget allows, at least 1): the page
    shows the others as 0 and says so.
    """
    w = _layers(maps)
    num_layers, heads, tq, tk = w.shape
    if len(query_labels) != tq or len(key_labels) != tk:
        raise ValueError(f"{len(query_labels)} query / {len(key_labels)} key labels for weights [.., {tq}, {tk}]")
    mask = None
    if key_mask is not None:
        mask = [bool(v) for v in (key_mask.tolist() if isinstance(key_mask, Tensor) else key_mask)]
        if len(mask) != tk:
            raise ValueError(f"key_mask has {len(mask)} entries for {tk} keys")
    rows = num_layers * heads * tq
    index_bytes = 1 if tk <= 256 else 2
    k = tk if rows * tk <= budget else max(1, min(tk, budget // (rows * (1 + index_bytes))))
    quantised = (w.clamp(0, 1) * 255).round().to(torch.uint8)
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
    }
    if k == tk:
        block["values"] = _b64(quantised.numpy())
        block["kept"] = 1.0
    else:
        top = w.topk(k, dim=-1)
        block["values"] = _b64((top.values.clamp(0, 1) * 255).round().to(torch.uint8).numpy())
        block["indices"] = _b64(top.indices.numpy().astype(np.uint8 if index_bytes == 1 else "<u2"))
        block["index_bytes"] = index_bytes
        block["kept"] = round(float(top.values.sum(-1).mean()), 4)  # the mean weight a row keeps
    return block


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def unpack_attention(block: dict[str, Any]) -> np.ndarray:
    """The weights ``[L, H, Tq, Tk]`` (float32, in steps of 1/255) of a block of :func:`pack_attention`,
    as the page reads them (weights a row did not keep are 0)."""
    shape = (block["layers"], block["heads"], len(block["queries"]), len(block["keys"]))
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
    exact: int = EXACT_LOGITS,
) -> dict[str, Any]:
    """At every position of ``logits [T, V]`` the ``k`` most likely next tokens (ids, labels, logits) and,
    per temperature of ``temperatures``, ``log Z(t) = logsumexp(logits / t)`` over the vocabulary: the
    page computes ``p = exp(logit / t - log Z(t))`` (:func:`table_probabilities`) at each temperature its
    slider offers; at ``t = 0`` (greedy) the top token has 1. ``label``: a token id's label.

    ``log Z`` is exact at ``t = 1`` and, for vocabularies of at most ``exact`` tokens, at every
    temperature. A larger vocabulary (49152 for a 135M Llama) would take one pass over all logits per
    temperature, slower than the model's own forward pass: there the ``exact`` most likely logits count
    exactly and the rest as tokens of equal logit holding their exact total mass at ``t = 1``."""
    if logits.dim() != 2:
        raise ValueError(f"expected next-token logits [T, V], got {tuple(logits.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    logits = logits.detach().float().cpu()
    vocab = logits.shape[-1]
    k = min(k, vocab)
    head = logits.topk(min(vocab, max(exact, k)), dim=-1).values if vocab > exact else logits
    top = logits.topk(k, dim=-1)
    rest = None
    if vocab > exact:  # the tail: its count and the log of its total mass at t = 1
        log_all, log_head = torch.logsumexp(logits, dim=-1), torch.logsumexp(head, dim=-1)
        gap = (log_head - log_all).clamp(max=-1e-7)
        log_tail = log_all + torch.log(-torch.expm1(gap))
        count = vocab - head.shape[-1]
        rest = (log_tail - math.log(count), math.log(count))  # the tail's equal logit, log of its count
    log_z = []
    for t in temperatures:
        if t == 0:
            log_z.append(top.values[:, 0].tolist())
            continue
        z = torch.logsumexp(head / t, dim=-1)
        if rest is not None:
            z = torch.logaddexp(z, rest[0] / t + rest[1])
        log_z.append(z.tolist())
    ids = top.indices.tolist()
    return {
        "temperatures": list(temperatures),
        "ids": ids,
        "tokens": [[label(i) for i in row] for row in ids],
        "logits": [[round(v, 4) for v in row] for row in top.values.tolist()],
        "log_z": [[round(v, 4) for v in row] for row in zip(*log_z)],  # [T, temperatures]
    }


def table_probabilities(table: dict[str, Any], position: int, temperature: float) -> list[float]:
    """The probabilities of the top tokens at ``position`` at ``temperature`` (one of the table's), as
    the page computes them: ``exp(logit / t - log Z(t))``; ``t = 0``: 1 for the first (most likely)."""
    temps = table["temperatures"]
    if temperature not in temps:
        raise ValueError(f"temperature {temperature} is not one of the table's {temps}")
    logits = table["logits"][position]
    if temperature == 0:
        return [1.0] + [0.0] * (len(logits) - 1)
    log_z = table["log_z"][position][temps.index(temperature)]
    return [math.exp(v / temperature - log_z) for v in logits]


def payload_bytes(payload: dict[str, Any]) -> int:
    """The size of ``payload`` as the server sends it (compact JSON, UTF-8)."""
    return len(json.dumps(payload, separators=(",", ":")).encode())
