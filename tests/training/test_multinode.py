"""Several machines: two `torchrun` launchers (2 nodes x 1 process) on this machine train one run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from cli_helpers import TINY_REVERSE

from attnkit.training.checkpoint import load_checkpoint_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_nodes_train_one_run_written_once(tmp_path: Path):
    port = _free_port()
    procs = []
    for node, tz in ((0, "UTC"), (1, "Asia/Kolkata")):
        # Each launcher is on its own, as on two machines: their clocks even name different times
        # (TZ), so a run folder named after each one's clock would differ; the run must still be one.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TZ": tz}
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
            "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "attnkit.cli", "train", "reverse", "--output_dir", str(tmp_path),
            "trainer.num_nodes=2", "trainer.devices=1", "trainer.strategy=ddp", "trainer.accelerator=cpu",
            *TINY_REVERSE, "trainer.max_epochs=1", "trainer.report=false",
        ]  # fmt: skip
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=600))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    for node, (proc, (out, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"node {node} exited {proc.returncode}:\n{out}\n{err}"

    runs = sorted((tmp_path / "reverse").iterdir())
    assert len(runs) == 1, f"one run folder expected, got {runs}"
    run = runs[0]
    assert sorted(p.name for p in tmp_path.rglob("metrics.json")) == ["metrics.json"]
    assert sorted(p.name for p in tmp_path.rglob("config.yaml")) == ["config.yaml"]
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert 0.0 <= metrics["test/acc"] <= 1.0 and metrics["test/loss"] > 0.0
    assert load_checkpoint_file(run / "checkpoints" / "last.ckpt")["global_step"] == 4000 // 32 // 2  # halves
    # One summary, from global rank 0 (node 0); node 1 (LOCAL_RANK 0 too) prints none.
    assert f"run   {run}" in outputs[0][0]
    assert "finished in" not in outputs[1][0]
