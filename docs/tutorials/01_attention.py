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
# # 1. Attention from scratch to attnkit.nn
#
# Attention is a weighted average: every query scores every key, a softmax turns the scores into
# weights, and the output is the weighted sum of the values. You will compute it by hand with a few
# torch operations, reproduce two worked examples (the Illustrated Transformer's and the UvA deep-learning
# tutorial's), check that `attnkit.nn` gives the same numbers, then add masks and several heads, and see
# why attention on its own does not know in which order its inputs come.

# %%
import math

import torch
import torch.nn.functional as F

from attnkit.nn import (
    BlockSpec,
    EncoderBlock,
    MultiHeadAttention,
    SinusoidalPositionalEncoding,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from attnkit.viz import plot_attention

torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## The formula, by hand
#
# ```
# Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V
# ```
#
# `Q` is `[Tq, d_k]` (one row per query), `K` is `[Tk, d_k]` and `V` is `[Tk, d_v]` (one row per key).
# `Q Kᵀ` is `[Tq, Tk]`: row `i` holds the scores of query `i` against every key. The softmax runs
# along each row, so each row of weights is positive and sums to 1, and multiplying by `V` averages
# the value rows with those weights. Why divide by `√d_k`? A dot product of `d_k` terms with variance 1
# has variance `d_k`; scaling brings it back to about 1, so the softmax does not saturate (one weight
# near 1, the gradients of the others near 0).
#
# Four torch operations are the whole mechanism:


# %%
def attention_by_hand(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # [..., Tq, Tk]
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    return weights @ v, weights  # [..., Tq, d_v]


# %% [markdown]
# ## The Illustrated Transformer's example
#
# Jay Alammar's Illustrated Transformer follows the word "Thinking" of "Thinking Machines" with
# `d_k = 64`: its query scores 112 against its own key and 96 against the key of "Machines"; divided by
# `√64 = 8` that is 14 and 12, and the softmax gives 0.88 and 0.12. Vectors with exactly those dot
# products: a query of 64 twos and keys of 64 × 0.875 and 64 × 0.75 (`64 · 2 · 0.875 = 112`). The values
# may have any width; three numbers each are enough to see the mixing.

# %%
d_k = 64
q = torch.full((1, d_k), 2.0)  # one query: "Thinking"
k = torch.stack([torch.full((d_k,), 0.875), torch.full((d_k,), 0.75)])  # keys of "Thinking", "Machines"
v = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, -2.0]])  # their values

scores = q @ k.T
out, weights = attention_by_hand(q, k, v)
print("q·k          ", scores)
print("q·k / √d_k   ", scores / math.sqrt(d_k))
print("softmax      ", weights)
print("output z     ", out)
assert torch.equal(scores, torch.tensor([[112.0, 96.0]]))
assert torch.allclose(weights, torch.tensor([[0.88, 0.12]]), atol=0.005)
assert torch.allclose(out, 0.8808 * v[0] + 0.1192 * v[1], atol=1e-4)

# %% [markdown]
# The output `z` is `0.88 · v_Thinking + 0.12 · v_Machines`: the first two entries of the values were
# chosen as one-hot vectors, so they show the weights again. A difference of 16 in the raw scores, only 2
# after scaling, is enough to give the word itself 88 % of the weight: the softmax turns differences
# into ratios (`e² ≈ 7.4 ≈ 0.88 / 0.12`).
#
# `attnkit.nn.scaled_dot_product_attention` computes the same thing. With `need_weights=True` it runs
# the explicit formula and returns the weights too; without it, it calls PyTorch's fused kernel (the
# fast path, no weights). Both agree with our four lines:

# %%
out_ak, weights_ak = scaled_dot_product_attention(q, k, v, need_weights=True)
out_fused, no_weights = scaled_dot_product_attention(q, k, v)
print("weights:", weights_ak, "| without need_weights:", no_weights)
assert torch.allclose(weights_ak, weights) and torch.allclose(out_ak, out) and torch.allclose(out_fused, out)

# %% [markdown]
# ## The UvA tutorial's random example
#
# The UvA deep-learning course (tutorial 6) draws `Q`, `K` and `V` of three tokens with `d_k = 2` from a
# normal distribution with seed 42. The same seed gives the same tensors here, and the weights it
# prints.

# %%
seq_len, d_k = 3, 2
torch.manual_seed(42)
q, k, v = torch.randn(seq_len, d_k), torch.randn(seq_len, d_k), torch.randn(seq_len, d_k)
out, weights = scaled_dot_product_attention(q, k, v, need_weights=True)
print("Q\n", q, "\nK\n", k, "\nV\n", v)
print("weights\n", weights, "\noutput\n", out)

by_hand_out, by_hand_weights = attention_by_hand(q, k, v)
assert torch.allclose(weights, by_hand_weights) and torch.allclose(out, by_hand_out)
uva_weights = torch.tensor([[0.4028, 0.2886, 0.3086], [0.3538, 0.3069, 0.3393], [0.1303, 0.4630, 0.4067]])
assert torch.allclose(weights, uva_weights, atol=1e-4)
assert torch.allclose(weights.sum(-1), torch.ones(3))

