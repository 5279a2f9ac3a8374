"""`attnkit plot ...` and `attnkit report` from the command line."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from click.testing import CliRunner
from matplotlib.image import imread

from attnkit.cli import main


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_plot_attention_through_the_real_entry_point(reverse_run: Path, tmp_path: Path):
    out = tmp_path / "figs" / "attention.png"
    proc = run_cli("plot", "attention", str(reverse_run), "--input", "3 1 4 1 5 9 2 6", "--out", str(out))
    assert f"wrote {out}" in proc.stdout
    image = imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.unique(image.reshape(-1, image.shape[-1]), axis=0).shape[0] > 50  # a picture, not a blank page


def test_plot_commands_write_png_and_svg(reverse_run: Path, tmp_path: Path):
    cases = {
        "attention.svg": ["plot", "attention", str(reverse_run), "--index", "3"],
        "positional.svg": ["plot", "positional", "--dim", "16", "--length", "32"],
        "schedule.png": ["plot", "schedule", "--warmup", "10", "--max-iters", "100", "--lr", "1e-3"],
        "run-lr.png": ["plot", "schedule", str(reverse_run)],
        "curves.png": ["plot", "curves", str(reverse_run)],
    }
    for name, args in cases.items():
        out = tmp_path / name
        result = invoke(*args, "--out", str(out))
        assert result.exit_code == 0, result.output
        assert f"wrote {out}" in result.output
        head = out.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if name.endswith(".png") else b"<svg" in head
    bad = CliRunner().invoke(main, ["plot", "attention", str(reverse_run), "--input", "1 2 3 4 5 6 7 8 9"])
    assert bad.exit_code == 2 and "longer than the 8 this model was trained on" in bad.output


def test_report_command(reverse_run: Path, tmp_path: Path):
    out = tmp_path / "r.html"
    result = invoke("report", str(reverse_run), "--examples", "1", "--out", str(out))
    assert result.exit_code == 0 and f"wrote {out}" in result.output
    assert out.read_text().count('<div class="example">') == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plot", "attention", "no/such/run"], "no model at no/such/run: nothing is there"),
        (["report", "no/such/run"], "no model at no/such/run: nothing is there"),
        (["plot", "curves", "no/such/run"], "no run folder at no/such/run"),
        (["plot", "positional", "--out", "x.jpg"], "--out x.jpg: write a .png or .svg file"),
        (["plot", "schedule"], "give a RUN folder, or --max-iters"),
        (["plot", "positional", "--dim", "0"], "dim must be a positive integer"),
    ],
)
def test_plot_errors_are_clear(args: list[str], message: str):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_cli_help_does_not_import_matplotlib():
    code = "import sys, attnkit.cli; print('matplotlib' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
