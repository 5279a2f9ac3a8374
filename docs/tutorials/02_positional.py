# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 2. Positional encodings and the learning-rate schedule
#
# Self-attention sees its input as a set (tutorial 1), so a Transformer for sequences must be told
# where each token sits. You will look at the three ways attnkit does it: the paper's sinusoidal
# encoding, a learned table, and the rotary encoding (RoPE) of modern decoders, checking numerically
# what each one makes of the distance between two positions. The last section plots the warm-up +
# cosine learning-rate schedule attnkit trains with, and shows why the first steps need a small rate.

# %%
import math

import numpy as np
import torch

from attnkit.nn import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    sinusoidal_encoding,
)
from attnkit.training.schedule import CosineWarmupScheduler
from attnkit.viz import Figure, plot_lr_schedule, plot_positional_encoding

torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## Sinusoidal encoding
#
# "Attention Is All You Need" adds to the embedding of the token at position `p` a fixed vector of
# sines and cosines:
#
# ```
# PE[p, 2i]   = sin(p / 10000^(2i/d))
# PE[p, 2i+1] = cos(p / 10000^(2i/d))
# ```
#
# Each pair of dimensions `(2i, 2i+1)` is a clock hand turning at its own speed: its wavelength is
# `2π · 10000^(2i/d)` positions. `plot_positional_encoding` draws the table: position on the x axis,
# hidden dimension on the y axis, and below it the first four dimensions as curves.

# %%
plot_positional_encoding(dim=48, length=96)

# %% [markdown]
# At the top of the heat map (the first dimensions) the colours alternate within a few positions; further
# down they change more and more slowly, and the last rows are almost constant over these 96 positions
# (sine near 0, cosine near 1). The curves show dimensions 0 and 1 (a sine and a cosine of wavelength
# `2π ≈ 6.3`) and 2 and 3 (wavelength 9.2). Together the pairs give every position a distinct code, like
# the digits of a number, from the fast ones to the slow ones:

# %%
d = 48
wavelengths = [2 * math.pi * 10000 ** (2 * i / d) for i in range(d // 2)]
for i in (0, 1, 6, 12, 18, 23):
    print(f"pair {i:2d} (dims {2 * i:2d}, {2 * i + 1:2d}): wavelength {wavelengths[i]:9.1f} positions")
assert round(wavelengths[1], 1) == 9.2 and 42_000 < wavelengths[-1] < 44_000
pe = sinusoidal_encoding(96, d)
assert torch.allclose(pe[:, 0], torch.sin(torch.arange(96.0)), atol=1e-5)  # pair 0: sin(p), wavelength 2π

# %% [markdown]
# The wavelengths grow geometrically from 6.3 to about 43,000 positions, so the code does not repeat
# within any realistic sequence length.
#
# Why sines and cosines? Because moving `k` positions further is the same rotation of every pair,
# whatever the starting position: `sin(a + b) = sin a · cos b + cos a · sin b` and
# `cos(a + b) = cos a · cos b − sin a · sin b`. So one matrix `M_k` (2 × 2 rotation blocks of angle
# `k / 10000^(2i/d)`) turns the encoding of *every* position `p` into that of `p + k`: a relative offset
# is a linear function, easy for the model to learn (the paper's reason for this choice). Checked for
# `k = 5` and all positions:

# %%
k = 5
angles = k / 10000 ** (torch.arange(0, d, 2) / d)
M = torch.zeros(d, d)
for i, a in enumerate(angles):
    M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[math.cos(a), math.sin(a)], [-math.sin(a), math.cos(a)]])
print("max |PE[p + 5] - PE[p] M_5ᵀ| over p:", (pe[k:] - pe[:-k] @ M.T).abs().max().item())
assert torch.allclose(pe[k:], pe[:-k] @ M.T, atol=1e-4)

