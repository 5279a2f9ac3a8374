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
# # 9. Find an induction head
#
# Show a language model a sequence of random tokens, then the same tokens again. The first time they
# cannot be predicted; the second time they can, by a simple rule: *find where the current token
# appeared before, and predict the token that came after it*. `... A B ... A` → `B`. Attention heads
# that carry out this rule are called **induction heads** (Olsson et al., *In-context Learning and
# Induction Heads*, 2022). They appear in every Transformer language model that has been looked at,
# and they are thought to be a large part of how models learn from their context.
#
# One attention head cannot do it alone. At the second `A`, the head must attend to `B`, the token
# *after* the earlier `A`, but `B` itself has nothing to do with `A`. Two heads in two layers do it
# together:
#
# 1. a **previous-token head** in the first layer: each position attends to the one before it and
#    copies that token into its own residual stream (`B`'s stream now also says "after `A`");
# 2. an **induction head** in the second layer: its query at the second `A` looks for a key saying
#    "after `A`", finds `B`'s position, and copies `B` into the prediction.
#
# In this notebook you train a tiny model of just attention, watch the induction heads form, and confirm
# what they do by switching them off (ablation) and by patching them between two inputs.

# %%
# ruff: noqa: E402 (the warnings filter comes before the imports that would warn)
import warnings

warnings.filterwarnings("ignore")

import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from attnkit.models.heads import head_scores, repeated_tokens
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.patching import ablate_heads, patch_heads

start_time = time.perf_counter()
torch.manual_seed(0)

# %% [markdown]
# ## The data: random halves, repeated
#
# `attnkit.models.heads.repeated_tokens(vocab_size, length, batch, seed=...)` draws `length` random tokens
# per row and repeats them: `[BOS, r1 .. rn, r1 .. rn]`. The ids 0, 1, 2 are the model's padding, start
# and end tokens, so the random ones come from the other 61 of a vocabulary of 64.
#
# Each training batch gets a new random length between 6 and 24. With one fixed length, the second copy
# of each token would always sit the same distance after the first, and a single head could just look
# back that distance: no induction needed. With varying lengths, only the content tells where to look.

# %%
VOCAB, BOS, SPECIAL = 64, 1, (0, 2)
print(repeated_tokens(VOCAB, 8, 2, seed=0, bos=BOS, avoid=SPECIAL))

# %% [markdown]
# ## An attention-only model
#
# The language model of tutorial 7 with two changes. `mlp=False` removes the feed-forward layer (the
# MLP) from every block: what is left is attention and the residual stream, the smallest model in which
# induction heads form, and the easiest to read. `positional="rotary"` encodes positions *inside*
# attention, as relative offsets, so "the token just before me" is the same thing at every position.
# Two layers of four heads, width 32:

# %%
config = LanguageModelConfig(
    vocab_size=VOCAB,
    d_model=32,
    num_heads=4,
    num_layers=2,
    mlp=False,
    positional="rotary",
    dropout=0.0,
    max_len=49,
)
model = LanguageModel(config)
print(model.decoder.layers[0])
print(f"{sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# ## Two measures
#
# **The induction score** of a head (`attnkit.models.heads.head_scores`): on repeated random sequences
# (a length of 20 here), the mean attention from each position of the second half to the token *after*
# its earlier copy. It is in [0, 1]; 1 is a head that always attends there and nowhere else. The same
# function gives each head's **previous-token score**, the mean attention to the position just before.
#
# **The in-context loss**: the model's loss (cross-entropy, in nats) on the second half, the tokens it
# can only predict by looking back. Its first token cannot be predicted (the model does not know the
# half has ended), so the loss counts the others. Chance is `ln 61 ≈ 4.1`.

# %%
N_EVAL = 20
eval_ids = repeated_tokens(VOCAB, N_EVAL, 32, seed=123, bos=BOS, avoid=SPECIAL)


def repeat_loss(logits, ids, n):
    """Per row, the mean loss on the predictable tokens of the repeated half (positions n + 2 .. 2n)."""
    rows = ids.repeat(logits.shape[0] // ids.shape[0], 1)  # ablate_heads stacks copies of the batch
    logp = logits[:, n + 1 : 2 * n].float().log_softmax(-1)
    return -logp.gather(-1, rows[:, n + 2 : 2 * n + 1, None]).squeeze(-1).mean(-1)


@torch.no_grad()
def measure(model):
    scores = head_scores(model, length=N_EVAL)
    loss = repeat_loss(model(eval_ids), eval_ids, N_EVAL).mean()
    return scores, float(loss)


untrained, untrained_loss = measure(model)
print("untrained induction scores [layer, head]:\n", untrained.induction.numpy().round(3))
print(f"untrained loss on the repeated half: {untrained_loss:.2f} nats")
assert float(untrained.induction.max()) < 0.2  # no induction head before training

# %% [markdown]
# ## Training
#
# A plain PyTorch loop on the model: AdamW at a learning rate of 0.01, decayed linearly to 0 over the last
# 600 steps (which sharpens the heads), and the usual next-token loss on every position of batches of 32
# sequences. Every 50 steps it records the in-context loss, the highest induction score in the second layer,
# and the highest previous-token score in the first.

# %%
STEPS, DECAY, EVERY = 1500, 600, 50
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (STEPS - step) / DECAY))
lengths = torch.randint(6, 25, (STEPS,), generator=torch.Generator().manual_seed(1))
history = {"step": [], "loss": [], "induction": [], "previous": []}
for step in range(STEPS + 1):
    if step % EVERY == 0:
        model.eval()
        scores, loss = measure(model)
        history["step"].append(step)
        history["loss"].append(loss)
        history["induction"].append(float(scores.induction[1].max()))
        history["previous"].append(float(scores.previous_token[0].max()))
        model.train()
    if step == STEPS:
        break
    ids = repeated_tokens(VOCAB, int(lengths[step]), 32, seed=1000 + step, bos=BOS, avoid=SPECIAL)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    schedule.step()
