"""What the pictures show: data read back from the Figures' artists equals what they should draw."""

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnkit.models import PredictorConfig, TransformerPredictor
from attnkit.nn import MultiHeadAttention, sinusoidal_encoding
from attnkit.tasks.base import attention_weights
from attnkit.training.schedule import cosine_warmup_factor
from attnkit.viz import (
    plot_attention,
    plot_lr_schedule,
    plot_positional_encoding,
    plot_run_lr,
    plot_set_probabilities,
    plot_training_curves,
)


def _axes(fig: Figure, label: str):
    found = [ax for ax in fig.axes if ax.get_label() == label]
    assert len(found) == 1, f"no single axes {label!r} among {[ax.get_label() for ax in fig.axes]}"
    return found[0]


def test_positional_image_and_curves_equal_the_encoding():
    fig = plot_positional_encoding(dim=16, length=20, num_curves=3)
    assert isinstance(fig, Figure)
    pe = sinusoidal_encoding(20, 16).numpy()
    image = _axes(fig, "positional encoding").images[0]
    np.testing.assert_array_equal(np.asarray(image.get_array()), pe.T)  # rows: dimensions, columns: positions
    for i in range(3):
        (line,) = _axes(fig, f"dimension {i}").get_lines()
        np.testing.assert_array_equal(line.get_xdata(), np.arange(20))
        np.testing.assert_array_equal(line.get_ydata(), pe[:, i])
    assert not [ax for ax in fig.axes if ax.get_label() == "dimension 3"]
    with pytest.raises(ValueError, match="dim must be a positive integer"):
        plot_positional_encoding(dim=0)
    with pytest.raises(ValueError, match=r"num_curves must be in \[0, dim=4\]"):
        plot_positional_encoding(dim=4, num_curves=5)


def test_schedule_curve_matches_the_formula():
    fig = plot_lr_schedule(10, 100, lr=1e-3)
    line = _axes(fig, "schedule").get_lines()[0]
    x, y = line.get_xdata(), line.get_ydata()
    assert x[0] == 0 and x[-1] == 100 and len(x) == 101
    for step in (0, 1, 5, 10, 11, 37, 50, 99, 100):
        assert y[step] == pytest.approx(1e-3 * cosine_warmup_factor(step, 10, 100), abs=1e-15)
    assert y.argmax() == 10  # the peak is at the end of the warm-up
    factor = _axes(plot_lr_schedule(0, 50, steps=80), "schedule").get_lines()[0].get_ydata()
    assert factor[0] == 1.0 and factor[50] == pytest.approx(0.0) and factor[80] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="max_iters must be a positive integer"):
        plot_lr_schedule(10, 0)


def test_attention_grid_draws_each_map_with_a_shared_scale_and_the_labels():
    maps = [torch.rand(3, 4, 5).softmax(-1), torch.rand(3, 4, 5).softmax(-1)]
    queries, keys = ["a", "b", "c", "d"], ["k0", "k1", "k2", "k3", "k4"]
    fig = plot_attention(maps, queries, keys, title="two layers", query_axis="target", key_axis="source")
    for layer in range(2):
        for head in range(3):
            ax = _axes(fig, f"layer {layer + 1} head {head + 1}")
            (image,) = ax.images
            np.testing.assert_allclose(np.asarray(image.get_array()), maps[layer][head].numpy())
            assert image.get_clim() == (0.0, pytest.approx(float(max(m.max() for m in maps))))
    corner = _axes(fig, "layer 2 head 1")
    assert [t.get_text() for t in corner.get_xticklabels()] == keys
    assert [t.get_text() for t in corner.get_yticklabels()] == queries
    assert corner.get_xlabel() == "source" and corner.get_ylabel() == "target"
    colorbar = _axes(fig, "colorbar")
    assert len(fig.axes) == 2 * 3 + 1  # the maps and one colour bar for the whole grid
    assert colorbar.get_ylabel() == "attention weight"
    assert fig.get_suptitle() == "two layers"
    # one [L, H, Tq, Tk] tensor works the same; more than 40 positions get thinned tick labels
    fig = plot_attention(torch.rand(1, 2, 90, 90))
    assert len(_axes(fig, "layer 1 head 1").get_xticks()) <= 40
    with pytest.raises(ValueError, match=r"pick one example of a batch first"):
        plot_attention([torch.rand(2, 3, 4, 4)])
    with pytest.raises(ValueError, match="3 tick labels for 4 positions"):
        plot_attention([torch.rand(1, 4, 4)], ["a", "b", "c"])


