"""Mask helpers: True = may attend."""

from __future__ import annotations

import pytest
import torch

from attnkit.nn import causal_mask, combine_masks, expand_attention_mask, padding_mask, padding_mask_from_ids


def test_causal_mask_square() -> None:
    m = causal_mask(4)
    assert m.dtype == torch.bool
    expected = torch.tensor(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [1, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(m, expected)
    assert torch.equal(causal_mask(4, 4), expected)


def test_causal_mask_fewer_queries_than_keys_is_bottom_right_aligned() -> None:
    m = causal_mask(2, 5)
    expected = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(m, expected)
    # one new query with a cache sees the whole past
    assert causal_mask(1, 7).all()
    # the last rows of the square mask
    assert torch.equal(causal_mask(3, 6), causal_mask(6)[-3:])


def test_causal_mask_more_queries_than_keys_raises() -> None:
    with pytest.raises(ValueError, match=r"q_len \(5\).*k_len \(3\)"):
        causal_mask(5, 3)


def test_causal_mask_device() -> None:
    assert causal_mask(3, device="cpu").device.type == "cpu"


def test_padding_mask_from_lengths() -> None:
    m = padding_mask(torch.tensor([3, 1, 0, 4]))
    expected = torch.tensor(
        [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]],
        dtype=torch.bool,
    )
    assert m.dtype == torch.bool
    assert torch.equal(m, expected)


def test_padding_mask_with_max_len() -> None:
    m = padding_mask(torch.tensor([2, 1]), max_len=5)
    assert m.shape == (2, 5)
    assert torch.equal(m.sum(1), torch.tensor([2, 1]))
    assert not m[:, 2:].any()


def test_padding_mask_rejects_non_1d_lengths() -> None:
    with pytest.raises(ValueError, match=r"lengths must be 1-D.*\(2, 1\)"):
        padding_mask(torch.tensor([[2], [3]]))


def test_padding_mask_from_ids() -> None:
    ids = torch.tensor([[5, 7, 0, 0], [0, 3, 0, 9]])
    m = padding_mask_from_ids(ids, pad_id=0)
    assert torch.equal(m, torch.tensor([[1, 1, 0, 0], [0, 1, 0, 1]], dtype=torch.bool))
    assert torch.equal(padding_mask_from_ids(ids, pad_id=7), ids != 7)


def test_combine_masks() -> None:
    a = torch.tensor([[True, True], [False, True]])
    b = torch.tensor([True, False])
    assert torch.equal(combine_masks(a, b), torch.tensor([[True, False], [False, False]]))
    assert torch.equal(combine_masks(None, a, None), a)
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    # broadcasting: [Tq, Tk] with [B, 1, 1, Tk]
    out = combine_masks(causal_mask(3), padding_mask(torch.tensor([3, 1]))[:, None, None])
    assert out.shape == (2, 1, 3, 3)
    assert torch.equal(out[0, 0], causal_mask(3))
    assert torch.equal(out[1, 0], torch.tensor([[1, 0, 0]] * 3, dtype=torch.bool))


def test_combine_masks_rejects_float_masks() -> None:
    with pytest.raises(TypeError, match="bool"):
        combine_masks(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool))


B, H, TQ, TK = 2, 3, 4, 5


@pytest.mark.parametrize(
    ("attn_shape", "expected"),
    [
        ((TQ, TK), (1, 1, TQ, TK)),
        ((B, TQ, TK), (B, 1, TQ, TK)),
        ((B, H, TQ, TK), (B, H, TQ, TK)),
        ((1, H, TQ, TK), (1, H, TQ, TK)),
        ((B, 1, TQ, TK), (B, 1, TQ, TK)),
        ((1, TK), (1, 1, 1, TK)),
    ],
)
def test_expand_attention_mask_shapes(attn_shape: tuple[int, ...], expected: tuple[int, ...]) -> None:
    m = torch.rand(attn_shape) > 0.5
    out = expand_attention_mask(m, None, batch=B, q_len=TQ, k_len=TK, num_heads=H)
    assert out.shape == expected
    assert torch.equal(out.expand(B, H, TQ, TK), m.reshape(expected).expand(B, H, TQ, TK))


def test_expand_attention_mask_key_padding_and_both() -> None:
    kpm = padding_mask(torch.tensor([5, 2]))
    out = expand_attention_mask(None, kpm, batch=B, q_len=TQ, k_len=TK)
    assert out.shape == (B, 1, 1, TK)
    assert torch.equal(out[:, 0, 0], kpm)

    attn = torch.rand(TQ, TK) > 0.5
    both = expand_attention_mask(attn, kpm, batch=B, q_len=TQ, k_len=TK, num_heads=H)
    assert both.shape == (B, 1, TQ, TK)
    assert torch.equal(both, attn[None, None] & kpm[:, None, None, :])

    assert expand_attention_mask(None, None, batch=B, q_len=TQ, k_len=TK) is None


def test_expand_attention_mask_without_num_heads_accepts_any_head_count() -> None:
    m = torch.ones(B, 7, TQ, TK, dtype=torch.bool)
    assert expand_attention_mask(m, None, batch=B, q_len=TQ, k_len=TK).shape == (B, 7, TQ, TK)


@pytest.mark.parametrize("bad_shape", [(TQ, TK + 1), (B + 1, TQ, TK), (B, H + 1, TQ, TK), (TK,), (1, B, H, TQ, TK)])
def test_expand_attention_mask_rejects_bad_attn_mask(bad_shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"attn_mask has shape"):
        expand_attention_mask(torch.ones(bad_shape, dtype=torch.bool), None, batch=B, q_len=TQ, k_len=TK, num_heads=H)


@pytest.mark.parametrize("bad_shape", [(B, TK + 1), (B + 1, TK), (TK,), (B, 1, TK)])
def test_expand_attention_mask_rejects_bad_key_padding_mask(bad_shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"key_padding_mask has shape"):
        expand_attention_mask(None, torch.ones(bad_shape, dtype=torch.bool), batch=B, q_len=TQ, k_len=TK)
