"""Positional encodings: sinusoidal, learned and rotary."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.nn import LearnedPositionalEncoding, RotaryEmbedding, SinusoidalPositionalEncoding, sinusoidal_encoding


def paper_pe(p: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d)), in float64."""
    row = torch.zeros(d, dtype=torch.float64)
    for i in range((d + 1) // 2):
        angle = p / base ** (2 * i / d)
        row[2 * i] = math.sin(angle)
        if 2 * i + 1 < d:
            row[2 * i + 1] = math.cos(angle)
    return row


# --------------------------------------------------------------------------- sinusoidal


@pytest.mark.parametrize("d", [4, 16, 5])
def test_sinusoidal_matches_paper_formula(d: int) -> None:
    pe = sinusoidal_encoding(600, d)
    assert pe.shape == (600, d)
    for p in [0, 1, 2, 7, 50, 599]:
        # float32 angles: the error grows with the position (about 1e-6 at p=600)
        assert torch.allclose(pe[p].double(), paper_pe(p, d), atol=5e-6), p
    assert torch.equal(pe[0, 0::2], torch.zeros((d + 1) // 2))
    assert torch.equal(pe[0, 1::2], torch.ones(d // 2))


def test_sinusoidal_base_argument() -> None:
    pe = sinusoidal_encoding(10, 6, base=100.0)
    for p in [1, 9]:
        assert torch.allclose(pe[p].double(), paper_pe(p, 6, base=100.0), atol=1e-6)


def test_sinusoidal_module_adds_the_table() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=32)
    x = torch.randn(2, 5, 8)
    out = module(x)
    assert torch.allclose(out - x, sinusoidal_encoding(5, 8).expand(2, 5, 8), atol=1e-6)


def test_sinusoidal_table_is_a_non_persistent_buffer() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=16)
    assert "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict()
    assert list(module.parameters()) == []
    # a state dict without the table loads strictly
    SinusoidalPositionalEncoding(8, max_len=64).load_state_dict(module.state_dict(), strict=True)


def test_sinusoidal_extends_past_max_len() -> None:
    module = SinusoidalPositionalEncoding(6, max_len=8)
    x = torch.zeros(1, 20, 6)
    out = module(x)  # documented: longer sequences extend the table, they do not raise
    assert out.shape == (1, 20, 6)
    for p in [0, 7, 8, 13, 19]:
        assert torch.allclose(out[0, p].double(), paper_pe(p, 6), atol=1e-6), p
    assert torch.equal(out[0], sinusoidal_encoding(20, 6))
    # the extended table is kept, still a non-persistent buffer, and earlier rows are unchanged
    assert module.pe.shape[0] >= 20
    assert "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict()
    assert torch.equal(module(torch.zeros(1, 8, 6))[0], sinusoidal_encoding(8, 6))


def test_sinusoidal_offset() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=16)
    x = torch.randn(2, 3, 8)
    full = module(torch.zeros(1, 10, 8))[0]
    assert torch.allclose(module(x, offset=4) - x, full[4:7].expand(2, 3, 8), atol=1e-6)
    # an offset past max_len extends the table too
    assert torch.allclose(
        module(torch.zeros(1, 2, 8), offset=30)[0].double(), torch.stack([paper_pe(30, 8), paper_pe(31, 8)]), atol=1e-6
    )


def test_sinusoidal_keeps_input_dtype() -> None:
    module = SinusoidalPositionalEncoding(8, max_len=16)
    assert module(torch.zeros(1, 3, 8, dtype=torch.float16)).dtype == torch.float16


def test_sinusoidal_wrong_width_raises() -> None:
    with pytest.raises(ValueError, match=r"x has 7 features.*expected 8"):
        SinusoidalPositionalEncoding(8)(torch.zeros(1, 3, 7))


# --------------------------------------------------------------------------- learned


def test_learned_adds_one_embedding_per_position() -> None:
    module = LearnedPositionalEncoding(4, max_len=6)
    x = torch.randn(2, 3, 4)
    assert torch.allclose(module(x) - x, module.embedding.weight[:3].expand(2, 3, 4), atol=1e-6)
    assert torch.allclose(module(x, offset=3) - x, module.embedding.weight[3:6].expand(2, 3, 4), atol=1e-6)
    assert "embedding.weight" in module.state_dict()


def test_learned_too_long_raises_clear_error() -> None:
    module = LearnedPositionalEncoding(4, max_len=6)
    module(torch.zeros(1, 6, 4))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"position 7.*max_len=6"):
        module(torch.zeros(1, 7, 4))
    with pytest.raises(ValueError, match=r"position 8.*max_len=6"):
        module(torch.zeros(1, 2, 4), offset=6)


# --------------------------------------------------------------------------- rotary


def test_rotary_preserves_norms() -> None:
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 3, 10, 8)
    for offset in [0, 5, 1000]:
        y = rope(x, offset=offset)
        assert y.shape == x.shape
        assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    # position 0 is not rotated
    assert torch.allclose(rope(x)[..., 0, :], x[..., 0, :])
    # and other positions are
    assert not torch.allclose(rope(x)[..., 1:, :], x[..., 1:, :], atol=1e-3)


