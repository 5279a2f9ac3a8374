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
# # 7. A language model
#
# A decoder-only Transformer (the GPT recipe) learns to predict the next token of a text, and by
# predicting one token after another it writes text of its own. You will train one on a text file,
# measure it in bits per character against simple baselines, check what grammar it picked up, sample
# from it with temperature, top-k and top-p, and time how much the key/value cache saves when
# generating.

# %%
# ruff: noqa: E402 (the warnings filter comes before the imports that would warn)
import logging
import warnings

# Keep the output short: no Lightning info lines, no warnings (e.g. the data loader's deprecation notes).
warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("lightning.fabric").setLevel(logging.ERROR)

import math
import tempfile
import time
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

import attnkit
from attnkit.data.generators.grammar import generate_grammar_corpus
from attnkit.models.generation import top_k_filter, top_p_filter
from attnkit.tasks.lm import generate_text
from attnkit.text.tokenizers import tokenizer_from_dict

# %% [markdown]
# ## A text file
#
# The `lm` task trains on any plain UTF-8 text file: `attnkit train lm --data corpus.txt` on the
# command line, `data={"source": "corpus.txt"}` from Python. Documents are separated by blank lines
# (or are single lines, with `data.split_on="line"`); 5 % of them are held out for validation and 5 %
# for test.
#
# Here the file is written from `generate_grammar_corpus`, attnkit's generator of short English-like
# documents: about a hundred words, subject–verb agreement, *do*/*does*/*did* questions, relative
# clauses. It is not natural text, but it has real rules for a model to find.

# %%
workdir = Path(tempfile.mkdtemp(prefix="attnkit-tutorial-"))
documents = generate_grammar_corpus(6000, seed=1)
corpus = workdir / "corpus.txt"
corpus.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
print(f"{corpus.name}: {corpus.stat().st_size:,} bytes, {len(documents):,} documents\n")
print(corpus.read_text(encoding="utf-8")[:600])

# %% [markdown]
# How hard is this text to predict? A baseline that knows only how often each character occurs
# needs, on average, the **unigram entropy** `H = −Σ p(c) log₂ p(c)` bits per character (counting one
# end-of-document mark per document, as the model's measure below does):

# %%
char_counts = Counter()
for doc in documents:
    char_counts.update(doc + "\n")  # "\n": the document's end
n_chars = sum(char_counts.values())
char_unigram_bits = -sum(c / n_chars * math.log2(c / n_chars) for c in char_counts.values())
print(f"{len(char_counts)} distinct characters, unigram entropy {char_unigram_bits:.2f} bits per character")

# %% [markdown]
# ## Training
#
# `attnkit.train("lm")` trains a GPT-style model: token embeddings plus learned positions, pre-norm
# blocks of **causal** self-attention (each position sees only itself and earlier positions) and
# feed-forward layers, and an output layer tied to the embedding. Every document becomes
# `<bos> tokens <eos>`, the documents are concatenated and cut into blocks of `model.max_len`
# tokens, and the loss is the cross-entropy of the next token at every position, all positions in
# one pass (teacher forcing, as in the translation tutorial).
#
# The task's default is character level (one token per character). To fit in this notebook, this run
# uses the **word** tokenizer instead: each word, with the space before it, is one token (`" dogs"`),
# so a document has roughly a fifth as many tokens as characters, and an epoch takes a fraction of
# the steps. The model is smaller than the default too (width 64, 2 layers, 4 heads, a context of 128 tokens),
# trained for 6 epochs of batches of 8 blocks.

# %%
result = attnkit.train(
    "lm",
    output_dir=str(workdir),
    seed=0,
    data={"source": str(corpus), "tokenizer": "word", "cache_dir": str(workdir / "cache")},
    model={"d_model": 64, "num_layers": 2, "num_heads": 4, "dim_feedforward": 256, "max_len": 128},
    optim={"lr": 5e-3, "warmup": 20},
    # report=False: skip the run's report.html (see the "Looking inside" page) to save time.
    trainer={"max_epochs": 6, "batch_size": 8, "progress_bar": False, "threads": 1, "report": False},
)
metrics = result.metrics
model = result.model.eval()
tokenizer = tokenizer_from_dict(result.module.hparams["artifacts"]["tokenizer"])
print(f"vocabulary: {tokenizer.vocab_size} tokens, e.g. {tokenizer.tokens('Does the dog sleep?')}")
print(
    f"test: loss {metrics['test/loss']:.3f} nats per token, perplexity {metrics['test/ppl']:.1f}, "
    f"next-token accuracy {metrics['test/acc']:.1%}, {metrics['test/bpc']:.3f} bits per character"
)

