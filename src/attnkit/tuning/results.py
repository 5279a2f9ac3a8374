"""What a study leaves in its folder: the best config, a table of trials, plots and a report.

``<output_dir>/tune/<study>/``:

- ``best.yaml``: the best trial's full config; ``attnkit train TASK --config best.yaml`` reproduces it;
- ``trials.csv`` and ``trials.md``: one row per trial (state, value, parameters, time, reason);
- ``history.png`` (value per trial and best so far), ``intermediate.png`` (the monitored metric per
  epoch of every trial, pruned ones included), ``importance.png`` (parameter importances);
- ``study_report.html``: all of it in one self-contained page; ``summary.json``: the figures;
- the best trial's run folder gets a ``report.html`` with a "Tuning study" section.
"""

from __future__ import annotations

import csv
import html
import json
import warnings
from pathlib import Path
from typing import Any

import optuna
import yaml
from matplotlib.ticker import MaxNLocator
from optuna.trial import FrozenTrial, TrialState

from attnkit.config import expand_dotted, merge
from attnkit.tasks import build_config
from attnkit.tuning.trials import META_ATTR, counts_toward_budget
from attnkit.viz.figure import Figure
from attnkit.viz.report import ReportSection, write_report

__all__ = [
    "best_config",
    "param_importances",
    "plot_history",
    "plot_importances",
    "plot_intermediate",
    "trial_rows",
    "write_results",
]


def _label(trial: FrozenTrial) -> str:
    attrs = trial.user_attrs
    if trial.state == TrialState.COMPLETE:
        return "complete"
    if trial.state == TrialState.PRUNED:
        return "rejected" if "rejected" in attrs else "pruned"
    if trial.state == TrialState.FAIL:
        if "skipped" in attrs:
            return "skipped"
        return "failed" if "fail_reason" in attrs else "interrupted"
    return trial.state.name.lower()


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One dict per trial (skipped ones left out): number, state, value, epochs, parameters, time, note."""
    trials = [t for t in study.get_trials(deepcopy=False) if "skipped" not in t.user_attrs]
    retried_as = {
        t.system_attrs["failed_trial"]: t.number
        for t in trials
        if "failed_trial" in t.system_attrs and t.system_attrs["failed_trial"] != t.number
    }
    keys = list(study.user_attrs.get(META_ATTR, {}).get("space", {})) or sorted({k for t in trials for k in t.params})
    rows = []
    for t in trials:
        label = _label(t)
        attrs = t.user_attrs
        note = {
            "pruned": attrs.get("pruned", ""),
            "rejected": attrs.get("rejected", ""),
            "failed": attrs.get("fail_reason", ""),
            "interrupted": attrs.get("interrupted", "its process died while it ran"),
        }.get(label, "")
        if label == "interrupted" and t.number in retried_as:
            note += f"; re-run as trial {retried_as[t.number]}"
        if "failed_trial" in t.system_attrs:
            note = (note + "; " if note else "") + f"re-run of trial {t.system_attrs['failed_trial']}"
        last = max(t.intermediate_values) if t.intermediate_values else None
        rows.append(
            {
                "number": t.number,
                "state": label,
                "value": t.value if t.state == TrialState.COMPLETE else None,
                "last_reported": t.intermediate_values[last] if last is not None else None,
                "epochs": len(t.intermediate_values),
                **{k: t.params.get(k) for k in keys},
                "wall_s": attrs.get("wall_s"),
                "run_dir": attrs.get("run_dir", ""),
                "note": note,
            }
        )
    return rows


def best_config(study: optuna.Study, base: dict[str, Any], task: str, output_dir: str) -> dict[str, Any] | None:
    """The best trial's full config (base config + its parameters), for ``attnkit train --config``."""
    try:
        best = study.best_trial
    except ValueError:
        return None
    cfg = build_config(task, merge(base, expand_dotted(best.params))).model_dump(mode="json")
    cfg["output_dir"] = output_dir
    cfg["name"] = None
    return cfg