# %% [markdown]
# The same identity makes the dot product of two encodings, `PE[p] · PE[q] = Σ_i cos((p − q) / 10000^(2i/d))`,
# a function of the distance `p − q` alone: the similarity matrix of the encodings below has constant
# diagonals, largest on the main one and falling off with the distance. The module
# `SinusoidalPositionalEncoding(d)` adds this table to `x [B, T, D]`; it has no parameters, and since the
# formula holds for any position it extends itself to sequences longer than its table.

# %%
similarity = pe @ pe.T  # [96, 96]
assert torch.allclose(similarity[1:, 1:], similarity[:-1, :-1], atol=1e-3)  # constant along diagonals
sinusoidal = SinusoidalPositionalEncoding(d, max_len=96)
longer = sinusoidal(torch.zeros(1, 200, d))  # 200 positions from a table of 96: no error
print("parameters:", sum(p.numel() for p in sinusoidal.parameters()), "| 200 positions:", tuple(longer.shape))

# %% [markdown]
# ## Learned encoding
#
# The alternative of BERT and GPT-2: a table of `max_len × d` numbers, one trainable vector per
# position, learned with the rest of the model. `LearnedPositionalEncoding(d, max_len)` starts them as
# small random vectors (standard deviation 0.02). It can express anything a sinusoid can, but it has to
# learn from the data that position 17 is close to position 18, and it has no vector at all for a
# position past `max_len`: attnkit says so clearly instead of failing on an index.

# %%
torch.manual_seed(0)
learned = LearnedPositionalEncoding(d, max_len=96)
print("parameters:", sum(p.numel() for p in learned.parameters()))
try:
    learned(torch.zeros(1, 200, d))
except ValueError as err:
    print("ValueError:", err)


# %% [markdown]
# Compare what the two encodings say about pairs of positions: the cosine similarity of every pair.


# %%
def cosine_similarity(table):
    unit = table / table.norm(dim=-1, keepdim=True)
    return (unit @ unit.T).numpy()


