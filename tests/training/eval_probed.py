"""``probed_cli`` (the real ``attnkit`` command line, probed in every process of the run) that also records
the evaluation batches each process ran, and can leave the processes of a run stuck in a collective:
what test_fsdp_eval.py reads.

    PROBE_DIR=dir PROBE_LABEL=fsdp [PROBE_STUCK_AT=N PROBE_STUCK_IN=train|test] python eval_probed.py train ...

Each record gets, besides ``probed_cli``'s, ``eval``: one ``[stage, batch_idx, padding, sharded]`` per
validation or test batch the process ran (``stage``: ``sanity``, ``val`` or ``test``; ``padding``: what
``TaskModule.is_padding`` said of it; ``sharded``: whether the model was an FSDP module then).

With ``PROBE_STUCK_AT=N``, at the end of training step N (``PROBE_STUCK_IN=train``, the default) or at the
start of test batch N (``test``) every process writes ``<label>-rank<r>-stuck`` (holding its process id)
and then waits to receive a tensor from the other process, which waits too: both are blocked in gloo's
C++ code for good (until the process group's 30-minute timeout), as the processes of a run that disagree
on their collectives are. Python never runs a signal handler there. Two processes only.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import probed_cli

ORIGINAL_PROBE = probed_cli.probe
HERE = Path(__file__).resolve()


def start(
    probe_dir: Path, label: str, *args: str, stuck_at: int | None = None, stuck_in: str = "train"
) -> subprocess.Popen:
    """As :func:`probed_cli.start`, with this script's probe (and ``PROBE_STUCK_AT`` / ``PROBE_STUCK_IN``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PROBE_DIR": str(probe_dir)}
    env["PROBE_LABEL"] = label
    for name in ("ATTNKIT_RUN_DIR", "PROBE_PAUSE_AT", "PROBE_STUCK_AT", "PROBE_STUCK_IN"):
        env.pop(name, None)
    if stuck_at is not None:
        env["PROBE_STUCK_AT"], env["PROBE_STUCK_IN"] = str(stuck_at), stuck_in
    probe_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(HERE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def run(probe_dir: Path, label: str, *args: str, world: int = 1, timeout: float = 300) -> list[dict[str, Any]]:
    """As :func:`probed_cli.run`, with this script's probe: the run must end, successfully, within ``timeout``."""
    proc = start(probe_dir, label, *args)
    out, err = probed_cli.finish(proc, probe_dir, label, world, timeout)
    if proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{out}\n{err}")
    return probed_cli.records(probe_dir, label, world)


def stuck(probe_dir: Path, label: str, rank: int) -> None:
    """Write ``<label>-rank<rank>-stuck`` and block in a receive nobody sends."""
    import torch
    import torch.distributed as dist

    mark = probe_dir / f"{label}-rank{rank}-stuck"
    mark.with_suffix(".tmp").write_text(str(os.getpid()))
    os.replace(mark.with_suffix(".tmp"), mark)  # whole or not there: the test polls for it
    dist.recv(torch.zeros(1), src=1 - rank, tag=4242)
    raise AssertionError("received a tensor nobody sent")


def _eval_probe(probe_dir: Path, label: str, pause_at: int | None = None) -> Any:
    from attnkit.training.sharding import is_sharded

    base = ORIGINAL_PROBE(probe_dir, label, pause_at)
    stuck_at = int(os.environ["PROBE_STUCK_AT"]) if os.environ.get("PROBE_STUCK_AT") else None
    stuck_in = os.environ.get("PROBE_STUCK_IN", "train")

    class EvalProbe(type(base)):  # type: ignore[misc]  # a class made by probed_cli.probe
        def __init__(self) -> None:
            super().__init__()
            self.record["eval"] = []

        def _seen(self, trainer: Any, pl_module: Any, stage: str, batch_idx: int) -> None:
            where = "sanity" if trainer.sanity_checking else stage
            padding = pl_module.is_padding(stage, batch_idx)
            self.record["eval"].append([where, batch_idx, padding, is_sharded(pl_module.model)])

        def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *_: Any) -> None:
            self._seen(trainer, pl_module, "val", batch_idx)

        def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *_: Any) -> None:
            self._seen(trainer, pl_module, "test", batch_idx)
            if stuck_in == "test" and batch_idx == stuck_at:
                stuck(probe_dir, label, trainer.global_rank)

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            super().on_train_batch_end(trainer, *args)
            if stuck_in == "train" and trainer.global_step == stuck_at:
                stuck(probe_dir, label, trainer.global_rank)

    return EvalProbe()


if __name__ == "__main__":
    probed_cli.probe = _eval_probe
    probed_cli.main()
