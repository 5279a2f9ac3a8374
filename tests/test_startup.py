"""Describing tasks, the command line's help and ``attnkit.viz`` do not import Lightning (only training,
evaluating and loading a run do): ``benchmarks/startup.py --quick`` checks it on whole processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench_helpers import run_quick


def test_startup_benchmark_smoke(tmp_path):
    done = run_quick("startup.py", tmp_path / "startup.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all checks passed" in done.stdout
    assert "bytecode: " in done.stdout  # compiled first: the rounds time start-up, not compiling
    results = json.loads((tmp_path / "startup.json").read_text())["results"]
    assert [r["command"] for r in results] == ["attnkit tasks", "attnkit generate --help", "import attnkit.viz"]


def test_describing_tasks_imports_no_lightning():
    code = (
        "import sys, attnkit.tasks, attnkit.viz\n"
        "from attnkit.tasks import TASKS\n"
        "names = ['anomaly', 'classify', 'dpo', 'grpo', 'kto', 'lm', 'reverse', 'sft', 'translate']\n"
        "assert sorted(TASKS) == names, sorted(TASKS)\n"
        "needs = {'sft': {'model': {'init': 'a-base-folder', 'lora': {'rank': 8}}}}  # sft fine-tunes a base\n"
        "for name, task in TASKS.items():\n"
        "    task.config_cls(**needs.get(name, {})).model_dump()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# What a command that neither trains nor loads a run must not import: seconds of start-up each (Lightning
# imports torchmetrics, which imports transformers and matplotlib; torch's compiler, torch._dynamo, sympy).
HEAVY = ("lightning", "pytorch_lightning", "torchmetrics", "transformers", "torch._dynamo", "sympy")
SERVER = ("fastapi", "uvicorn", "starlette")  # the server stack: `attnkit serve` and `attnkit explore` only
LIST_TASKS = "from attnkit.cli import main\nmain(['tasks'], prog_name='attnkit', standalone_mode=False)\n"
GENERATE_HELP = (
    "from attnkit.cli import main\nmain(['generate', '--help'], prog_name='attnkit', standalone_mode=False)\n"
)


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        pytest.param(LIST_TASKS, (*HEAVY, *SERVER, "matplotlib", "attnkit.viz"), id="attnkit tasks"),
        # The sampling flags come from SamplingParams alone: no task (the registry and every task's imports),
        # no model loading (interop), no chat templates (jinja2).
        pytest.param(
            GENERATE_HELP,
            (*HEAVY, *SERVER, "attnkit.tasks", "attnkit.interop", "attnkit.training.task", "jinja2", "matplotlib"),
            id="attnkit generate --help",
        ),
        # Pictures of arrays, curves and schedules need no task, no config and no model loading: the tasks
        # are imported when a run is loaded, the explorer's views (interop, the models) when it is shown.
        pytest.param(
            "import attnkit.viz\n",
            (
                *HEAVY,
                *SERVER,
                "attnkit.tasks",
                "attnkit.training.task",
                "attnkit.interop",
                "attnkit.viz.explorer.views",
                "pydantic",
                "jinja2",
            ),
            id="import attnkit.viz",
        ),
    ],
)
def test_commands_that_neither_train_nor_load_import_only_what_they_use(code, absent):
    check = f"import sys\nprint(sorted(name for name in {absent!r} if name in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *shown, imported = done.stdout.strip().splitlines()
    if code == LIST_TASKS:
        assert any(line.startswith("lm ") for line in shown), done.stdout  # the listing did run
    if code == GENERATE_HELP:
        assert any("--max-new-tokens" in line for line in shown), done.stdout  # the derived flags are shown
    assert imported == "[]", f"imported {imported} (python -X importtime says through which modules)"


def test_loading_the_task_module_imports_lightning():
    """The other side: the check above would pass if nothing could ever import Lightning."""
    code = (
        "import sys\n"
        "from attnkit.tasks import get_task\n"
        "get_task('reverse').module_class()\n"
        "print('lightning' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