def plot_similarities(tables):
    fig = Figure(figsize=(9, 4), layout="constrained")  # attnkit.viz.Figure: a matplotlib Figure shown inline
    axes = fig.subplots(1, len(tables))
    for ax, (title, table) in zip(axes, tables.items()):
        image = ax.imshow(cosine_similarity(table), cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title(f"{title}: cosine similarity", fontsize=10)
        ax.set_xlabel("position")
        ax.set_ylabel("position")
    fig.colorbar(image, ax=axes, shrink=0.8)
    return fig


learned_table = learned.embedding.weight.detach()  # [96, 48], before any training
sinusoidal_similarity = cosine_similarity(pe)
by_offset = {k: sinusoidal_similarity.diagonal(k).mean() for k in (1, 5, 20, 60)}
print("sinusoidal, mean similarity at offset", {k: round(float(v), 2) for k, v in by_offset.items()})
assert list(by_offset.values()) == sorted(by_offset.values(), reverse=True) and sinusoidal_similarity.min() > 0.3
assert round(float(by_offset[1]), 2) == 0.96 and round(float(by_offset[60]), 2) == 0.41
plot_similarities({"sinusoidal": pe, "learned, before training": learned_table})

# %% [markdown]
# Left: the sinusoidal encodings of neighbouring positions are the most similar (the dark band along the
# diagonal), and the similarity falls with the distance (the printed means: 0.96 at offset 1 down to 0.41
# at offset 60), in the same way everywhere. It stays positive because the slow dimensions hardly change
# over 96 positions. Right: before training, every learned vector is random and similar only to itself;
# any notion of "nearby" has to come from training. The learned table is what
# attnkit's `classify` task uses by default; the `reverse` task uses the sinusoidal one.
#
# ## Rotary encoding (RoPE)
#
# Llama, Mistral and Qwen2 add nothing to `x`. Inside attention, they rotate the query and the key of
# each head by an angle proportional to their positions: the pair of features `(x[i], x[i + d/2])` of
# the token at position `m` turns by `m · θ_i`, with `θ_i = 10000^(−2i/d)` (the frequencies of the
# sinusoids). In two dimensions there is a single pair with `θ = 1`, and position `m` rotates a vector
# by `m` radians:

# %%
rope2 = RotaryEmbedding(2)
east = torch.tensor([[1.0, 0.0]]).expand(4, 2)  # the same vector at positions 0, 1, 2, 3
rotated = rope2(east)
print(rotated)
m = torch.arange(4.0)
assert torch.allclose(rotated, torch.stack([m.cos(), m.sin()], dim=-1), atol=1e-6)

# %% [markdown]
# A rotation keeps lengths, and the dot product of two rotated vectors only sees the difference of their
# angles: `R(mθ)q · R(nθ)k = q · R((n − m)θ)k`. So the attention score of a query at position `m` and a key
# at position `n` depends on the offset `m − n` and not on where the pair sits. Checked with a
# 32-dimensional head: the same `q` and `k` at every pair of positions from 0 to 63.
# (`RotaryEmbedding` is `cos_sin` of the positions followed by `apply_rotary`; attnkit's
# `MultiHeadAttention(..., rotary=RotaryEmbedding(head_dim))` applies it to queries and keys only.)

# %%
torch.manual_seed(0)
head_dim, T = 32, 64
rope = RotaryEmbedding(head_dim)
q, k = torch.randn(head_dim), torch.randn(head_dim)
q_at = rope(q.expand(T, head_dim))  # row m: q at position m
k_at = rope(k.expand(T, head_dim))  # row n: k at position n
scores = q_at @ k_at.T  # scores[m, n] = rotated q at m · rotated k at n
assert torch.allclose(q_at.norm(dim=-1), q.norm().expand(T), atol=1e-5)  # rotations keep lengths
assert torch.allclose(scores[1:, 1:], scores[:-1, :-1], atol=1e-4)  # constant along every diagonal
cos, sin = rope.cos_sin(torch.arange(T))
assert torch.allclose(apply_rotary(q.expand(T, head_dim), cos, sin), q_at)
pairs = [(3, 0), (10, 7), (60, 57)]
print("q·k at positions (m, n) =", pairs, ":", [round(scores[m, n].item(), 4) for m, n in pairs])

# %% [markdown]
# The three pairs are 3 positions apart and give the same score. The figure shows the whole matrix
# (left: constant along every diagonal), and (right) the score as a function of the offset, for this
# `q` and `k` and for a query meeting its own key (`k = q`): that one is largest at offset 0, where the
# two vectors are aligned, and oscillates below it elsewhere, lower on average the further apart the two
# positions are (RoPE's "long-term decay": here a mean of 24 within 8 positions, 13 beyond 48).

# %%
offsets = np.arange(-(T - 1), T)
score_of_offset = [scores.diagonal(-int(o)).mean().item() for o in offsets]  # m - n = o
q_at_itself = q_at @ q_at.T
self_score_of_offset = np.array([q_at_itself.diagonal(-int(o)).mean().item() for o in offsets])
assert offsets[self_score_of_offset.argmax()] == 0
near, far = self_score_of_offset[abs(offsets) <= 8].mean(), self_score_of_offset[abs(offsets) >= 48].mean()
assert round(near) == 24 and round(far) == 13


def plot_rotary_scores(scores, offsets, curves):
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.4])
    limit = scores.abs().max().item()
    image = left.imshow(scores.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit)
    left.set_title("rotary q·k for every pair of positions", fontsize=10)
    left.set_xlabel("key position n")
    left.set_ylabel("query position m")
    fig.colorbar(image, ax=left, shrink=0.8)
    for label, values in curves.items():
        right.plot(offsets, values, label=label)
    right.axvline(0, color="grey", linestyle=":", linewidth=1)
    right.set_title("the score depends only on the offset", fontsize=10)
    right.set_xlabel("offset m − n")
    right.set_ylabel("score")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    return fig


curves = {"q · k (two random vectors)": score_of_offset, "q · q (a query and its own key)": self_score_of_offset}
plot_rotary_scores(scores, offsets, curves)

