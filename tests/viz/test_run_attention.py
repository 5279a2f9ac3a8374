"""Attention maps of trained runs: what each task hands to the plot is the model's own weights."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnkit.errors import CheckpointError
from attnkit.models import TransformerPredictor
from attnkit.tasks import load_run
from attnkit.tasks.base import Task
from attnkit.viz import attention_examples, plot_attention_example, plot_run_attention


def _check_figure(fig, example):
    """Every drawn map equals the example's map; the tick labels are the example's labels."""
    num_layers, num_heads = len(example.maps), example.maps[0].shape[0]
    for layer in range(num_layers):
        for head in range(num_heads):
            (ax,) = [a for a in fig.axes if a.get_label() == f"layer {layer + 1} head {head + 1}"]
            np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), example.maps[layer][head].numpy())
    (corner,) = [a for a in fig.axes if a.get_label() == f"layer {num_layers} head 1"]
    assert [t.get_text() for t in corner.get_yticklabels()] == example.query_labels
    assert [t.get_text() for t in corner.get_xticklabels()] == example.key_labels


def _rows_sum_to_one(maps):
    for m in maps:
        torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:-1]))


def test_reverse_maps_are_the_models_weights_for_the_input(reverse_run: Path):
    run = load_run(reverse_run)
    text = "3 1 4 1 5 9 2 6"
    (example,) = attention_examples(run, texts=[text])
    x = F.one_hot(torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]]), 10).float()
    expected = run.module.model.get_attention_maps(x)
    assert len(example.maps) == len(expected) == 1
    torch.testing.assert_close(example.maps[0], expected[0][0])
    assert example.maps[0].shape == (1, 8, 8)
    _rows_sum_to_one(example.maps)
    assert example.query_labels == example.key_labels == text.split()
    predicted = run.task.predict(run.module, [text])[0]
    assert example.title.endswith(f"predicted {predicted}")
    _check_figure(plot_attention_example(example), example)
    # a trained reverse model attends from position i to the mirrored position T-1-i
    assert (example.maps[0][0].argmax(-1) == torch.arange(7, -1, -1)).float().mean() >= 0.75


def test_reverse_validation_example_and_bad_inputs(reverse_run: Path):
    run = load_run(reverse_run)
    datamodule = run.task.build_datamodule(run.config)
    datamodule.setup("validate")
    symbols = datamodule.splits["val"][5][0]
    (by_index,) = attention_examples(run, indices=[5])
    (by_text,) = attention_examples(run, texts=[" ".join(str(int(s)) for s in symbols)])
    torch.testing.assert_close(by_index.maps[0], by_text.maps[0])
    assert by_index.title.startswith("reverse, validation example 5")
    with pytest.raises(ValueError, match="the input has 9 symbols, longer than the 8 this model was trained on"):
        attention_examples(run, texts=["1 2 3 4 5 6 7 8 9"])
    with pytest.raises(ValueError, match=r"validation example 128 out of range \(there are 128\)"):
        attention_examples(run, indices=[128])
    with pytest.raises(ValueError, match="must be integers separated by spaces"):
        attention_examples(run, texts=["a b c"])
    with pytest.raises(ValueError, match="not both"):
        plot_run_attention(run, text="1 2", index=0)
    with pytest.raises(CheckpointError, match=r"no model at .*no-such-run: nothing is there"):
        plot_run_attention(reverse_run.parent / "no-such-run")


def test_fused_only_run_still_plots(reverse_run: Path):
    """A model without get_attention_maps: the weights are recomputed on the explicit path."""
    run = load_run(reverse_run)
    (reference,) = attention_examples(run, texts=["1 2 3 4 5 6 7 0"])

    class FusedOnly(TransformerPredictor):
        get_attention_maps = None  # type: ignore[assignment]

    run.module.model.__class__ = FusedOnly
    assert not callable(getattr(run.module.model, "get_attention_maps", None))
    (example,) = attention_examples(run, texts=["1 2 3 4 5 6 7 0"])
    torch.testing.assert_close(example.maps[0], reference.maps[0])
    _check_figure(plot_attention_example(example), example)


def test_anomaly_maps_and_probabilities(anomaly_run: Path):
    run = load_run(anomaly_run)
    examples = attention_examples(run, indices=[0, 3])
    datamodule = run.task.build_datamodule(run.config)
    datamodule.setup("validate")
    for index, example in zip((0, 3), examples):
        x, target = datamodule.val_dataset[index]
        expected = run.module.model.get_attention_maps(x[None])
        assert len(example.maps) == 2 and example.maps[0].shape == (4, 10, 10)
        for got, want in zip(example.maps, expected):
            torch.testing.assert_close(got, want[0])
        _rows_sum_to_one(example.maps)
        probs = run.module(x[None]).softmax(-1)[0]
        np.testing.assert_allclose(example.probabilities, probs.detach().numpy(), rtol=1e-5)
        assert example.target == int(target)
        assert example.query_labels[example.target] == f"{example.target}*"
        assert f"true {example.target}" in example.title
        _check_figure(plot_attention_example(example), example)
    with pytest.raises(FileNotFoundError, match="neither a test-set index nor a file"):
        attention_examples(run, texts=["missing.pt"])


def test_anomaly_sets_from_a_file(anomaly_run: Path, tmp_path: Path):
    run = load_run(anomaly_run)
    sets = torch.randn(2, 10, 64)
    torch.save({"sets": sets}, tmp_path / "sets.pt")
    examples = attention_examples(run, texts=[str(tmp_path / "sets.pt"), "4"])  # a file of 2 sets, test set 4
    assert len(examples) == 3 and examples[1].target is None
    artifacts = run.hparams["artifacts"]  # raw features, standardised as the run's training features were
    standardized = (sets - torch.tensor(artifacts["mean"])) / torch.tensor(artifacts["std"])
    torch.testing.assert_close(examples[1].maps[1], run.module.model.get_attention_maps(standardized[1:2])[1][0])
    datamodule = run.task.build_datamodule(run.config)
    datamodule.setup("test")
    x, target = datamodule.test_dataset[4]
    assert examples[2].title.startswith("anomaly, test set 4:") and examples[2].target == int(target)
    torch.testing.assert_close(examples[2].maps[0], run.module.model.get_attention_maps(x[None])[0][0])
    with pytest.raises(ValueError, match=r"validation set 16 out of range \(there are 16\)"):
        attention_examples(run, indices=[16])


def test_classify_maps_follow_the_tokens(classify_run: Path):
    run = load_run(classify_run)
    text = "The acting was NOT good, zyzzyva!"
    (example,) = attention_examples(run, texts=[text])
    datamodule = run.task.build_datamodule(run.config, run.hparams["artifacts"])
    ids, mask = datamodule.encode_texts([text])
    expected = run.module.model.get_attention_maps(ids, mask)
    assert example.maps[0].shape == (2, 8, 8)
    torch.testing.assert_close(example.maps[0], expected[0][0])
    _rows_sum_to_one(example.maps)
    tokenizer = datamodule.tokenizer
    words = ["the", "acting", "was", "not", "good", ",", "zyzzyva", "!"]
    assert example.key_labels == [w if w in tokenizer else "<unk>" for w in words]
    assert example.key_labels[0] == "the" and example.key_labels[6] == "<unk>"
    _check_figure(plot_attention_example(example), example)
    (val,) = attention_examples(run, indices=[2])
    assert val.title.startswith("classify, validation example 2:") and ", true " in val.title
    with pytest.raises(ValueError, match="the input has 30 tokens but this model reads at most max_len=24"):
        attention_examples(run, texts=["word " * 30])


def test_task_without_attention_hook_says_so():
    class Plain(Task):
        name = "plain"

    with pytest.raises(NotImplementedError, match="task 'plain' cannot plot attention maps yet"):
        Plain().attention_examples(None, ["x"])  # type: ignore[arg-type]
