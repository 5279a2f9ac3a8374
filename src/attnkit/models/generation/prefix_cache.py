"""A prefix cache: the keys and values of prompt prefixes, reused by later prompts that start the same way.

Requests that share a prompt prefix (a system prompt, few-shot examples, a chat's history) would prefill it
again each time. :class:`PrefixCache` keeps the keys and values a prefill computed for the first
``k * block`` tokens of a prompt (the longest such prefix that leaves at least one token to prefill, whose
logits start the answer), and :meth:`PrefixCache.lookup` finds the longest cached prefix of a new prompt, in
whole blocks. The new prompt's cache starts from those keys and values (:meth:`PrefixCache.restore`) and only
the rest of the prompt is prefilled: its positions follow the cached ones, as in incremental decoding.

Memory is bounded: ``max_bytes`` of keys and values in all; the least recently used prompts are evicted first,
and a prompt larger than the bound is not kept. A hit is checked token by token (a hash only finds the
candidate), so a prefix is never reused for a prompt it does not start.

With causal attention the keys and values of a prefix do not depend on what follows it, so the tokens are the
same with and without the cache (up to the float rounding of a different matrix shape).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from torch import Tensor

from attnkit.nn import DecoderCache

__all__ = ["PrefixCache", "PrefixHit"]


@dataclass(eq=False)
class _Entry:
    ids: tuple[int, ...]  # the cached tokens (a whole number of blocks)
    kv: list[tuple[Tensor, Tensor]]  # per layer: keys, values [1, H, len(ids), d]
    nbytes: int
    keys: list[int] = field(default_factory=list)  # its block-boundary keys in the index


@dataclass(frozen=True)
class PrefixHit:
    """The longest cached prefix of a prompt: its first ``length`` tokens (0: none)."""

    length: int
    entry: _Entry | None = None


class PrefixCache:
    """Keys and values of prompt prefixes (whole ``block``-token blocks), at most ``max_bytes`` in all.

    ``hits`` / ``misses`` count lookups that found / did not find a prefix, ``reused_tokens`` the tokens
    not prefilled thanks to it, ``evictions`` the prompts dropped for room; ``nbytes`` is the memory held.
    """

    def __init__(self, max_bytes: int, *, block: int = 16) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an int >= 0 (0: keep nothing), got {max_bytes!r}")
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an int >= 1 (tokens per block), got {block!r}")
        self.max_bytes, self.block = max_bytes, block
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # id(entry) -> entry, least recently used first
        self._index: dict[int, _Entry] = {}  # a block boundary's chained hash -> the newest entry holding it
        self.nbytes = 0
        self.hits = self.misses = self.reused_tokens = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict[str, int]:
        """The counters and the memory held (``entries``, ``bytes``)."""
        return {
            "entries": len(self._entries),
            "bytes": self.nbytes,
            "hits": self.hits,
            "misses": self.misses,
            "reused_tokens": self.reused_tokens,
            "evictions": self.evictions,
        }

    def _boundaries(self, ids: Sequence[int], blocks: int) -> list[int]:
        """The chained hash of the first ``k`` blocks of ``ids``, for k = 1..blocks."""
        keys, h = [], 0
        for k in range(blocks):
            h = hash((h, tuple(ids[k * self.block : (k + 1) * self.block])))
            keys.append(h)
        return keys

    def _usable(self, length: int) -> int:
        """Blocks of a prompt of ``length`` tokens that may come from the cache: one token is always left."""
        return max(0, (length - 1) // self.block)

    def lookup(self, ids: Sequence[int]) -> PrefixHit:
        """The longest cached prefix of ``ids`` in whole blocks, leaving at least one token (counted as a
        hit or a miss)."""
        blocks = self._usable(len(ids))
        best = PrefixHit(0)
        for k, key in enumerate(self._boundaries(ids, blocks), start=1):
            entry = self._index.get(key)
            if entry is None:
                break
            length = k * self.block
            if len(entry.ids) < length or entry.ids[:length] != tuple(ids[:length]):
                break  # a hash collision: never reuse a prefix the prompt does not start with
            best = PrefixHit(length, entry)
        if best.entry is None:
            self.misses += 1
            return best
        self.hits += 1
        self.reused_tokens += best.length
        self._entries.move_to_end(id(best.entry))
        return best

    def restore(self, hit: PrefixHit, cache: DecoderCache) -> None:
        """Fill the empty ``cache`` with the keys and values of ``hit``'s prefix."""
        if hit.entry is None or not hit.length:
            return
        if cache.length:
            raise ValueError(f"restore fills an empty cache; this one holds {cache.length} positions")
        if len(cache.layers) != len(hit.entry.kv):
            raise ValueError(f"the cached prefix has {len(hit.entry.kv)} layers, the model {len(cache.layers)}")
        for layer, (k, v) in zip(cache.layers, hit.entry.kv):
            layer.self_attn.append(k[:, :, : hit.length], v[:, :, : hit.length])

    def store(self, ids: Sequence[int], cache: DecoderCache, row: int = 0, start: int = 0) -> bool:
        """Keep the keys and values of the first whole blocks of prompt ``ids`` (leaving one token), read from
        row ``row`` of ``cache`` whose position ``start`` holds the prompt's first token (a left-padded row
        starts past its padding). Nothing is stored when a cached prompt already covers those blocks or they
        exceed ``max_bytes``. True if stored."""
        blocks = self._usable(len(ids))
        length = blocks * self.block
        if not length:
            return False
        keys = self._boundaries(ids, blocks)
        known = self._index.get(keys[-1])
        if known is not None and known.ids[:length] == tuple(ids[:length]):
            self._entries.move_to_end(id(known))
            return False
        kv = []
        for layer in cache.layers:
            k, v = layer.self_attn.keys, layer.self_attn.values
            if k is None or v is None or k.shape[-2] < start + length:
                raise ValueError(f"the cache holds {cache.length} positions; the prompt's blocks need {start + length}")
            kv.append(
                (
                    k[row : row + 1, :, start : start + length].clone(),
                    v[row : row + 1, :, start : start + length].clone(),
                )
            )
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if nbytes > self.max_bytes:
            return False
        while self.nbytes + nbytes > self.max_bytes and self._entries:
            self._evict()
        entry = _Entry(tuple(int(i) for i in ids[:length]), kv, nbytes, keys)
        self._entries[id(entry)] = entry
        for key in keys:
            self._index[key] = entry
        self.nbytes += nbytes
        return True

    def _evict(self) -> None:
        _, entry = self._entries.popitem(last=False)
        for key in entry.keys:
            if self._index.get(key) is entry:
                del self._index[key]
        # a boundary also held by an older entry that is still cached points to it again
        for other in self._entries.values():
            for key in other.keys:
                self._index.setdefault(key, other)
        self.nbytes -= entry.nbytes
        self.evictions += 1

    def clear(self) -> None:
        """Drop every cached prefix (the counters stay)."""
        self._entries.clear()
        self._index.clear()
        self.nbytes = 0