# %% [markdown]
# The loss is per **token** (a word here), so it cannot be compared with a character model's.
# **Bits per character** can: the summed loss of the test text, converted to bits, divided by its
# number of characters. It is the number of bits a compressor driven by the model would need per
# character. A fairer baseline for a word model than the character unigram is the **word unigram**:
# a model that knows how often each word occurs but ignores the context.

# %%
token_counts = Counter()
for doc in documents:
    token_counts.update(tokenizer.encode(doc, add_eos=True))
n_tokens = sum(token_counts.values())
word_unigram_bits = -sum(c / n_tokens * math.log2(c / n_tokens) for c in token_counts.values())
word_unigram_bpc = word_unigram_bits * n_tokens / n_chars
print(f"character unigram  {char_unigram_bits:.2f} bits per character")
print(f"word unigram       {word_unigram_bpc:.2f} bits per character ({word_unigram_bits:.2f} bits per token)")
print(f"the model          {metrics['test/bpc']:.2f} bits per character")
print(f"({n_chars / n_tokens:.1f} characters per word token)")
assert char_unigram_bits > 4 and word_unigram_bpc < 1.5 and metrics["test/bpc"] < 0.9
assert 4 < n_chars / n_tokens < 6

# %% [markdown]
# Knowing the words cuts the cost from over four bits per character to under 1.5; the model, which
# also uses the context, needs well under one. (The [default character-level run](../tasks/lm.md), which must
# also learn spelling, reaches 0.90 on the built-in corpus in about two minutes.)
#
# ## What did it learn?
#
# The next-token distribution after a prompt shows whether the model learned a rule. The grammar
# has subject–verb agreement (*the dog sleeps*, *the dogs sleep*), the base form after *does*/*did*
# (*does the dog sleep*), and present-tense relative clauses (*the dog that sleeps*). For each prompt,
# the probability the model gives to the 15 verbs in their base form, their `-s` form and their past
# tense:

# %%
verbs = (
    ("see", "sees", "saw"), ("like", "likes", "liked"), ("chase", "chases", "chased"),
    ("follow", "follows", "followed"), ("find", "finds", "found"), ("watch", "watches", "watched"),
    ("help", "helps", "helped"), ("feed", "feeds", "fed"), ("sleep", "sleeps", "slept"), ("run", "runs", "ran"),
    ("sing", "sings", "sang"), ("wait", "waits", "waited"), ("smile", "smiles", "smiled"),
    ("laugh", "laughs", "laughed"), ("hide", "hides", "hid"),
)  # fmt: skip
base, third, past = zip(*verbs)


def next_token_probs(prompt):
    """The model's distribution over the token that follows `prompt` (a new document)."""
    ids = torch.tensor([tokenizer.encode(prompt, add_bos=True)])
    with torch.no_grad():
        return model(ids)[0, -1].softmax(dim=-1)


def mass(probs, words):
    return sum(float(probs[tokenizer.token_to_id(" " + word)]) for word in words)


print(f"{'prompt':16} {'base form':>10} {'-s form':>10} {'past':>10}")
verb_mass = {}
for prompt in ["The dog", "The dogs", "Does the dog", "The dog that", "The dogs that"]:
    probs = next_token_probs(prompt)
    verb_mass[prompt] = {"base": mass(probs, base), "third": mass(probs, third), "past": mass(probs, past)}
    print(f"{prompt:16}" + "".join(f"{p:10.3f}" for p in verb_mass[prompt].values()))
assert verb_mass["The dog"]["third"] > 3 * verb_mass["The dog"]["base"]
assert verb_mass["The dogs"]["base"] > 3 * verb_mass["The dogs"]["third"]
assert verb_mass["Does the dog"]["base"] > 10 * verb_mass["Does the dog"]["third"]
present = {prompt: m["base"] + m["third"] for prompt, m in verb_mass.items()}
assert present["The dog that"] > 0.5 and present["The dogs that"] > 0.5  # relative clauses: the present tense
assert verb_mass["The dog that"]["third"] > verb_mass["The dog that"]["base"]