def test_set_probabilities_bars():
    fig = plot_set_probabilities([0.1, 0.7, 0.2], target=1)
    bars = fig.axes[0].patches
    assert [round(b.get_height(), 6) for b in bars] == [0.1, 0.7, 0.2]
    assert bars[1].get_facecolor() != bars[0].get_facecolor()  # the true odd one stands out


class FusedOnly(TransformerPredictor):
    """A model that never computes attention weights itself (no get_attention_maps)."""

    get_attention_maps = None  # type: ignore[assignment]


def test_fused_only_model_recomputes_weights_with_the_explicit_path():
    cfg = PredictorConfig(input_dim=5, num_outputs=3, d_model=16, num_heads=2, num_layers=2, dropout=0.0)
    reference = TransformerPredictor(cfg).eval()
    model = FusedOnly(cfg).eval()
    model.load_state_dict(reference.state_dict())
    x = torch.randn(1, 7, 5)
    before = model(x)
    maps = attention_weights(model, x)
    expected = reference.get_attention_maps(x)
    assert len(maps) == 2
    for got, want in zip(maps, expected):
        assert got.shape == (1, 2, 7, 7)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got.sum(-1), torch.ones(1, 2, 7))
    torch.testing.assert_close(model(x), before)  # the hooks are gone: the model runs as before
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            assert not module._forward_hooks and not module._forward_pre_hooks
    with pytest.raises(ValueError, match="no attnkit MultiHeadAttention layer and no get_attention_maps"):
        attention_weights(torch.nn.Linear(2, 2), torch.randn(1, 2))


def _csv_column(run: Path, column: str) -> tuple[list[float], list[float]]:
    with (run / "logs" / "csv" / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get(column)]
    return [float(r["step"]) for r in rows], [float(r[column]) for r in rows]


def test_training_curves_show_the_logged_values(reverse_run: Path):
    fig = plot_training_curves(reverse_run)
    loss, acc = _axes(fig, "loss"), _axes(fig, "acc")
    lines = {line.get_label(): line for line in loss.get_lines()}
    assert set(lines) == {"train (per step)", "train (per epoch)", "val (per epoch)"}
    steps, values = _csv_column(reverse_run, "train/loss_step")
    np.testing.assert_allclose(lines["train (per step)"].get_xdata(), steps)
    np.testing.assert_allclose(lines["train (per step)"].get_ydata(), values)
    val = lines["val (per epoch)"].get_ydata()
    assert len(val) == 2  # the two epochs; the best checkpoint's final re-validation is left out
    assert {line.get_label() for line in acc.get_lines()} == set(lines)
    with pytest.raises(FileNotFoundError, match="no run folder at"):
        plot_training_curves(reverse_run.parent / "nope")
    with pytest.raises(FileNotFoundError, match=r"has no logs/csv/metrics.csv"):
        plot_training_curves(reverse_run / "checkpoints")


def test_logged_learning_rate_follows_the_schedule(reverse_run: Path):
    fig = plot_run_lr(reverse_run)
    ax = _axes(fig, "learning rate")
    lines = {line.get_label(): line for line in ax.get_lines()}
    logged = lines["logged lr-Adam"]
    steps, values = _csv_column(reverse_run, "lr-Adam")
    assert len(steps) >= 20
    np.testing.assert_allclose(logged.get_xdata(), steps)
    np.testing.assert_allclose(logged.get_ydata(), values)
    max_iters = 2 * 4000 // 32
    for step, lr in zip(steps, values):  # what the run used is the formula, step by step
        assert lr == pytest.approx(2e-3 * cosine_warmup_factor(int(step), 20, max_iters), rel=1e-6)
    (schedule,) = [line for label, line in lines.items() if label.startswith("schedule")]
    assert "warmup 20, max_iters 250" in schedule.get_label()