model.eval()
for i in range(0, len(history["step"]), 5):
    print(
        f"step {history['step'][i]:5}: loss on the repeat {history['loss'][i]:.2f}, "
        f"induction {history['induction'][i]:.2f}, previous-token {history['previous'][i]:.2f}"
    )

# %% [markdown]
# The two curves against the training steps:

# %%
fig, (ax_loss, ax_score) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
ax_loss.plot(history["step"], history["loss"], color="tab:red")
ax_loss.set_ylabel("loss on the repeat (nats)")
ax_score.plot(history["step"], history["induction"], label="best induction score, second layer")
ax_score.plot(history["step"], history["previous"], label="best previous-token score, first layer")
ax_score.set_ylabel("score")
ax_score.set_xlabel("training step")
ax_score.set_ylim(0, 1)
ax_score.legend(loc="center right")
fig.suptitle("an induction head forms")
fig.tight_layout()
plt.show()

steps = np.array(history["step"])
formed = int(steps[np.argmax(np.array(history["induction"]) > 0.5)])  # first step with a score over 0.5
learned = int(steps[np.argmax(np.array(history["loss"]) < untrained_loss / 2)])  # the loss halved
print(f"the induction score passes 0.5 at step {formed}; the loss on the repeat halves at step {learned}")
assert formed > 0 and learned > 0  # neither at the start (the untrained model has no induction head)
assert abs(formed - learned) <= 2 * EVERY  # they come together
assert history["loss"][-1] < 0.5 and history["induction"][-1] >= 0.9

# %% [markdown]
# For about 500 steps the loss on the repeat falls only slowly: the model learns that a token of the second
# half is probably one it has already seen, but not which one. Then, within about 200 steps, the loss falls
# to near zero, *at the same time* as a head in the second layer starts attending to the token after the
# earlier copy, and a head in the first layer to the previous token. This sudden drop is the
# "phase change" that Olsson et al. saw in models large and small. A likely reason it is sudden: each of
# the two heads helps only once the other exists, so neither pays off gradually on its own.
#
# ## Which heads?
#
# Every head's three scores after training:

# %%
trained, trained_loss = measure(model)
fig, axes = plt.subplots(1, 3, figsize=(11, 2.8))
for ax, (name, values) in zip(
    axes,
    [
        ("previous-token", trained.previous_token),
        ("duplicate-token", trained.duplicate_token),
        ("induction", trained.induction),
    ],
):
    image = ax.imshow(values.numpy(), vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"{name} score")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(config.num_heads))
    ax.set_yticks(range(config.num_layers))
    for (layer, head), value in np.ndenumerate(values.numpy()):
        ax.text(head, layer, f"{value:.2f}", ha="center", va="center", color="white" if value < 0.5 else "black")
fig.tight_layout()
plt.show()
induction_head = int(trained.induction[1].argmax())
previous_head = int(trained.previous_token[0].argmax())
print(f"induction head: layer 1, head {induction_head}, score {float(trained.induction[1].max()):.3f}")
print(f"previous-token head: layer 0, head {previous_head}, score {float(trained.previous_token[0].max()):.3f}")
assert float(trained.induction[1].max()) >= 0.9  # at least one induction head in the second layer
assert float(trained.induction[0].max()) < 0.5  # and none in the first: one layer cannot do it

# %% [markdown]
# (Layers are numbered from 0 in code: "layer 1" is the second.) The pattern of the induction head on
# one sequence shows the stripe: every position of the second half attends to the position one after
# its token's first occurrence, `n - 1` positions back.

# %%
with torch.no_grad():
    _, maps = model.forward_with_attention(eval_ids[:1])