# %% [markdown]
# After *The dog* the present tense comes as *sleeps*, after *The dogs* as *sleep*; after *Does the
# dog* almost only the base form; after *that* the present tense dominates (relative clauses are
# always in the present in this grammar). Agreement and *do*-support are learned, though not
# perfectly: some probability still goes to forms the grammar never uses there, and agreement across
# *that* is the weakest (a small model may split *The dogs that* between *sleep* and *sleeps*).
#
# ## Generating text
#
# To generate, the model predicts a distribution for the next token, one token is chosen and
# appended, and the loop repeats until `<eos>` (the end of a document) or a length limit.
# `model.generate(prompt_ids, max_new_tokens, temperature=, top_k=, top_p=, generator=)` runs this
# loop on token ids; `attnkit.tasks.lm.generate_text(model, tokenizer, prompt, ...)` wraps it for
# text (the same as `attnkit generate RUN --prompt ...`). How the token is *chosen* is up to you:
#
# - **Greedy** (`temperature=0`): always the most likely token. Deterministic, and it tends to be
#   bland: the same text every time.
# - **Sampling** (`temperature > 0`): draw a token at random from the distribution. The logits are
#   first divided by the temperature `T`: `T < 1` sharpens the distribution towards the likely
#   tokens, `T > 1` flattens it so that unlikely tokens come up more often.
# - **Top-k**: before drawing, keep only the `k` most likely tokens.
# - **Top-p** (nucleus): keep the smallest set of most likely tokens whose probability adds up to at
#   least `p`; how many that is depends on how sure the model is at this step.
#
# A seeded generator (`seed=1`) makes the samples reproducible. Three samples per setting, all
# continuing *The old*:

# %%
settings = {
    "greedy": dict(temperature=0.0),
    "T = 0.5": dict(temperature=0.5),
    "T = 1": dict(temperature=1.0),
    "T = 1.5": dict(temperature=1.5),
    "T = 1, top-k = 5": dict(temperature=1.0, top_k=5),
    "T = 1, top-p = 0.5": dict(temperature=1.0, top_p=0.5),
}
for name, options in settings.items():
    print(name)
    samples = generate_text(model, tokenizer, "The old", max_new_tokens=40, num_samples=3, seed=1, **options)
    for text in samples:
        print("   ", text)

# %% [markdown]
# Greedy gives one text three times. At `T = 0.5` the samples are short and plain; at `T = 1` they
# are as varied as the model's distribution, mostly grammatical with some mistakes; at `T = 1.5`
# they lose the grammar, and sometimes pick tokens that only make sense elsewhere (a capitalised word
# without its leading space belongs at the start of a document). Top-k and top-p cut off that
# unreliable tail and keep sampling's variety.
#
# How the knobs reshape one distribution: the next token after *Does the dog*, its 15 most likely
# tokens under the model (`T = 1`), then after dividing the logits by a temperature, and after the
# top-k and top-p filters of `attnkit.models.generation` (the filtered tokens get probability 0;
# the rest is renormalised):

# %%
ids = torch.tensor([tokenizer.encode("Does the dog", add_bos=True)])
with torch.no_grad():
    logits = model(ids)[:, -1]  # [1, V]
shown = logits[0].argsort(descending=True)[:15]
labels = [repr(tokenizer.id_to_token(int(i))) for i in shown]
views = {
    "T = 1 (the model)": logits,
    "T = 0.5": logits / 0.5,
    "T = 2": logits / 2.0,
    "top-k = 5": top_k_filter(logits, 5),
    "top-p = 0.5": top_p_filter(logits, 0.5),
}
fig, axes = plt.subplots(1, len(views), figsize=(15, 4), sharey=True)
kept = {}
for ax, (name, view) in zip(axes, views.items()):
    probs = view.softmax(dim=-1)[0]
    kept[name] = int((probs > 0).sum())
    ax.barh(np.arange(len(shown)), probs[shown].numpy(), color="tab:blue")
    ax.set_title(f"{name}\n{kept[name]} tokens possible", fontsize=10)
    ax.set_xlabel("probability")
    ax.set_xlim(0, 0.5)
