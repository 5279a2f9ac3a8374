"""``attnkit train dpo`` / ``train kto`` under DDP (2 CPU processes, gloo, 1 thread each) and stopped by SIGTERM then
resumed with ``--resume``, probed (probed_cli.py): what each process really ran. Full fine-tuning of the tiny ChatML
Llama of tests/chat_models.py with precomputed reference log-probabilities (each process computes half of every
split's records, then every process holds all of them) for dpo; LoRA, the reference the base with its adapters
switched off, for kto."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import probed_cli
import pytest
import torch
from cli_helpers import metrics_in_one_process

from attnkit import api
from attnkit.config import parse_overrides
from attnkit.interop import load_pretrained
from attnkit.tasks import load_run
from attnkit.tasks.preference.losses import sequence_logps
from attnkit.training.checkpoint import load_checkpoint_file
from chat_models import build_chat_model

TRAIN = 32  # records: 32 / BATCH batches per epoch in one process, half as many per process under DDP
BATCH = {"dpo": 4, "kto": 8}
OPTIONS = {"dpo": ["model.lora=null", "loss.precompute_reference=true", "optim.lr=1e-3"], "kto": ["optim.lr=2e-2"]}
COMMON = [
    "trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "trainer.accelerator=cpu",
    "trainer.deterministic=true", "optim.warmup=2", "seed=0",
]  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The base model, sums as pairs (dpo) and feedback (kto): 32 train, 8 val and 8 test records (kto's test
    records are its val records: one batch, see the DDP test); kto's train records mostly desirable."""
    folder = tmp_path_factory.mktemp("preference_ddp")
    paths = {"base": build_chat_model(folder / "base", context=64)}
    sums = [(a, b) for a in range(8) for b in range(6)]
    for name, numbers in {"train": sums[:TRAIN], "val": sums[TRAIN:40], "test": sums[40:]}.items():
        pairs = [
            {"prompt": [{"role": "user", "content": f"{a} plus {b}?"}],
             "chosen": [{"role": "assistant", "content": f"{a + b}."}],
             "rejected": [{"role": "assistant", "content": f"Maybe {a + b + 1}, or so."}]}
            for a, b in numbers
        ]  # fmt: skip
        good = [i % 4 != 0 if name == "train" else bool(i % 3) for i in range(len(pairs))]
        feedback = [{"prompt": p["prompt"], "completion": p["chosen" if g else "rejected"], "label": g}
                    for p, g in zip(pairs, good)]  # fmt: skip
        if name == "test":
            paths["kto-test"] = paths["kto-val"]
        for task, records in (("dpo", pairs), ("kto", feedback)) if name != "test" else (("dpo", pairs),):
            paths[f"{task}-{name}"] = folder / f"{task}-{name}.jsonl"
            paths[f"{task}-{name}"].write_text("".join(json.dumps(r) + "\n" for r in records))
    return paths


def _args(files: dict[str, Path], task: str) -> list[str]:
    return [f"model.init={files['base']}", f"data.source={files[f'{task}-train']}",
            f"data.val_source={files[f'{task}-val']}", f"data.test_source={files[f'{task}-test']}",
            *COMMON, f"trainer.batch_size={BATCH[task]}", *OPTIONS[task]]  # fmt: skip


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint_file(run / "checkpoints" / "last.ckpt")["state_dict"]