fig, ax = plt.subplots(figsize=(4.5, 4.5))
ax.imshow(maps[1][0, induction_head].numpy(), cmap="Blues")
ax.set_title(f"layer 1, head {induction_head}: attention")
ax.set_xlabel("key position")
ax.set_ylabel("query position")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Confirm by ablation
#
# A high score says where a head looks, not that the model needs it. To test that, switch each head off in
# turn and measure the loss on the repeat: `attnkit.models.patching.ablate_heads(model, ids, metric)` sets
# one head's output to zero (`how="zero"`, or its mean with `how="mean"`) and runs the model, for every
# head, in batched forward passes. `metric` maps the logits to one number per sequence: here the loss on
# the repeated half.

# %%
ablation = ablate_heads(model, eval_ids, lambda logits: repeat_loss(logits, eval_ids, N_EVAL))
print(f"loss on the repeat, nothing ablated: {ablation.base:.3f} nats")
print("with each head ablated [layer, head]:\n", ablation.raw.numpy().round(2))
assert ablation.raw[1, induction_head] > ablation.base + 0.3  # without the induction head the loss goes up
assert float(ablation.raw[1, induction_head]) == float(ablation.raw[1].max())  # more than without any other
assert ablation.raw[0, previous_head] > ablation.base + 1.0  # without the previous-token head, far up

# %% [markdown]
# Without the induction head the loss on the repeat is many times higher, more than without any other
# head of the second layer. It does not go back to chance: the other heads of that layer have become
# weaker induction heads too (their scores in the figure above), and they carry part of the prediction
# without it. Models are often redundant like this, which is why a score and an ablation together are
# more convincing than either alone.
#
# Switching off the first layer's previous-token head costs far more, although that head never looks at
# the earlier copy itself: every induction head of the second layer finds its target through what the
# previous-token head wrote there. (Other heads of the first layer that spread their attention over the
# last few positions do similar work and matter as much.)
#
# ## Confirm by patching
#
# Ablation breaks a head; **activation patching** asks whether a head carries the answer. Take two
# inputs: a *clean* one, a random half and its repeat, and a *corrupted* one, the same second half after
# a different first half (so there is nothing to copy). Run the corrupted input, but take one head's
# output from the clean run: if the loss on the second half comes back down, that head's output carries
# what the model knows from the repeat. `patch_heads(model, clean, corrupted, metric)` does it for
# every head; its `scores` are normalised so that 0 is the corrupted run and 1 the clean run.

# %%
clean = eval_ids
other = repeated_tokens(VOCAB, N_EVAL, 32, seed=456, bos=BOS, avoid=SPECIAL)
corrupted = torch.cat([clean[:, :1], other[:, 1 : N_EVAL + 1], clean[:, N_EVAL + 1 :]], dim=1)
patched = patch_heads(model, clean, corrupted, lambda logits: repeat_loss(logits, clean, N_EVAL))
print(f"loss on the second half: clean {patched.clean:.2f}, corrupted {patched.corrupted:.2f} nats")
print("recovered by patching each head [layer, head]:\n", patched.scores.numpy().round(2))
assert patched.scores[1, induction_head] > 0.3  # the induction head's output brings a good part back
assert float(patched.scores[1].min()) > float(
    patched.scores[0].max()
)  # each second-layer head beats every first-layer one
assert patched.scores[0, previous_head] < 0  # the previous-token head, patched alone, makes it worse

# %% [markdown]
# The corrupted run's loss on the second half is worse than chance: the model confidently predicts the
# tokens that followed in the *corrupted* first half. Patching the induction head alone brings back a good
# part of the clean behaviour, and so does each other head of the second layer: they share the work, as the
# ablation showed. No head of the first layer does as much, since what the heads of the first layer write is
# only *read* by the second, which still sees the corrupted first half.
#
# The previous-token head even makes things worse. Its clean output marks each position of the first half
# with the clean token before it, so the induction heads now find, for each token of the second half, the
# position that follows it in the clean sequence, and read the *corrupted* token sitting there: a
# confident wrong answer. This is the two-step circuit at work: the first layer chooses *where* the
# second layer looks, the second layer copies *what* is there.
#
# ## What you saw
#
# - `LanguageModelConfig(mlp=False)` builds attention-only blocks (`model.mlp=false` on the command line).
# - `attnkit.models.heads.head_scores` scores every head as previous-token, duplicate-token and induction
#   head, from its attention on repeated random tokens.
# - An induction head forms in the second layer, together with a previous-token head in the first, at the
#   moment the loss on repeated text falls: the two curves drop and rise together.
# - `ablate_heads` and `patch_heads` (`attnkit.models.patching`) confirm that the model's in-context
#   prediction runs through those heads.

# %%
elapsed = time.perf_counter() - start_time
print(f"this notebook ran in {elapsed:.0f} s")
