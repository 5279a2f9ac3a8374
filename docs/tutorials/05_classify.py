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
# # 5. Text classification
#
# An encoder reads a short text and a linear head on top of it picks a label. You will see how
# texts of different lengths become one padded batch, check that the model's mean pooling ignores
# the padding, train a classifier on attnkit's built-in "reviews", and look at what it attends to,
# negations ("not great") included.

# %%
# ruff: noqa: E402 (the warnings filter comes before the imports that would warn)
import logging
import warnings

# Keep the output short: no Lightning info lines, no warnings (e.g. tqdm's about Jupyter widgets).
warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
logging.getLogger("lightning.fabric").setLevel(logging.ERROR)

import tempfile
from pathlib import Path

import torch

import attnkit
from attnkit.data import ClassifyDataConfig
from attnkit.data.classify.module import TextClassificationDataModule
from attnkit.models import ClassifierConfig, SequenceClassifier
from attnkit.viz import attention_examples, explore, plot_run_attention

# %% [markdown]
# ## The data: generated "reviews"
#
# The `classify` task trains, by default, on a corpus it generates itself (no download): short
# movie "reviews" made of neutral filler sentences and one or three opinion sentences. An opinion
# is carried by an adjective ("clever", "boring") and flipped by a negator just before it ("not",
# "never", "hardly", "far from"); the label is the majority opinion. **This is not a sentiment
# benchmark**: fewer than 200 distinct words, templated grammar, no sarcasm. It checks that the
# pipeline learns, and it has one thing that needs context: the same adjective means opposite
# things with and without a negator, so counting words cannot solve it (the generator's
# documentation gives about 68 % for logistic regression on word counts). For real reviews, the
# task reads IMDB or your own CSV files.
#
# The data module splits the 6,000 texts 80/10/10, builds a vocabulary from the training texts and
# encodes every text as word ids:

# %%
datamodule = TextClassificationDataModule(ClassifyDataConfig(), batch_size=64)
datamodule.setup()
splits = datamodule.splits
print("sizes:", splits.sizes(), "| labels:", splits.label_names, "| vocabulary:", datamodule.vocab_size, "words")
assert datamodule.vocab_size < 200
for text, label in zip(splits.train_texts[:3], splits.train_labels[:3]):
    print(f"\n[{splits.label_names[label]}] {text}")
assert "far from that messy" in splits.train_texts[1] and "did not know" in splits.train_texts[1]

# %% [markdown]
# Read them as the model must. The second text is positive although it contains "messy": "far from
# that messy" is a negated negative. Its "did not know anything" negates nothing that matters. The
# third holds a negative opinion ("really boring") among positive ones: the majority wins.
#
# ## Padding and the mask
#
# Texts have different lengths, but a batch is one tensor. The shorter texts are filled up with the
# `<pad>` id (0) to the length of the longest, and a boolean mask says which positions are real
# tokens (True) and which are padding (False):

# %%
short = "I saw it on a plane. The acting was not great."
ids, mask = datamodule.encode_texts([short, splits.train_texts[0]])
print("ids: ", tuple(ids.shape))
print("words of the short text:", [datamodule.tokenizer.id_to_token(int(i)) for i in ids[0, :14]])
print("its ids: ", ids[0, :16].tolist(), "...")
print("its mask:", mask[0, :16].int().tolist(), "...")

# %% [markdown]
# The mask goes into every attention layer as a key-padding mask: no real token attends to a pad.
# The classifier (`attnkit.models.SequenceClassifier`) then turns the encoder's `T` output vectors
# into one sentence vector by **mean pooling over the real tokens only**:
# `Σ mask[t]·h[t] / Σ mask[t]`. A plain mean over all `T` positions would mix in the outputs at the
# pad positions, so a text's vector, and its prediction, would depend on how long its batch-mates
# are.
#
# We check this on an untrained model (the property is built in, not learned): the short text alone
# (no padding), in a batch with a longer text, and padded by hand to 200 positions. Forward hooks
# (plain PyTorch) catch the sentence vector on its way into the head, and the encoder's outputs
# for the plain mean.