# %% [markdown]
# Each row of `weights` sums to 1, and row `i` of the output is that mix of the rows of `V`. With
# random two-dimensional vectors the weights are all fairly even (0.13 to 0.46): nothing has been
# learned yet. Training shapes the projections that produce `Q`, `K` and `V` so that the scores
# single out the useful keys.
#
# ## Masks: True = may attend
#
# A mask says which keys each query may see. attnkit's boolean masks mean **True = may attend**, as in
# PyTorch's `torch.nn.functional.scaled_dot_product_attention` (`torch.nn`'s modules such as
# `nn.MultiheadAttention` use the opposite, True = blocked: hand them `~mask`). A masked score is
# replaced by a very low number before the softmax, so its weight is 0.
#
# **Padding.** Sentences in a batch have different lengths; the short ones are filled with `<pad>`
# tokens that no query should attend to. `padding_mask(lengths, T)` is `[B, T]`, True at the real
# tokens. As a key mask it needs a query axis: `[B, 1, T]` broadcasts over the queries.

# %%
tokens = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "ran", "<pad>", "<pad>", "<pad>"]]
lengths = torch.tensor([6, 3])
pad = padding_mask(lengths, 6)
print(pad)

torch.manual_seed(0)
x = torch.randn(2, 6, 8)  # stand-ins for the token embeddings, [B, T, D]
_, w_pad = scaled_dot_product_attention(x, x, x, pad[:, None, :], need_weights=True)
print("sentence 2, padding mask:\n", w_pad[1])
assert torch.all(w_pad[1, :, 3:] == 0) and torch.allclose(w_pad.sum(-1), torch.ones(2, 6))

# %% [markdown]
# The last three columns (the padded keys) get weight 0 in every row, and each row still sums to 1 over
# the real keys. The padded *queries* (rows 3 to 5) still get outputs: a key mask only hides keys, so
# the loss or the pooling must leave those positions out.
#
# **Causal.** A language model predicts token `t + 1` from tokens `0 .. t`, so query `t` may attend to
# keys `0 .. t` only: `causal_mask(T)` is the lower triangle. `combine_masks` ANDs masks (any
# broadcastable shapes) into one.

# %%
causal = causal_mask(6)
print(causal.int())
both = combine_masks(causal, pad[:, None, :])  # [2, 6, 6]
_, w_both = scaled_dot_product_attention(x, x, x, both, need_weights=True)
assert torch.all(w_both.triu(diagonal=1) == 0)  # nothing above the diagonal: no look into the future
assert torch.all(w_both[1, :, 3:] == 0)  # and nothing on the padding
plot_attention([w_both[1][None]], tokens[1], tokens[1], title="Sentence 2 with a causal and a padding mask")

# %% [markdown]
# Rows are queries, columns keys. The first row can only attend to itself (weight 1), the second to
# "a" and "dog", and so on down the lower triangle; the `<pad>` columns stay dark, and rows 3 to 5 (the
# padded queries) look at the real tokens only. Here queries and keys are the same vectors (no
# projections), so each real token matches itself best: the bright diagonal.
#
# ## A query with no key at all
#
# Some queries have nothing to attend to: with *left* padding (the usual layout when generating from a
# batch of prompts) and a causal mask, a padded query at the start may only see padded keys. Done
# naively, with `-inf` for the masked scores, such a row is `softmax(-inf, …, -inf) = 0 / 0 = NaN`, and
# in the next layer the NaN reaches every query through the values, masked or not (a weight of 0 times
# NaN is still NaN). attnkit gives such a row zeros (weights and output), never NaN.

# %%
left_pad = torch.tensor([[False, False, True, True]])  # "<pad> <pad> hello world"
mask = combine_masks(causal_mask(4), left_pad[:, None, :])
print(mask.int())