axes[0].set_yticks(np.arange(len(shown)), labels)
axes[0].invert_yaxis()
fig.suptitle("next token after 'Does the dog'", fontsize=11)
fig.tight_layout()
plt.show()
print({name: count for name, count in kept.items()})
assert kept["top-k = 5"] == 5 and 1 < kept["top-p = 0.5"] < 15

# %% [markdown]
# Temperature keeps every token possible and only changes how likely each is: at `T = 0.5` the top
# tokens gain, at `T = 2` the distribution is nearly flat. Top-k keeps exactly 5, however the
# probability is spread. Top-p keeps as many tokens as it takes to cover half the probability: few
# when the model is sure, more when it hesitates between many verbs, as here.
#
# One number tells the settings apart: the average **surprise** of the samples, the model's own
# loss on them in bits per token. At `T = 1` the samples come from the model's distribution, so
# their surprise is about the model's loss on real text; lower temperatures and the filters pick
# likelier tokens. Twenty samples per setting:


# %%
def surprise(texts):
    """Mean over `texts` of the model's loss per token, in bits (each text read as a document)."""
    bits = []
    for text in texts:
        ids = torch.tensor([tokenizer.encode(text, add_bos=True, add_eos=True)])
        with torch.no_grad():
            log_probs = model(ids)[0, :-1].log_softmax(dim=-1)
        bits.append(-log_probs.gather(1, ids[0, 1:, None]).mean().item() / math.log(2))
    return sum(bits) / len(bits)


test_bits = metrics["test/loss"] / math.log(2)
print(f"{'':22} {'bits per token':>15} {'mean length':>12}")
print(f"{'real text (test loss)':22} {test_bits:15.2f}")
surprises, lengths = {}, {}
for name, options in settings.items():
    if name != "greedy":
        samples = generate_text(model, tokenizer, ["The old"], max_new_tokens=40, num_samples=20, seed=1, **options)
        surprises[name] = surprise(samples)
        lengths[name] = sum(len(text) for text in samples) / len(samples)
        print(f"{name:22} {surprises[name]:15.2f} {lengths[name]:8.0f} chars")
assert surprises["T = 0.5"] < surprises["T = 1"] < surprises["T = 1.5"]
assert surprises["T = 1, top-k = 5"] < surprises["T = 1"] and surprises["T = 1, top-p = 0.5"] < surprises["T = 1"]
assert abs(surprises["T = 1"] - test_bits) < 0.5
assert lengths["T = 0.5"] < lengths["T = 1"]

# %% [markdown]
# ## What the key/value cache saves
#
# A naive generation loop feeds the whole text through the model at every step, to get the
# distribution of the next token, recomputing every position it computed the step before. But in a
# causal model earlier positions never change when a token is appended: their keys and values in
# every layer stay the same. The **key/value cache** keeps them; each step then runs only the one
# new token through the layers, and its single query attends to the cached keys and values.
# Generating `N` tokens after a prompt of `P` costs about `P + N` token positions instead of
# `P·N + N²/2`.
#
# `model.generate(..., use_cache=False)` switches the cache off. Both ways must give exactly the same
# tokens. The timing below fills the model's context of 128 tokens with greedy decoding
# (`stop_at_eos=False`, so that both runs take every step; `on_token` records when each step's
# tokens arrive), once for a single prompt and once for a batch of 8 prompts generated together.
# The runs alternate, three of each, and the fastest of each is kept, to damp the noise of a busy
# machine.

# %%
prompts = ["The old owl", "Does the dog", "Two cats", "When Anna", "The girls", "A fox", "Many owls", "Did Ben"]


def timed_generation(prompt_ids, use_cache):
    """The generated ids, the total seconds, and the seconds of each step."""
    stamps = []
    start = time.perf_counter()
    out = model.generate(
        prompt_ids,
        model.config.max_len - max(len(ids) for ids in prompt_ids),  # fill the context
        temperature=0.0,
        use_cache=use_cache,
        stop_at_eos=False,
        on_token=lambda tokens: stamps.append(time.perf_counter()),
    )
    return out, stamps[-1] - start, np.diff([start, *stamps])