# %% [markdown]
# Unlike an added encoding, RoPE leaves the token vectors themselves untouched (values are not rotated),
# works for any length, and makes every head's scores depend on relative positions only.
#
# ## The learning-rate schedule
#
# attnkit trains with Adam and a learning rate that changes at every optimiser step: a linear warm-up
# over the first `warmup` steps, then a cosine decay to 0 at `max_iters` (by default the number of
# steps of the run), the schedule of the UvA tutorial:
#
# ```
# lr(step) = base_lr · 0.5 · (1 + cos(π · step / max_iters))       × step / warmup   while step ≤ warmup
# ```
#
# With the `reverse` task's learning rate and warm-up (`optim.lr=5e-4`, `optim.warmup=50`), over a short
# run of 500 steps so that the warm-up is easy to see:

# %%
plot_lr_schedule(warmup=50, max_iters=500, lr=5e-4)

# %% [markdown]
# The rate climbs from 0 to its peak at step 50, then follows half a cosine down to 0. The peak is a
# little below `base_lr` (0.976 of it), because the cosine has already started to fall by then. The
# scheduler attnkit's trainer uses is `CosineWarmupScheduler`; stepping it with a real optimiser gives
# the formula's values:


# %%
def schedule(step, base_lr=5e-4, warmup=50, max_iters=500):
    lr = base_lr * 0.5 * (1 + math.cos(math.pi * min(step, max_iters) / max_iters))
    return lr * step / warmup if step <= warmup else lr


optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=5e-4)
scheduler = CosineWarmupScheduler(optimizer, warmup=50, max_iters=500)
used = []
for _ in range(501):
    used.append(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
assert np.allclose(used, [schedule(s) for s in range(501)], rtol=1e-9, atol=1e-15)
for step in (0, 25, 50, 250, 500):
    print(f"step {step:3d}: lr = {used[step]:.3e}")
assert used[0] == 0 and max(used) == used[50] and used[500] < 1e-12
assert math.isclose(used[250], 2.5e-4) and round(used[50] / 5e-4, 3) == 0.976

# %% [markdown]
# Why start from 0? Two reasons that add up in Transformers.
#
# **Adam's first steps are full-size, whatever the gradient.** Adam moves each parameter by
# `lr · m̂ / (√v̂ + ε)`, the running mean of its gradients over the root of their running mean square. At
# the first step both come from a single gradient, so the ratio is `g / |g| = ±1`: every parameter moves
# by the whole learning rate, however small or large its gradient, and the estimate of `v` rests on one
# sample. Liu et al. (2020, "On the Variance of the Adaptive Learning Rate and Beyond", RAdam) trace the
# need for warm-up to this large early variance. One Adam step on three gradients a million times apart:

# %%
w = torch.nn.Parameter(torch.zeros(3))
adam = torch.optim.Adam([w], lr=1e-3)
w.grad = torch.tensor([1e-4, 1.0, 100.0])
adam.step()
print("first update:", -w.detach())
assert torch.allclose(-w.detach(), torch.full((3,), 1e-3), rtol=1e-3)

# %% [markdown]
# All three parameters moved by the full `1e-3`. A warm-up scales these first, poorly estimated steps
# down (by `step / warmup`) until `v̂` has averaged enough gradients to be trusted.
#
# **Post-norm Transformers have large gradients at the start.** In the paper's post-norm blocks
# (`LayerNorm(x + Sublayer(x))`, attnkit's default `norm_first=False`), Xiong et al. (2020, "On Layer
# Normalization in the Transformer Architecture") show that at initialisation the gradients of the
# parameters near the output are large, so a large learning rate from the first step can make training
# diverge; with warm-up it does not. Pre-norm blocks (`x + Sublayer(LayerNorm(x))`, `norm_first=True`)
# keep the gradients well-behaved and are much less sensitive to the warm-up. The cosine decay
# afterwards lets training settle: large steps early, ever smaller ones near the end.
