"""attnkit from Python, and everything the ``attnkit`` command line does:
``attnkit.api.train("reverse", trainer={"max_epochs": 2})``.

Every command of the command line is one function here; the functions return data (configs,
metrics, texts, paths) and the command line only parses its arguments and prints what they return.
Names are imported on first use, so ``import attnkit.api`` is quick and pulls in neither torch nor
Lightning.

- Runs (:mod:`attnkit.api.runs`): :func:`build_config`, :func:`train`, :func:`prepare`,
  :func:`evaluate`, :func:`predict`, :func:`predict_file`, :func:`load_run`.
- Text (:mod:`attnkit.api.generation`): :func:`generate`, :func:`translate`, :func:`read_lines`;
  conversations (:mod:`attnkit.api.chat`): :class:`ChatSession`, :class:`Reply`.
- Looking inside a decoder (:mod:`attnkit.api.inspecting`): :func:`inspect_lens`, :func:`inspect_attribution`,
  :func:`inspect_patch`, :func:`inspect_heads`, :func:`inspect_over_training`, :func:`inspect_figure`; what
  tuning changed (:mod:`attnkit.api.diffing`): :func:`diff_models`.
- Figures (:mod:`attnkit.api.plots`): :func:`plot_attention`, :func:`plot_positional`,
  :func:`plot_schedule`, :func:`plot_curves`, :func:`report`.
- Models (:mod:`attnkit.api.models`): :func:`load_model` (any run or model folder, to generate and
  chat with), :func:`export`, :func:`import_model`.
- Serving (:mod:`attnkit.api.serving`, needs the ``serve`` extra): :func:`serve` (an OpenAI-compatible
  server); looking inside live (:mod:`attnkit.api.exploring`, same extra): :func:`explore`.
- Benchmarks (:mod:`attnkit.api.evaluation`, needs lm_eval): :func:`evaluate_harness`, :func:`harness_table`,
  :func:`harness_json`.
- :func:`list_tasks` (:mod:`attnkit.api.catalog`) and :func:`tune` (:mod:`attnkit.tuning`, needs Optuna).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnkit.api.catalog import list_tasks
    from attnkit.api.chat import ChatSession, Reply
    from attnkit.api.diffing import diff_models
    from attnkit.api.evaluation import evaluate_harness, harness_json, harness_table
    from attnkit.api.exploring import explore
    from attnkit.api.generation import generate, read_lines, translate
    from attnkit.api.inspecting import (
        inspect_attribution,
        inspect_figure,
        inspect_heads,
        inspect_lens,
        inspect_over_training,
        inspect_patch,
    )
    from attnkit.api.models import Exported, export, import_model, load_model
    from attnkit.api.plots import plot_attention, plot_curves, plot_positional, plot_schedule, report
    from attnkit.api.runs import (
        build_config,
        evaluate,
        load_run,
        predict,
        predict_file,
        prepare,
        train,
        write_report_or_warn,
    )
    from attnkit.api.serving import serve
    from attnkit.tuning import tune

# Each public name and the module that defines it.
HOMES = {
    "build_config": "attnkit.api.runs",
    "train": "attnkit.api.runs",
    "prepare": "attnkit.api.runs",
    "evaluate": "attnkit.api.runs",
    "predict": "attnkit.api.runs",
    "predict_file": "attnkit.api.runs",
    "load_run": "attnkit.api.runs",
    "write_report_or_warn": "attnkit.api.runs",
    "generate": "attnkit.api.generation",
    "translate": "attnkit.api.generation",
    "read_lines": "attnkit.api.generation",
    "inspect_lens": "attnkit.api.inspecting",
    "inspect_attribution": "attnkit.api.inspecting",
    "inspect_patch": "attnkit.api.inspecting",
    "inspect_heads": "attnkit.api.inspecting",
    "inspect_figure": "attnkit.api.inspecting",
    "inspect_over_training": "attnkit.api.inspecting",
    "diff_models": "attnkit.api.diffing",
    "plot_attention": "attnkit.api.plots",
    "plot_positional": "attnkit.api.plots",
    "plot_schedule": "attnkit.api.plots",
    "plot_curves": "attnkit.api.plots",
    "report": "attnkit.api.plots",
    "export": "attnkit.api.models",
    "Exported": "attnkit.api.models",
    "import_model": "attnkit.api.models",
    "load_model": "attnkit.api.models",
    "list_tasks": "attnkit.api.catalog",
    "serve": "attnkit.api.serving",
    "explore": "attnkit.api.exploring",
    "ChatSession": "attnkit.api.chat",
    "Reply": "attnkit.api.chat",
    "evaluate_harness": "attnkit.api.evaluation",
    "harness_table": "attnkit.api.evaluation",
    "harness_json": "attnkit.api.evaluation",
    "tune": "attnkit.tuning",
}

__all__ = [
    "ChatSession",
    "Exported",
    "Reply",
    "build_config",
    "diff_models",
    "evaluate",
    "evaluate_harness",
    "explore",
    "export",
    "generate",
    "harness_json",
    "harness_table",
    "import_model",
    "inspect_attribution",
    "inspect_figure",
    "inspect_heads",
    "inspect_lens",
    "inspect_over_training",
    "inspect_patch",
    "list_tasks",
    "load_model",
    "load_run",
    "plot_attention",
    "plot_curves",
    "plot_positional",
    "plot_schedule",
    "predict",
    "predict_file",
    "prepare",
    "read_lines",
    "report",
    "serve",
    "train",
    "translate",
    "tune",
    "write_report_or_warn",
]


def __getattr__(name: str) -> Any:
    home = HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'attnkit.api' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *HOMES})
