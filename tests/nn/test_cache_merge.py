"""KVCache / DecoderCache merge and drop_left (continuous batching): rows of different lengths joined
with left padding compute what they compute alone."""

from __future__ import annotations

import pytest
import torch

from attnkit.nn import DecoderCache, KVCache


def filled(rows: int, length: int, seed: int) -> KVCache:
    g = torch.Generator().manual_seed(seed)
    cache = KVCache()
    cache.append(torch.randn(rows, 2, length, 4, generator=g), torch.randn(rows, 2, length, 4, generator=g))
    return cache


def test_merge_left_pads_the_shorter_side_and_keeps_rows_in_order() -> None:
    a, b = filled(2, 3, 0), filled(1, 5, 1)
    a_keys, b_keys, b_values = a.keys.clone(), b.keys.clone(), b.values.clone()
    a.merge(b)
    assert a.length == 5 and a.keys.shape == (3, 2, 5, 4)
    assert torch.equal(a.keys[:2, :, 2:], a_keys) and torch.equal(a.keys[:2, :, :2], torch.zeros(2, 2, 2, 4))
    assert torch.equal(a.keys[2:], b_keys) and torch.equal(a.values[2:], b_values)
    k, _ = a.append(torch.ones(3, 2, 1, 4), torch.ones(3, 2, 1, 4))  # room to grow after a merge
    assert k.shape == (3, 2, 6, 4) and torch.equal(k[:, :, :5], a.keys[:, :, :5])


def test_merge_into_a_longer_cache_pads_the_new_rows() -> None:
    a, b = filled(1, 6, 2), filled(2, 2, 3)
    b_keys = b.keys.clone()
    a.merge(b)
    assert a.length == 6 and torch.equal(a.keys[1:, :, 4:], b_keys)
    assert not a.keys[1:, :, :4].any()


def test_merge_into_an_empty_cache_and_of_an_empty_one() -> None:
    a, b = KVCache(), filled(2, 3, 4)
    a.merge(b)
    assert torch.equal(a.keys, b.keys)
    a.merge(KVCache())
    assert a.keys.shape == (2, 2, 3, 4)


def test_drop_left_removes_leading_positions() -> None:
    a = filled(2, 5, 5)
    keys = a.keys.clone()
    a.drop_left(2)
    assert a.length == 3 and torch.equal(a.keys, keys[:, :, 2:])
    a.append(torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))
    assert torch.equal(a.keys[:, :, :3], keys[:, :, 2:]) and a.length == 4
    with pytest.raises(ValueError, match="holds 4 positions"):
        a.drop_left(5)


def test_static_and_mismatched_caches_are_refused() -> None:
    static = KVCache(static=True)
    static.set(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4))
    with pytest.raises(ValueError, match="static"):
        filled(1, 2, 0).merge(static)
    other = KVCache()
    other.append(torch.zeros(1, 3, 2, 4), torch.zeros(1, 3, 2, 4))
    with pytest.raises(ValueError, match="heads"):
        filled(1, 2, 0).merge(other)


def test_decoder_cache_merge_and_drop_left_every_layer() -> None:
    a, b = DecoderCache(2), DecoderCache(2)
    for i, layer in enumerate(a.layers):
        layer.self_attn = filled(1, 2, i)
    for i, layer in enumerate(b.layers):
        layer.self_attn = filled(1, 4, 10 + i)
    a.merge(b)
    assert a.length == 4 and all(layer.self_attn.keys.shape[0] == 2 for layer in a.layers)
    a.drop_left(1)
    assert a.length == 3 and all(layer.self_attn.length == 3 for layer in a.layers)
    with pytest.raises(ValueError, match="3-layer"):
        a.merge(DecoderCache(3))