# %%
torch.manual_seed(0)
config = ClassifierConfig(
    vocab_size=datamodule.vocab_size,
    num_classes=2,
    max_len=datamodule.max_len,
    pad_id=datamodule.pad_id,
    d_model=64,
    num_heads=4,
    num_layers=2,
    dim_feedforward=128,
)
model = SequenceClassifier(config).eval()
caught = {}
model.head.register_forward_hook(lambda module, inputs, output: caught.update(pooled=inputs[0]))
model.encoder.register_forward_hook(lambda module, inputs, output: caught.update(outputs=output))

alone_ids, alone_mask = datamodule.encode_texts([short])  # [1, 13]: no padding
n = alone_ids.shape[1]
extra = 200 - n
padded_ids = torch.cat([alone_ids, torch.full((1, extra), datamodule.pad_id)], dim=1)
padded_mask = torch.cat([alone_mask, torch.zeros(1, extra, dtype=torch.bool)], dim=1)

results = {}
with torch.no_grad():
    for name, (x, m) in {
        "alone": (alone_ids, alone_mask),
        "in a batch": (ids, mask),
        "padded to 200": (padded_ids, padded_mask),
    }.items():
        logits = model(x, m)[0]
        results[name] = (caught["pooled"][0], logits, caught["outputs"][0].mean(0))
        print(f"{name:>13}: {x.shape[1]:3d} positions, logits {[round(v, 4) for v in logits.tolist()]}")

vector, logits, plain = results["alone"]
for name in ("in a batch", "padded to 200"):
    other_vector, other_logits, other_plain = results[name]
    print(
        f"{name}: sentence vector differs by {(other_vector - vector).abs().max():.1e}, "
        f"a plain mean over all positions by {(other_plain - plain).abs().max():.2f}"
    )
    assert torch.allclose(other_vector, vector, atol=1e-5) and torch.allclose(other_logits, logits, atol=1e-5)
    assert (other_plain - plain).abs().max() > 0.1

# %% [markdown]
# The masked mean gives the same sentence vector and the same logits whatever the padding (the
# differences are float rounding); the plain mean changes with it. The same holds for the
# `[CLS]` pooling (`model.pooling=cls`), which reads one position that never attends to a pad.
#
# ## Training
#
# The default run (5 epochs, batch 32, learning rate `1e-3`, dropout 0.1) reaches 68.7 % test
# accuracy, about what word counts give. Here the same model (width 64, 4 heads, 2 layers, learned
# positions) trains for 6 epochs with batches of 64, a higher learning rate (`3e-3`) and no
# dropout; on this small, noise-free corpus that does better, as the printed accuracy shows.

# %%
workdir = Path(tempfile.mkdtemp(prefix="attnkit-tutorial-"))
result = attnkit.train(
    "classify",
    output_dir=str(workdir),
    seed=42,
    model={"dropout": 0.0},
    optim={"lr": 3e-3},
    # report=False: skip the run's report.html (see the "Looking inside" page) to save time.
    trainer={"max_epochs": 6, "batch_size": 64, "progress_bar": False, "threads": 1, "report": False},
)
print({name: round(value, 4) for name, value in result.metrics.items()})
assert result.metrics["test/acc"] > 0.75

# %% [markdown]
# The test accuracy (600 test texts, half of each label) is well above the 68 % of word counts:
# the model uses word order. It is not 100 % either, although the label is a deterministic
# function of the text: there is room left.
#
# ## Predictions
#
# `attnkit.predict_file` reads a file of texts (one per line) and yields one record per text with
# the predicted label and its probability, encoded with the run's vocabulary. Pairs of texts that
# differ by one negator show whether the model reads it:

# %%
probes = [
    "I saw it on a plane. The acting was great.",
    "I saw it on a plane. The acting was not great.",
    "I saw it on a plane. The acting was terrible.",
    "I saw it on a plane. The acting was not terrible.",
    "It came out in 2012. I thought the plot was clever.",
    "It came out in 2012. I thought the plot was never clever.",
]
probe_file = workdir / "probes.txt"
probe_file.write_text("\n".join(probes) + "\n")
records = list(attnkit.predict_file(result.run_dir, probe_file))
for text, record in zip(probes, records):
    print(f"{record['label']:>8} {record['probability']:.2f}  {text}")
labels = [record["label"] for record in records]
assert labels == ["positive", "negative", "negative", "positive", "positive", "negative"]

# %% [markdown]
# Each negator flips the prediction: the model does not just count opinion words.
#
# ## What the classifier attends to
#
# `plot_run_attention` draws the attention maps of a trained run for a text: 2 layers (rows) × 4
# heads (columns), queries down, keys across, labelled with the words.

