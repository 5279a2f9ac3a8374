"""The run report: written by every training run, self-contained, and rendered by a real browser."""

import json
import re
import shutil
from pathlib import Path

import pytest
from viz_helpers import attribute, dump_dom

import attnkit
from attnkit.viz import ReportSection, render_report, write_report

SECTIONS = ("config", "metrics", "curves", "learning-rate", "attention")
# curves + learning rate + 3 attention grids (+ 3 probability charts for the anomaly task)
IMAGES = {"reverse": 5, "anomaly": 8, "classify": 5}


@pytest.mark.parametrize("task", ["reverse", "anomaly", "classify"])
def test_training_writes_a_report_that_renders_in_chromium(task: str, request: pytest.FixtureRequest, tmp_path: Path):
    run_dir: Path = request.getfixturevalue(f"{task}_run")
    report = run_dir / "report.html"
    assert report.is_file(), "training did not write report.html"
    text = report.read_text(encoding="utf-8")
    # self-contained: every image is an inline PNG, nothing is fetched from anywhere
    sources = re.findall(r"<img[^>]*\bsrc=\"([^\"]*)\"", text)
    assert len(sources) == IMAGES[task]
    assert all(src.startswith("data:image/png;base64,") for src in sources)
    assert not re.search(r"(src|href)=\"(?!data:)", text)
    assert "not available" not in text
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    for key, value in metrics.items():
        assert f"<td>{key}</td><td>{value:.4f}</td>" in text

    dom = dump_dom(report, tmp_path / "profile")
    for section in SECTIONS:
        assert f'<section id="{section}">' in dom
    assert attribute(dom, "html", "data-errors") == "0"
    assert attribute(dom, "body", "data-images") == str(IMAGES[task])
    assert attribute(dom, "body", "data-images-decoded") == str(IMAGES[task])  # every image decoded
    assert dom.count('<div class="example">') == 3


def test_browser_check_catches_a_broken_image(reverse_run: Path, tmp_path: Path):
    """The decoded-images check can fail: one corrupt data URI is counted."""
    text = (reverse_run / "report.html").read_text(encoding="utf-8")
    broken = re.sub(r"data:image/png;base64,[^\"]+", "data:image/png;base64,AAAA", text, count=1)
    path = tmp_path / "broken.html"
    path.write_text(broken, encoding="utf-8")
    dom = dump_dom(path, tmp_path / "profile")
    assert attribute(dom, "body", "data-images") == "5"
    assert attribute(dom, "body", "data-images-decoded") == "4"


def test_report_regenerates_and_takes_extra_sections(reverse_run: Path, tmp_path: Path):
    extra = ReportSection("study", "Tuning study", "<p>best trial: 3</p>")
    html = render_report(reverse_run, num_examples=1, sections=[extra])
    assert '<section id="study"><h2>Tuning study</h2>' in html and html.count('<div class="example">') == 1
    out = write_report(reverse_run, num_examples=2, out=tmp_path / "copy.html")
    assert out == tmp_path / "copy.html" and out.read_text().count('<div class="example">') == 2


def test_a_failing_report_warns_and_keeps_the_trained_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("attnkit.api.runs.write_report", broken)
    overrides = {"data.train_size": 256, "data.val_size": 32, "data.test_size": 32, "data.seq_len": 8}
    with pytest.warns(UserWarning, match=r"could not write .*report.html \(RuntimeError: disk on fire\)"):
        result = attnkit.train(
            "reverse", output_dir=str(tmp_path), name="r", trainer={"max_epochs": 1, "threads": 1}, **overrides
        )
    assert result.metrics["test/acc"] >= 0.0
    assert (result.run_dir / "checkpoints" / "best.ckpt").is_file()
    assert (result.run_dir / "metrics.json").is_file()
    assert not (result.run_dir / "report.html").exists()


def test_report_can_be_switched_off(tmp_path: Path):
    overrides = {"data.train_size": 256, "data.val_size": 32, "data.test_size": 32, "data.seq_len": 8}
    result = attnkit.train(
        "reverse",
        output_dir=str(tmp_path),
        name="r",
        trainer={"max_epochs": 1, "threads": 1, "report": False, "progress_bar": False},
        **overrides,
    )
    assert (result.run_dir / "metrics.json").is_file()
    assert not (result.run_dir / "report.html").exists()


def test_report_of_a_lone_checkpoint_is_refused(reverse_run: Path, tmp_path: Path):
    lone = tmp_path / "model.ckpt"
    shutil.copy(reverse_run / "checkpoints" / "best.ckpt", lone)
    with pytest.raises(ValueError, match="is not inside a run folder"):
        write_report(lone)