y = torch.randn(1, 4, 8)
naive = torch.softmax((y @ y.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf")), dim=-1)
out, w = scaled_dot_product_attention(y, y, y, mask, need_weights=True)
out_fused, _ = scaled_dot_product_attention(y, y, y, mask)
naive_out = naive @ y  # rows 0 and 1 are NaN
next_scores = (naive_out @ naive_out.transpose(-2, -1) / math.sqrt(8)).masked_fill(~mask, float("-inf"))
next_layer = torch.softmax(next_scores, dim=-1) @ naive_out
print("naive -inf weights:\n", naive)
print("rows of the next naive layer that are NaN:", next_layer.isnan().any(-1))
print("attnkit weights:\n", w)
assert naive[0, :2].isnan().all() and next_layer.isnan().all()
assert not w.isnan().any() and not out_fused.isnan().any()
assert torch.all(w[0, :2] == 0) and torch.all(out[0, :2] == 0) and torch.allclose(out_fused, out)
assert torch.allclose(w[0, 2:], naive[0, 2:])  # the rows that have keys are unchanged

# %% [markdown]
# The first two rows of the naive version are NaN, and one layer later every row is; attnkit's two rows
# are zeros, on the explicit path and on the fused kernel alike, and the other rows are unchanged. The
# boolean convention is PyTorch's own: its fused function, given the same mask, agrees on those rows.

# %%
reference = F.scaled_dot_product_attention(y, y, y, attn_mask=mask)
assert torch.allclose(reference[0, 2:], out[0, 2:], atol=1e-6)

# %% [markdown]
# ## Multi-head attention
#
# One attention compares tokens in one way. Multi-head attention runs `H` of them side by side, each
# on its own learned projections of the input into a smaller space (`head_dim = D / H`), and mixes
# their concatenated outputs with one more linear layer:
#
# ```
# head_h = Attention(x W_h^Q, x W_h^K, x W_h^V)        h = 1 … H
# MultiHead(x) = concat(head_1, …, head_H) W^O
# ```
#
# `attnkit.nn.MultiHeadAttention(embed_dim, num_heads)` does this (self-attention when given one input)
# and returns the weights as `[B, H, Tq, Tk]` with `need_weights=True`.

# %%
torch.manual_seed(0)
mha = MultiHeadAttention(embed_dim=16, num_heads=4).eval()
x = torch.randn(2, 6, 16)
out, w = mha(x, key_padding_mask=pad, need_weights=True)
print("output", tuple(out.shape), "weights", tuple(w.shape))
assert w.shape == (2, 4, 6, 6)

# %% [markdown]
# Nothing else happens inside: the same result by hand, with the layer's own parameters. Its query, key
# and value projections are one linear layer, `in_proj` (the rows of `W^Q`, then `W^K`, then `W^V`);
# each projection is split into 4 heads of 4 features.

# %%
B, T, H, hd = 2, 6, 4, 4
qkv = x @ mha.in_proj.weight.T + mha.in_proj.bias  # [B, T, 3 * 16]
q, k, v = (t.reshape(B, T, H, hd).transpose(1, 2) for t in qkv.split(16, dim=-1))  # each [B, H, T, hd]
scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
scores = scores.masked_fill(~pad[:, None, None, :], float("-inf"))
heads = torch.softmax(scores, dim=-1) @ v  # [B, H, T, hd]
by_hand = heads.transpose(1, 2).reshape(B, T, H * hd) @ mha.out_proj.weight.T + mha.out_proj.bias
assert torch.allclose(by_hand, out, atol=1e-6)
assert torch.allclose(torch.softmax(scores, dim=-1), w, atol=1e-6)
plot_attention([w[0]], tokens[0], tokens[0], title="An untrained MultiHeadAttention: sentence 1, 4 heads")

# %% [markdown]
# Each head has its own map because each has its own projections, even before any training (the weights
# start random, Xavier-initialised). Training makes heads specialise: in a model trained on attnkit's `reverse` task
# ([tutorial 3](03_reverse.py)), each output position attends to the mirrored input position.
#
# ## Attention does not know the order
#
# Nothing in the formula refers to a position: a query scores every key by content only. So if the
# input rows of self-attention are permuted, the output rows are permuted the same way and nothing else
# changes: self-attention is *permutation-equivariant*. The same holds for a whole encoder block (the
# feed-forward network and the LayerNorms act on each position on its own).

# %%
perm = torch.tensor([3, 0, 5, 1, 4, 2])
y, _ = mha(x)
y_of_permuted, _ = mha(x[:, perm])
block = EncoderBlock(BlockSpec(d_model=16, num_heads=4, dim_feedforward=32, dropout=0.0)).eval()
z, _ = block(x)
z_of_permuted, _ = block(x[:, perm])
print("attention: max |f(x[perm]) - f(x)[perm]| =", (y_of_permuted - y[:, perm]).abs().max().item())
print("encoder block: max |f(x[perm]) - f(x)[perm]| =", (z_of_permuted - z[:, perm]).abs().max().item())
assert torch.allclose(y_of_permuted, y[:, perm], atol=1e-6)
assert torch.allclose(z_of_permuted, z[:, perm], atol=1e-5)

# %% [markdown]
# The differences are rounding errors (around 1e-7). To self-attention, "dog bites man" and "man bites
# dog" are the same bag of words with the outputs reordered: it sees a **set**. That is what you want
# for set problems (attnkit's `anomaly` task, which finds the odd item of a set, uses no positions at
# all). For a **sequence**, the position has to be put into the input: add a positional encoding to each
# token's vector, and the same permutation no longer just reorders the output.

# %%
pe = SinusoidalPositionalEncoding(16)
p, _ = block(pe(x))
p_of_permuted, _ = block(pe(x[:, perm]))
difference = (p_of_permuted - p[:, perm]).abs().max().item()
print("with positional encodings: max |f(x[perm]) - f(x)[perm]| =", round(difference, 3))
assert difference > 0.1

# %% [markdown]
# Now the outputs depend on where each token sits. The next tutorial looks at the positional encodings
# themselves: the paper's sinusoids, learned ones, and the rotary encoding of modern decoders.