@pytest.mark.parametrize("task", ["dpo", "kto"])
def test_trains_under_ddp_and_scores_as_one_process(files: dict[str, Path], task: str, tmp_path: Path) -> None:
    """Each process trains its own half of each epoch's batches, and the run's test metrics (each process scores
    its share of the test batches, the sums then gathered) are those of its checkpoint scored in one process
    within 1e-6: the same records in the same batches, only the order of the float sums differs (~1e-7 of these
    magnitudes). kto's KL estimate is the mean over every process's KL sequences: its test split is one batch, so
    that the second process scores a padding batch, which must count in neither the metrics nor that mean."""
    args = ["train", task, "--output_dir", str(tmp_path), "name=ddp", *_args(files, task), "trainer.max_epochs=1"]
    ranks = probed_cli.run(tmp_path / "probes", "ddp", *args, "trainer.strategy=ddp", "trainer.devices=2", world=2)
    assert [(r["world_size"], r["global_rank"]) for r in ranks] == [(2, 0), (2, 1)], "not a 2-process run"
    first, second = ([s[2] for s in r["steps"]] for r in ranks)
    assert first == second == list(range(TRAIN // BATCH[task] // 2))  # half the one-process steps each, in step
    assert {s[4] for s in ranks[0]["steps"]}.isdisjoint(s[4] for s in ranks[1]["steps"])  # each its own batches
    run = tmp_path / task / "ddp"
    ddp = {k: v for k, v in json.loads((run / "metrics.json").read_text())["metrics"].items() if k.startswith("test/")}
    one = metrics_in_one_process(run)  # the same checkpoint scored in one process
    assert set(one) == set(ddp) and {"test/loss", "test/rewards/chosen", "test/logps/rejected"} <= set(ddp)
    for key, value in one.items():
        assert ddp[key] == pytest.approx(value, abs=1e-6), key
    if task == "kto":  # not clamped to 0, so that a padding batch counted in the KL mean would change it
        assert ddp["test/kl"] > 0.01
    if task == "dpo":  # the values each process computed for its half, gathered: every record's, in order
        saved = load_checkpoint_file(run / "checkpoints" / "last.ckpt")["precomputed_reference"]
        loaded = load_run(run)
        datamodule = loaded.task.build_datamodule(loaded.config, loaded.hparams["artifacts"])
        datamodule.setup()
        base = load_pretrained(files["base"]).model.eval()
        for split, size in {"train": TRAIN, "val": 8, "test": 8}.items():
            inputs, targets, _ = datamodule.batch(split, range(size))
            with torch.no_grad():
                logps = sequence_logps(base, inputs, targets)[0]
            want = torch.stack((logps[:size], logps[size:]), dim=1)
            assert torch.allclose(saved[split]["logps"], want, atol=1e-4), split


@pytest.mark.parametrize("task", ["dpo", "kto"])
def test_stopped_by_sigterm_then_resumed_ends_with_the_uninterrupted_runs_weights(
    files: dict[str, Path], task: str, tmp_path: Path
) -> None:
    per_epoch = TRAIN // BATCH[task]
    stop = per_epoch + 2  # mid-way through the second epoch
    args = [*_args(files, task), "trainer.max_epochs=2", "trainer.checkpoint_every_n_steps=100"]
    probes, cut = tmp_path / "probes", tmp_path / task / "cut"
    proc = probed_cli.start(probes, "cut", "train", task, "--output_dir", str(tmp_path), "name=cut", *args,
                            pause_at=stop)  # fmt: skip
    probed_cli.wait_for([probes / "cut-rank0-paused"], proc)
    proc.send_signal(signal.SIGTERM)
    out, err = probed_cli.finish(proc, probes, "cut", world=1)
    assert proc.returncode == 143, f"exit code {proc.returncode}:\n{out}\n{err}"
    assert load_checkpoint_file(cut / "checkpoints" / "last.ckpt")["global_step"] == stop
    command = next(line.strip() for line in err.splitlines() if line.strip().startswith("attnkit train"))
    assert command == f"attnkit train {task} --resume {shlex.quote(str(cut))}"
    [resumed] = probed_cli.run(probes, "resumed", *shlex.split(command)[1:])
    probe = probed_cli.probe(probes, "full")  # the uninterrupted run in this process (a process start saved)
    api.train(task, parse_overrides(args), callbacks=[probe], output_dir=str(tmp_path), name="full")
    full = probe.record
    [stopped] = probed_cli.records(probes, "cut")
    assert len(full["steps"]) == 2 * per_epoch
    assert stopped["steps"] == full["steps"][:stop] and resumed["steps"] == full["steps"][stop:]
    resumed_weights, full_weights = _weights(cut), _weights(tmp_path / task / "full")
    assert resumed_weights.keys() == full_weights.keys() and resumed_weights
    differing = [k for k in full_weights if not torch.equal(resumed_weights[k], full_weights[k])]
    assert not differing, f"weights differ from the uninterrupted run's: {differing}"