@pytest.mark.parametrize(("p", "s"), [(0, 3), (4, 3), (17, 100), (2, 0)])
def test_rotary_dot_product_depends_on_relative_position_only(p: int, s: int) -> None:
    rope = RotaryEmbedding(16)
    q, k = torch.randn(4, 1, 16), torch.randn(4, 1, 16)
    # q at position m, k at position n: the dot product depends on m - n only
    for m, n in [(p, p + s), (p + s, p)]:
        base = (rope(q, offset=m) * rope(k, offset=n)).sum(-1)
        shifted = (rope(q, offset=m + 37) * rope(k, offset=n + 37)).sum(-1)
        assert torch.allclose(base, shifted, atol=1e-4)
    # rotating both at offset p and p+s inside one sequence gives the same scores as at 0 and s
    seq_q, seq_k = torch.randn(1, 2, 16).expand(2, 2, 16), torch.randn(1, 2, 16).expand(2, 2, 16)
    a = rope(seq_q, offset=p) @ rope(seq_k, offset=p).transpose(-1, -2)
    b = rope(seq_q, offset=p + s) @ rope(seq_k, offset=p + s).transpose(-1, -2)
    assert torch.allclose(a, b, atol=1e-4)


def test_rotary_depends_on_relative_distance() -> None:
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 8), torch.randn(1, 8)
    dots = [(rope(q, offset=0) * rope(k, offset=d)).sum().item() for d in range(4)]
    assert len({round(x, 4) for x in dots}) == 4  # different distances, different scores


def test_rotary_matches_rotate_half_formula() -> None:
    """Pairs (x[i], x[i + d/2]) are rotated by the angle position * base^(-2i/d)."""
    rope = RotaryEmbedding(4, base=10000.0)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    y = rope(x, offset=3)[0]
    theta = [3 * 10000 ** (-2 * i / 4) for i in range(2)]
    x1, x2 = [1.0, 2.0], [3.0, 4.0]
    first = [x1[i] * math.cos(theta[i]) - x2[i] * math.sin(theta[i]) for i in range(2)]
    second = [x2[i] * math.cos(theta[i]) + x1[i] * math.sin(theta[i]) for i in range(2)]
    expected = torch.tensor(first + second)
    assert torch.allclose(y, expected, atol=1e-5)


def test_rotary_odd_dim_raises() -> None:
    with pytest.raises(ValueError, match=r"even head dimension, got 7"):
        RotaryEmbedding(7)


def test_rotary_wrong_width_raises() -> None:
    with pytest.raises(ValueError, match=r"dim 8.*\(1, 3, 6\)"):
        RotaryEmbedding(8)(torch.zeros(1, 3, 6))
