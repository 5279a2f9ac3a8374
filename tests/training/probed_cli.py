"""The real ``attnkit`` command line, run with a probe in every process of the run: what the tests of
preemption and DDP read to see what the training loop really did (not what the config asked for).

    PROBE_DIR=dir PROBE_LABEL=cut [PROBE_PAUSE_AT=163] python probed_cli.py train reverse ...

The probe is a Lightning callback added to the run's own (``attnkit.api.runs.fit`` wrapped, nothing else
changed). When a process ends, it writes ``<PROBE_DIR>/<label>-rank<r>.json``: its ``pid``, the
``world_size`` and ``global_rank`` its Trainer had, its exit ``code``, and ``steps``: one
``[epoch, batch_idx, global_step, lr, crc]`` per training batch it ran (the global step before the
batch's optimizer step, the learning rate of that step and a CRC of the batch's tensors). At its first
training batch it saves the optimizer's and the LR scheduler's state dicts in ``<label>-rank<r>-start.pt``.

With ``PROBE_PAUSE_AT=N`` every process, at the end of training step N, writes
``<label>-rank<r>-paused`` and waits (at most ``PAUSE_TIMEOUT`` seconds) until it has been sent SIGTERM:
the test signals a run it knows to be at that step. Lightning's DDP launcher starts the other
processes with this same command and environment, so they are probed too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

PAUSE_TIMEOUT = 120.0
HERE = Path(__file__).resolve()


# ---------------------------------------------------------------------------------------------- the test's side


def start(probe_dir: Path, label: str, *args: str, pause_at: int | None = None) -> subprocess.Popen:
    """Start ``attnkit *args`` probed (one torch thread per process); stdout and stderr are piped."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PROBE_DIR": str(probe_dir)}
    env["PROBE_LABEL"] = label
    env.pop("ATTNKIT_RUN_DIR", None)
    env.pop("PROBE_PAUSE_AT", None)
    if pause_at is not None:
        env["PROBE_PAUSE_AT"] = str(pause_at)
    probe_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(paths: list[Path], proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until every one of ``paths`` exists; fails at once if ``proc`` ends first, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended ({proc.returncode}) before {paths} were written:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            raise AssertionError(f"{[str(p) for p in paths if not p.exists()]} not written within {timeout} s")
        time.sleep(0.02)


def finish(proc: subprocess.Popen, probe_dir: Path, label: str, world: int, timeout: float = 300) -> tuple[str, str]:
    """Wait for the run's first process and for the records of all its ``world`` processes (the others may
    end after it); its ``(stdout, stderr)``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"attnkit did not end within {timeout} s:\n{out}\n{err}") from None
    records = [probe_dir / f"{label}-rank{r}.json" for r in range(world)]
    if records[0].is_file():  # the first process's own record is written before it exits
        seen = json.loads(records[0].read_text())["world_size"]
        assert seen in (None, world), f"the run had {seen} process(es), not {world}:\n{out}\n{err}"
    deadline = time.monotonic() + 60
    while not all(p.is_file() for p in records):
        if time.monotonic() > deadline:
            raise AssertionError(f"no probe record {[str(p) for p in records if not p.is_file()]}:\n{out}\n{err}")
        time.sleep(0.02)
    return out, err


def run(probe_dir: Path, label: str, *args: str, world: int = 1, timeout: float = 300) -> list[dict[str, Any]]:
    """Run ``attnkit *args`` probed to its end (it must succeed); the records of its ``world`` processes."""
    proc = start(probe_dir, label, *args)
    out, err = finish(proc, probe_dir, label, world, timeout)
    if proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{out}\n{err}")
    return records(probe_dir, label, world)


def records(probe_dir: Path, label: str, world: int = 1) -> list[dict[str, Any]]:
    """The probe records of the ``world`` processes of run ``label``, rank 0 first; no process beyond."""
    found = sorted(p.name for p in probe_dir.glob(f"{label}-rank*.json"))
    assert found == [f"{label}-rank{r}.json" for r in range(world)], found
    return [json.loads((probe_dir / f"{label}-rank{r}.json").read_text()) for r in range(world)]


# ---------------------------------------------------------------------------------------------- the run's side


def _crc(batch: Any) -> int:
    import torch

    crc = 0
    for item in batch if isinstance(batch, (list, tuple)) else [batch]:
        if isinstance(item, torch.Tensor):
            crc = zlib.crc32(item.detach().cpu().contiguous().numpy().tobytes(), crc)
    return crc


def probe(probe_dir: Path, label: str, pause_at: int | None = None) -> Any:
    """The probe callback (``probe.record`` holds what it saw); also for in-process runs."""
    import torch
    from lightning.pytorch.callbacks import Callback

    class Probe(Callback):
        def __init__(self) -> None:
            self.record: dict[str, Any] = {"pid": os.getpid(), "world_size": None, "global_rank": None, "steps": []}

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            self.record["world_size"], self.record["global_rank"] = trainer.world_size, trainer.global_rank

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            optimizer = trainer.optimizers[0]
            if not self.record["steps"]:
                scheduler = trainer.lr_scheduler_configs[0].scheduler
                state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
                torch.save(state, probe_dir / f"{label}-rank{trainer.global_rank}-start.pt")
            lr = optimizer.param_groups[0]["lr"]
            self.record["steps"].append([trainer.current_epoch, batch_idx, trainer.global_step, lr, _crc(batch)])

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if pause_at is None or trainer.global_step != pause_at:
                return
            (probe_dir / f"{label}-rank{trainer.global_rank}-paused").touch()
            deadline = time.monotonic() + PAUSE_TIMEOUT
            while not trainer.received_sigterm:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no SIGTERM within {PAUSE_TIMEOUT} s of step {pause_at}")
                time.sleep(0.01)

    return Probe()


def _write(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # whole or not there: the test polls for it


def main() -> None:
    probe_dir, label = Path(os.environ["PROBE_DIR"]), os.environ["PROBE_LABEL"]
    pause = os.environ.get("PROBE_PAUSE_AT")
    callback = probe(probe_dir, label, int(pause) if pause else None)

    import attnkit.api.runs
    from attnkit.cli import main as cli

    fit = attnkit.api.runs.fit

    def probed_fit(*args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> Any:
        return fit(*args, callbacks=[*(callbacks or []), callback], **kwargs)

    attnkit.api.runs.fit = probed_fit  # type: ignore[assignment]
    code: Any = 0
    try:
        cli(sys.argv[1:])
    except SystemExit as stop:
        code = 0 if stop.code is None else stop.code
        raise
    except BaseException:
        code = "exception"
        raise
    finally:
        rank = callback.record["global_rank"]
        if rank is None:  # ended before its Trainer was set up: the launcher's rank
            rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))
        _write(probe_dir / f"{label}-rank{rank}.json", {**callback.record, "code": code})


if __name__ == "__main__":
    main()
