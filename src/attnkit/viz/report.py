"""The run report: one self-contained ``report.html`` per run folder.

It holds the config, the final metrics, the training curves, the learning rate, the attention maps
of a few validation examples (and for the anomaly task the predicted probability of each set
element). Images are embedded as base64 PNG data URIs: the file opens offline and can be mailed.
A small inline script marks ``<body>`` with ``data-images`` / ``data-images-decoded`` (how many
images there are and how many the browser decoded) and ``data-errors`` (script errors), which the
tests read back from a headless browser.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from matplotlib.figure import Figure

from attnkit.io import write_text_atomic
from attnkit.viz.attention import plot_attention_example, plot_set_probabilities
from attnkit.viz.curves import plot_training_curves
from attnkit.viz.runs import loaded_run
from attnkit.viz.schedule import plot_run_lr

__all__ = ["ReportSection", "figure_data_uri", "render_report", "write_report"]

REPORT_NAME = "report.html"


@dataclass
class ReportSection:
    """A section of the report: ``html`` is inserted as it is under an ``<h2>`` of ``title``."""

    id: str
    title: str
    html: str


def figure_data_uri(fig: Figure, dpi: int = 80) -> str:
    """The figure as a ``data:image/png;base64,...`` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _img(fig: Figure, alt: str) -> str:
    return f'<img src="{figure_data_uri(fig)}" alt="{html.escape(alt)}">'


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _guarded(build: Callable[[], str], what: str) -> str:
    """A section's HTML, or a note saying why it could not be drawn (the rest of the report still is)."""
    try:
        return build()
    except Exception as err:  # one broken section must not cost the report
        return _note(f"{what} not available: {type(err).__name__}: {err}")


def _metrics_table(run_dir: Path) -> str:
    path = run_dir / "metrics.json"
    if not path.is_file():
        return _note("no metrics.json: the run has not finished (or was killed before its final evaluation)")
    data = json.loads(path.read_text())
    metrics: dict[str, float] = data.get("metrics", {})
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:.4f}</td></tr>" for k, v in sorted(metrics.items())
    )  # fmt: skip
    extra = f"<p>best checkpoint: <code>{html.escape(str(data.get('best_checkpoint', '')))}</code>, "
    extra += f"epochs: {html.escape(str(data.get('epochs', '')))}</p>"
    return f'<table class="metrics"><tr><th>metric</th><th>value</th></tr>{rows}</table>{extra}'


def _attention_html(run: Any, num_examples: int) -> str:
    examples = run.task.attention_examples(run.module, None, list(range(num_examples)))
    parts = []
    for example in examples:
        parts.append(f'<div class="example"><h3>{html.escape(example.title)}</h3>')
        parts.append(_img(plot_attention_example(example), f"attention maps: {example.title}"))
        if example.probabilities is not None:
            fig = plot_set_probabilities(example.probabilities, example.target, title="predicted probabilities")
            parts.append(_img(fig, f"predicted probabilities: {example.title}"))
        parts.append("</div>")
    return "".join(parts)


def _task_sections(run: Any) -> list[ReportSection]:
    """The task's own sections (:meth:`~attnkit.training.task.Task.report_sections`), or a note saying why not."""
    try:
        return [ReportSection(*section) for section in run.task.report_sections(run)]
    except Exception as err:  # one broken section must not cost the report
        return [ReportSection("task", f"{run.task.name} task", _note(f"not available: {type(err).__name__}: {err}"))]


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h3 { font-size: 1em; font-weight: normal; } code, pre { background: #f6f6f6; }
pre { padding: .8em; overflow-x: auto; font-size: .85em; }
table.metrics td, table.metrics th { padding: .2em 1em; text-align: left; border-bottom: 1px solid #eee; }
img { max-width: 100%; height: auto; display: block; margin: .5em 0; }
.note { color: #a33; }
"""

_SCRIPT = """
document.documentElement.setAttribute("data-errors", "0");
window.addEventListener("error", function () {
  var n = Number(document.documentElement.getAttribute("data-errors")) + 1;
  document.documentElement.setAttribute("data-errors", String(n));
});
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var decoded = images.filter(function (im) { return im.complete && im.naturalWidth > 0; });
  document.body.setAttribute("data-images", String(images.length));
  document.body.setAttribute("data-images-decoded", String(decoded.length));
});
"""


def render_report(run: str | Path | Any, *, num_examples: int = 3, sections: Sequence[ReportSection] = ()) -> str:
    """The report's HTML for a run folder (or a :class:`~attnkit.training.task.LoadedRun` with a run
    folder). ``sections`` are added at the end (e.g. a tuning study's summary)."""
    loaded = loaded_run(run)
    if loaded.run_dir is None:
        raise ValueError(f"{loaded.checkpoint} is not inside a run folder (<run>/checkpoints/): no report to write")
    loaded.module.eval()
    run_dir = Path(loaded.run_dir)
    config = yaml.safe_dump(loaded.config.model_dump(mode="json"), sort_keys=False)
    body = [
        ReportSection("config", "Configuration", f"<pre>{html.escape(config)}</pre>"),
        ReportSection("metrics", "Final metrics", _guarded(lambda: _metrics_table(run_dir), "metrics")),
        ReportSection(
            "curves",
            "Training curves",
            _guarded(lambda: _img(plot_training_curves(run_dir), "training curves"), "training curves"),
        ),
        ReportSection(
            "learning-rate",
            "Learning rate",
            _guarded(lambda: _img(plot_run_lr(run_dir), "learning rate per step"), "learning rate"),
        ),
        ReportSection(
            "attention",
            f"Attention maps of {num_examples} validation examples",
            _guarded(lambda: _attention_html(loaded, num_examples), "attention maps"),
        ),
        *_task_sections(loaded),
        *sections,
    ]
    title = f"attnkit run report: {loaded.task.name} — {run_dir.name}"
    sections_html = "\n".join(
        f'<section id="{html.escape(s.id)}"><h2>{html.escape(s.title)}</h2>\n{s.html}\n</section>' for s in body
    )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_STYLE}</style>
<script>{_SCRIPT}</script>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>Run folder <code>{html.escape(str(run_dir))}</code>, checkpoint <code>{html.escape(loaded.checkpoint.name)}</code>,
written {time.strftime("%Y-%m-%d %H:%M:%S")} by attnkit.
Regenerate with <code>attnkit report {html.escape(str(run_dir))}</code>.</p>
{sections_html}
</body>
</html>
"""


def write_report(
    run: str | Path | Any,
    *,
    num_examples: int = 3,
    sections: Sequence[ReportSection] = (),
    out: str | Path | None = None,
) -> Path:
    """Write ``report.html`` into the run folder (or to ``out``); returns its path."""
    loaded = loaded_run(run)
    text = render_report(loaded, num_examples=num_examples, sections=sections)
    assert loaded.run_dir is not None  # render_report refuses a run without its folder
    path = Path(out) if out is not None else Path(loaded.run_dir) / REPORT_NAME
    write_text_atomic(path, text)
    return path