seconds, per_step = {}, {}
for batch in (1, 8):
    prompt_ids = [tokenizer.encode(prompt, add_bos=True) for prompt in prompts[:batch]]
    timed_generation(prompt_ids, True)  # warm-up
    runs = {True: [], False: []}
    for _ in range(3):
        for use_cache in (True, False):
            runs[use_cache].append(timed_generation(prompt_ids, use_cache))
    assert all(torch.equal(run[0], runs[True][0][0]) for use_cache in runs for run in runs[use_cache])
    for use_cache in (True, False):
        seconds[batch, use_cache] = min(run[1] for run in runs[use_cache])
        per_step[batch, use_cache] = np.min([run[2] for run in runs[use_cache]], axis=0)  # fastest run, per step
    n_new = len(per_step[batch, True])

print(f"identical tokens with and without the cache; {n_new} new tokens per prompt, e.g.")
print(repr(tokenizer.decode(runs[True][0][0][0].tolist(), skip_special=False)[:150]), "...")
print(f"\n{'batch':>5} {'with cache':>11} {'without':>11} {'speed-up':>9}")
speedup = {}
for batch in (1, 8):
    speedup[batch] = seconds[batch, False] / seconds[batch, True]
    with_cache, without = seconds[batch, True] * 1000, seconds[batch, False] * 1000
    print(f"{batch:>5} {with_cache:8.0f} ms {without:8.0f} ms {speedup[batch]:8.1f}x")
# Token positions run through the model per row: the prompt, then one per step, or the whole text per step.
length = len(tokenizer.encode(prompts[0], add_bos=True))
work_cached = length + (n_new - 1)
work_uncached = length + sum(range(length + 1, length + n_new))
print(f"\npositions computed for '{prompts[0]}': {work_cached} with the cache, {work_uncached:,} without")
# The times are printed, not checked (they vary on a busy machine); the work saved is exact:
assert 60 < work_uncached / work_cached < 70

# %% [markdown]
# The text after the first `<eos>` is the model going on into new documents, which is why
# generation normally stops there. Without the cache the model computes about 64 times as many
# token positions, yet for a single prompt the speed-up is much smaller: for a model this small a
# step's cost is mostly fixed overhead (Python, launching many small operations), which the cache
# does not remove. In a batch of 8 that overhead is shared by 8 texts, the real computation
# dominates, and the cache saves much more. Larger models gain more too: the benchmark on the
# [generating](../generating.md) page measures 8.4× for one prompt and 256 tokens with a 6-layer,
# width-384 model on one CPU thread.
#
# Per step, for the batch of 8, the time of each step against the position of the new tokens:

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
positions = np.arange(model.config.max_len - n_new, model.config.max_len)
for use_cache, label in ((False, "without the cache"), (True, "with the cache")):
    ax.plot(positions, per_step[8, use_cache] * 1000, label=label)
ax.set_xlabel("position of the new tokens")
ax.set_ylabel("ms per step")
ax.set_ylim(bottom=0)
ax.legend()
ax.set_title("greedy decoding of 8 prompts, one token each per step")
fig.tight_layout()
plt.show()
first, last = per_step[8, False][1:11].mean(), per_step[8, False][-10:].mean()
print(f"without the cache: {first * 1000:.1f} ms per step at the start, {last * 1000:.1f} ms at the end")
cached_first, cached_last = per_step[8, True][1:11].mean(), per_step[8, True][-10:].mean()
print(f"with the cache:    {cached_first * 1000:.1f} ms per step at the start, {cached_last * 1000:.1f} ms at the end")

# %% [markdown]
# Without the cache, a step's time grows with the length of the text, since every step recomputes
# all earlier positions; with it the time per step stays nearly flat (the attention over the cached
# keys grows too, but it is a small part of a step). The price of the cache is memory: two
# `[positions, width]` tensors per layer and row, which for large models and long texts is what
# limits the batch size.
#
# ## What you saw
#
# - A language model is trained on any text file with `attnkit.train("lm", data={"source": ...})`;
#   bits per character compare it with simple baselines whatever its tokenizer.
# - Next-token distributions show what it learned (agreement, *do* + base form).
# - Greedy decoding is deterministic; temperature sharpens or flattens the distribution, top-k and
#   top-p cut off its unlikely tail before sampling.
# - The key/value cache makes each generation step process one token instead of the whole text,
#   with exactly the same output.