# %%
plot_run_attention(result.run_dir, text=probes[1])

# %% [markdown]
# `attnkit.viz.explore(run, text)` shows the same attention inline, in the explorer that
# `attnkit explore RUN` serves: the **head view** (hover a token to highlight what it attends to, or what
# attends to it), the **matrix** and the **model view** of every layer and head (tabs at the top). Here it
# is a snapshot of one input, with its data inside the notebook; `attnkit explore RUN` in a terminal lets
# you type others.
# For a classifier the side panel gives the class probabilities and, for the layer and head chosen, the
# attention of the pooled representation over the words.

# %%
explore(result.run_dir, probes[1], layer=1)

# %% [markdown]
# In layer 1 the maps are almost flat: each word takes a near-uniform average of the sentence. In
# layer 2 each head sends nearly every word to one column (a bright vertical stripe): some heads to
# the opinion word "great", the others to the negator "not" in front of it. With mean pooling on
# top, the sentence vector is then mostly a summary of these two words, read in context. Which
# column each head of layer 2 looks at most, averaged over the queries:

# %%
(example,) = attention_examples(result.run_dir, texts=[probes[1]])
layer2 = example.maps[1]  # [4 heads, T queries, T keys]
favourite = [example.key_labels[int(k)] for k in layer2.mean(1).argmax(-1)]
print("layer 2, most attended word per head:", favourite)
assert set(favourite) == {"not", "great"}

# %% [markdown]
# One sentence is an anecdote. Over the 600 test texts, we measure the attention each word
# receives, relative to a uniform share: the weight it gets, averaged over heads and over the real
# query positions, times the text's length `T`. 1 means "as much as any word", 5 means five times
# its share. Averaged over all occurrences of a word (at least 20), the top of the list tells which
# words a layer looks at. The corpus's opinion words (its 32 adjectives and the negators, from its
# generator) are starred.

# %%
adjectives = {
    *("great", "excellent", "wonderful", "brilliant", "superb", "enjoyable", "moving", "delightful"),
    *("fantastic", "charming", "clever", "gripping", "beautiful", "funny", "memorable", "solid"),
    *("awful", "terrible", "boring", "dull", "bad", "horrible", "weak", "clumsy", "tedious"),
    *("disappointing", "predictable", "dreadful", "silly", "forgettable", "messy", "bland"),
}
negators = {"not", "never", "hardly", "far", "from"}
opinion_words = adjectives | negators

trained = result.model.eval()
test_ids, test_mask = datamodule.encode_texts(splits.test_texts)
with torch.no_grad():
    maps = trained.get_attention_maps(test_ids, test_mask)  # per layer [600, 4 heads, T, T]
real = test_ids[test_mask]  # the word ids of all real tokens
count = torch.bincount(real, minlength=datamodule.vocab_size)
most_attended = {}
for layer, weights in enumerate(maps, start=1):
    received = (weights.mean(1) * test_mask[:, :, None]).sum(1)  # [600, T]: summed over real queries
    relative = received[test_mask]  # = mean over real queries × T, one value per real token
    total = torch.zeros(datamodule.vocab_size).index_add_(0, real, relative)
    mean = torch.where(count >= 20, total / count.clamp_min(1), torch.zeros(()))
    top = mean.argsort(descending=True)[:12].tolist()
    most_attended[layer] = [(datamodule.tokenizer.id_to_token(i), float(mean[i])) for i in top]
    starred = [(f"{w}*" if w in opinion_words else w, v) for w, v in most_attended[layer]]
    print(f"layer {layer}: " + ", ".join(f"{w} {v:.1f}" for w, v in starred))

# %% [markdown]
# Layer 1 leans towards the same words, but only slightly: its top values stay close to 1. In
# layer 2 the most attended words are opinion adjectives and negators, each getting several times
# its share. So the first layer mostly mixes each word with its sentence, and the second picks out
# the words that decide the label. Attention weights are not a full explanation of a prediction
# (the values and the feed-forward layers matter too), but here they show where the model gathers
# its evidence.

# %%
assert max(v for _, v in most_attended[1]) < 2.0
assert sum(w in opinion_words for w, _ in most_attended[2]) >= 9
assert min(v for _, v in most_attended[2]) > 3.0