def param_importances(study: optuna.Study) -> dict[str, float]:
    """Optuna's parameter importances over the completed trials ({} when they cannot be computed yet)."""
    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    if len(complete) < 2:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
        except (ValueError, RuntimeError, ZeroDivisionError):
            return {}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-2 or abs(value) >= 1e4 else f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def markdown_table(rows: list[dict[str, Any]], monitor: str) -> str:
    if not rows:
        return "(no trials yet)\n"
    params = [
        k
        for k in rows[0]
        if k not in ("number", "state", "value", "last_reported", "epochs", "wall_s", "run_dir", "note")
    ]
    header = ["trial", "state", monitor, "epochs", *params, "time (s)", "note"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        value = r["value"] if r["value"] is not None else r["last_reported"]
        shown = "" if value is None else f"{value:.4f}" + (" (last)" if r["value"] is None else "")
        wall = f"{r['wall_s']:.1f}" if r["wall_s"] is not None else ""
        cells = [str(r["number"]), r["state"], shown, str(r["epochs"]), *(_cell(r[p]) for p in params), wall, r["note"]]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def plot_history(study: optuna.Study, monitor: str) -> Figure:
    """Value of each completed trial, last reported value of pruned ones, and the best so far."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    maximize = study.direction == optuna.study.StudyDirection.MAXIMIZE
    done, best, best_x, best_y = [], None, [], []
    pruned = []
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.COMPLETE and t.value is not None:
            done.append((t.number, t.value))
            if best is None or (t.value > best if maximize else t.value < best):
                best = t.value
        elif t.state == TrialState.PRUNED and t.intermediate_values:
            pruned.append((t.number, t.intermediate_values[max(t.intermediate_values)]))
        if best is not None:
            best_x.append(t.number)
            best_y.append(best)
    if done:
        ax.scatter(*zip(*done), color="tab:blue", label="completed", zorder=3)
    if pruned:
        ax.scatter(*zip(*pruned), color="tab:gray", marker="x", label="pruned (last reported)", zorder=3)
    if best_x:
        ax.step(best_x, best_y, where="post", color="tab:red", label="best so far")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(monitor)
    ax.set_title(f"Optimisation history of study {study.study_name!r}")
    ax.grid(alpha=0.3)
    if done or pruned:
        ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def plot_intermediate(study: optuna.Study, monitor: str) -> Figure:
    """The monitored metric after every epoch of each trial (what the pruner compares)."""
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for t in study.get_trials(deepcopy=False):
        if not t.intermediate_values:
            continue
        steps = sorted(t.intermediate_values)
        style: dict[str, Any] = (
            {"color": "tab:gray", "alpha": 0.6, "linestyle": "--"} if t.state == TrialState.PRUNED else {}
        )
        ax.plot([s + 1 for s in steps], [t.intermediate_values[s] for s in steps], marker=".", **style)
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(monitor)
    ax.set_title("Validation metric per epoch (dashed: pruned trials)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_importances(importances: dict[str, float]) -> Figure:
    fig = Figure(figsize=(7, 0.5 + 0.45 * max(len(importances), 1)))
    ax = fig.subplots()
    items = sorted(importances.items(), key=lambda kv: kv[1])
    ax.barh([k for k, _ in items], [v for _, v in items], color="tab:blue")
    ax.set_xlabel("importance (Optuna's default evaluator, PED-ANOVA; the values sum to 1)")
    ax.set_title("Parameter importances")
    fig.tight_layout()
    return fig


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=90)
    return path


def _uri(path: Path) -> str:
    import base64

    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_results(
    study: optuna.Study,
    study_dir: str | Path,
    *,
    task: str,
    base: dict[str, Any],
    output_dir: str,
    storage: str = "",
) -> dict[str, Path]:
    """Write the study's results into ``study_dir``; returns ``{what: path}`` of the files written."""
    study_dir = Path(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    meta = study.user_attrs.get(META_ATTR, {})
    monitor = meta.get("monitor", "value")
    rows = trial_rows(study)
    out: dict[str, Path] = {}

    with (study_dir / "trials.csv").open("w", newline="") as fh:
        if rows:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    out["trials_csv"] = study_dir / "trials.csv"
    table = markdown_table(rows, monitor)
    (study_dir / "trials.md").write_text(table)
    out["trials_md"] = study_dir / "trials.md"

    cfg = best_config(study, base, task, output_dir)
    best = study.best_trial if cfg is not None else None
    if best is not None and cfg is not None:
        path = study_dir / "best.yaml"
        header = (
            f"# Best trial of study {study.study_name!r} ({task}): trial {best.number}, {monitor} {best.value:.6g}\n"
            f"# Reproduce it: attnkit train {task} --config {path}\n"
        )
        path.write_text(header + yaml.safe_dump(cfg, sort_keys=False))
        out["best_config"] = path

    out["history"] = _save(plot_history(study, monitor), study_dir / "history.png")
    out["intermediate"] = _save(plot_intermediate(study, monitor), study_dir / "intermediate.png")
    importances = param_importances(study)
    if importances:
        out["importance"] = _save(plot_importances(importances), study_dir / "importance.png")
    else:
        (study_dir / "importance.png").unlink(missing_ok=True)

    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    summary = {
        "study": study.study_name,
        "task": task,
        "monitor": monitor,
        "direction": study.direction.name.lower(),
        "storage": storage,
        "trials_counted": sum(counts_toward_budget(t) for t in study.get_trials(deepcopy=False)),
        "states": counts,
        "best": (
            {
                "trial": best.number,
                "value": best.value,
                "params": best.params,
                "run_dir": best.user_attrs.get("run_dir"),
                "metrics": best.user_attrs.get("metrics"),
                "config": str(out["best_config"]),
            }
            if best is not None
            else None
        ),
        "importances": importances,
    }
    (study_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    out["summary"] = study_dir / "summary.json"

    (study_dir / "study_report.html").write_text(_html(study, summary, rows, table, meta, out, cfg), encoding="utf-8")
    out["report"] = study_dir / "study_report.html"
    if best is not None:
        run_report = _best_run_report(best, summary, out)
        if run_report is not None:
            out["best_run_report"] = run_report
    return out


def _best_table(summary: dict[str, Any]) -> str:
    best = summary["best"]
    if best is None:
        return "<p>No trial has completed yet.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(_cell(v))}</td></tr>" for k, v in best["params"].items()
    )
    return (
        f"<p>Best: trial {best['trial']}, {html.escape(summary['monitor'])} <b>{best['value']:.4f}</b>. "
        f"Reproduce it with <code>attnkit train {html.escape(summary['task'])} --config "
        f"{html.escape(best['config'])}</code>.</p>"
        f"<table><tr><th>parameter</th><th>value</th></tr>{rows}</table>"
    )


def _md_to_html(rows: list[dict[str, Any]], monitor: str) -> str:
    lines = [ln for ln in markdown_table(rows, monitor).splitlines() if ln.startswith("|") and "---" not in ln]
    if len(lines) < 2:
        return "<p>No trials yet.</p>"
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cells[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
th { background: #f0f0f0; } img { max-width: 100%; } code, pre { background: #f6f6f6; }
pre { padding: 0.5em; overflow-x: auto; }
"""


def _html(
    study: optuna.Study,
    summary: dict[str, Any],
    rows: list[dict[str, Any]],
    table: str,
    meta: dict[str, Any],
    files: dict[str, Path],
    cfg: dict[str, Any] | None,
) -> str:
    monitor = summary["monitor"]
    states = ", ".join(f"{n} {s}" for s, n in sorted(summary["states"].items())) or "none"
    imgs = "".join(
        f'<h3>{html.escape(title)}</h3><img src="{_uri(files[key])}" alt="{html.escape(title)}">'
        for key, title in (
            ("history", "Optimisation history"),
            ("intermediate", "Validation metric per epoch"),
            ("importance", "Parameter importances"),
        )
        if key in files
    )
    if "importance" not in files:
        imgs += "<p>Parameter importances need at least two completed trials that differ in their parameters.</p>"
    space = yaml.safe_dump(meta.get("space", {}), sort_keys=False)
    config = yaml.safe_dump(cfg, sort_keys=False) if cfg else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>attnkit tuning study {html.escape(study.study_name)}</title>
<style>{_STYLE}</style></head><body>
<h1>Tuning study {html.escape(study.study_name)} — {html.escape(summary["task"])}</h1>
<p>Objective: {html.escape(summary["direction"])} {html.escape(monitor)} (validation, best checkpoint of each trial).
Trials: {html.escape(states)} ({summary["trials_counted"]} counted toward the budget).
Storage: <code>{html.escape(summary["storage"])}</code>.</p>
<section id="best"><h2>Best trial</h2>{_best_table(summary)}</section>
<section id="plots"><h2>Plots</h2>{imgs}</section>
<section id="trials"><h2>Trials</h2>{_md_to_html(rows, monitor)}</section>
<section id="space"><h2>Search space</h2><pre>{html.escape(space)}</pre></section>
<section id="config"><h2>Best config</h2><pre>{html.escape(config)}</pre></section>
</body></html>
"""


def _best_run_report(best: FrozenTrial, summary: dict[str, Any], files: dict[str, Path]) -> Path | None:
    """The best trial's run report (``report.html`` in its run folder) with a "Tuning study" section."""
    run_dir = Path(best.user_attrs.get("run_dir", ""))
    if not (run_dir / "checkpoints").is_dir():
        return None  # run on another machine
    section = ReportSection(
        "tuning",
        "Tuning study",
        f"<p>This run is trial {best.number} of study <code>{html.escape(summary['study'])}</code>, the best of its "
        f"{summary['trials_counted']} trials. Full study report: <code>{html.escape(str(files['report']))}</code>.</p>"
        + _best_table(summary)
        + f'<img src="{_uri(files["history"])}" alt="optimisation history">',
    )
    try:
        return write_report(run_dir, sections=[section])
    except Exception as err:  # the study's own report is written already; this one is a bonus
        warnings.warn(f"could not write the run report of the best trial: {err}", stacklevel=2)
        return None
