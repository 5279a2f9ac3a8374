import os
import subprocess
import sys

TINY_REVERSE = [
    "data.train_size=4000",
    "data.val_size=128",
    "data.test_size=256",
    "data.seq_len=8",
    "trainer.max_epochs=2",
    "trainer.batch_size=32",
    "trainer.threads=1",
    "trainer.progress_bar=false",
    "optim.lr=2e-3",
    "optim.warmup=20",
]

# In-process `attnkit.api.train` overrides for small test runs: one thread, no bar, no report.
QUIET_TRAINING = {
    "trainer.batch_size": 16,
    "trainer.threads": 1,
    "trainer.progress_bar": False,
    "trainer.report": False,
    "optim.lr": 5e-3,
    "optim.warmup": 10,
}


def run_cli(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `attnkit` entry point in a subprocess, one torch thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ATTNKIT_RUN_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"attnkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def metrics_in_one_process(run) -> dict:
    """The test metrics of a (multi-process) run's checkpoint scored in this process, on one device and no
    strategy: what ``attnkit test RUN trainer.devices=1 trainer.strategy=auto --json`` prints (the CLI's own test
    covers the command; this saves a process start of about 8 s per use)."""
    from attnkit.api import evaluate

    return evaluate(run, trainer={"devices": 1, "strategy": "auto"})
