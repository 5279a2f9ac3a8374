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
LIST_TASKS = "from attnkit.cli import main\nmain(['tasks'], prog_name='attnkit', standalone_mode=False)\n"


@pytest.mark.parametrize(
    ("code", "absent"),
    [
        pytest.param(LIST_TASKS, HEAVY, id="attnkit tasks"),
        # Pictures of arrays, curves and schedules need no task: the tasks are imported when a run is loaded.
        pytest.param("import attnkit.viz\n", (*HEAVY, "attnkit.tasks"), id="import attnkit.viz"),
    ],
)
def test_listing_tasks_and_importing_viz_import_no_lightning_and_no_compiler(code, absent):
    check = f"import sys\nprint(sorted(name for name in {absent!r} if name in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", code + check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *shown, imported = done.stdout.strip().splitlines()
    if code == LIST_TASKS:
        assert any(line.startswith("lm ") for line in shown), done.stdout  # the listing did run
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
