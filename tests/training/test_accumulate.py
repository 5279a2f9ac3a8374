"""``trainer.accumulate_grad_batches`` and ``trainer.activation_checkpointing`` on the three model
families (encoder: reverse, classify; decoder: lm; encoder-decoder: translate), trained in process.

Accumulating k batches gives the gradient of the one batch made of them, exactly (within float32
rounding), also when the batches count different numbers of targets (lm's ignored ``<bos>`` and
padding, translate's sentences of different lengths): the loss is the mean over every target of
the k batches, not the mean of k per-batch means. Checkpointing every block changes no result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from cli_helpers import QUIET_TRAINING
from lightning.pytorch.callbacks import Callback
from torch.utils.checkpoint import checkpoint

import attnkit.nn.stacks as stacks_module
from attnkit.api import train
from attnkit.tasks import TASKS
from attnkit.training.sharding import transformer_stacks

K, B = 4, 8  # 4 batches of 8 against 1 of 32
TINY: dict[str, dict[str, Any]] = {
    "reverse": {"data.train_size": 64, "data.val_size": 32, "data.test_size": 32, "data.seq_len": 8},
    "classify": {
        "data.synthetic_size": 240, "data.max_len": 24, "data.min_freq": 1, "model.d_model": 32,
        "model.dim_feedforward": 64, "model.num_layers": 2, "model.dropout": 0.0,
    },
    "lm": {
        "data.builtin_documents": 60, "model.d_model": 32, "model.num_layers": 2, "model.num_heads": 2,
        "model.dim_feedforward": 64, "model.max_len": 32,
    },
    "translate": {
        "data.num_pairs": 400, "data.batch_by_length": False, "model.d_model": 32, "model.dim_feedforward": 64,
        "model.num_layers": 2, "model.num_decoder_layers": 2, "model.dropout": 0.0,
    },
}  # fmt: skip
COMMON = {**QUIET_TRAINING, "trainer.max_epochs": 1, "optim.gradient_clip_val": None, "seed": 7}


class Gradients(Callback):
    """Records, per optimiser step, each parameter's gradient as the optimiser used it (a step
    post-hook: after Lightning's hooks and clipping; Lightning runs the closure inside ``step``)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, torch.Tensor]] = []

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        named = dict(pl_module.named_parameters())

        def record(*_: Any) -> None:
            self.steps.append({n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None})

        trainer.optimizers[0].register_step_post_hook(record)


def _first_step(tmp_path: Path, task: str, name: str, **overrides: Any) -> dict[str, torch.Tensor]:
    grads = Gradients()
    train(task, output_dir=str(tmp_path), name=name, callbacks=[grads], **{**COMMON, **TINY[task], **overrides})
    assert grads.steps, "no optimiser step"
    return grads.steps[0]


def _assert_same(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], atol: float) -> None:
    assert actual.keys() == expected.keys() and expected
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("task", sorted(TINY))
def test_accumulated_batches_give_the_gradient_of_the_one_large_batch(tmp_path: Path, task: str):
    large = _first_step(tmp_path, task, "large", **{"trainer.batch_size": K * B, "trainer.limit_train_batches": 1})
    accumulated = _first_step(
        tmp_path,
        task,
        "accumulated",
        **{"trainer.batch_size": B, "trainer.limit_train_batches": K, "trainer.accumulate_grad_batches": K},
    )
    assert max(float(g.abs().max()) for g in large.values()) > 1e-4, "no real gradient"
    _assert_same(accumulated, large, atol=1e-6)


def test_accumulation_keeps_the_schedule_counting_optimiser_steps(tmp_path: Path):
    """The cosine period is the run's number of optimiser steps (batches / k), and checkpoints and
    the step count are per optimiser step."""
    overrides = {**COMMON, **TINY["reverse"], "trainer.batch_size": B, "trainer.accumulate_grad_batches": K}
    overrides |= {"data.train_size": 128, "trainer.max_epochs": 2, "trainer.checkpoint_every_n_steps": 1}
    lrs: list[float] = []

    class LearningRates(Callback):
        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            lrs.append(optimizer.param_groups[0]["lr"])

    result = train("reverse", output_dir=str(tmp_path), name="acc", callbacks=[LearningRates()], **overrides)
    steps = 2 * 128 // B // K
    assert len(lrs) == steps
    scheduler = result.module.lr_schedulers()
    assert scheduler.max_iters == steps and scheduler.last_epoch == steps
    last = torch.load(result.run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == steps


def test_token_weighting_matters_where_batches_count_different_targets():
    """The data the equality test uses for lm and translate really has batches of unequal target
    counts, so the per-batch mean of Lightning's plain accumulation would not pass it."""
    for task, overrides in (("lm", TINY["lm"]), ("translate", TINY["translate"])):
        nested: dict[str, dict[str, Any]] = {}
        for key, value in {**COMMON, **overrides, "trainer.batch_size": B}.items():
            if "." in key:
                section, field = key.split(".")
                nested.setdefault(section, {})[field] = value
        cfg = TASKS[task].config(nested)
        dm = TASKS[task].build_datamodule(cfg)
        dm.setup("fit")
        batches = iter(dm.train_dataloader())
        counts = set()
        for _ in range(K):
            batch = next(batches)
            if task == "lm":  # (inputs, targets): ignored targets are negative
                counts.add(int((batch[1] >= 0).sum()))
            else:  # (src, src_mask, tgt_in, tgt_out, index): padded targets are pad_id
                counts.add(int((batch[3] != TASKS[task].model_spec(cfg, dm).config["pad_id"]).sum()))
        assert len(counts) > 1, (task, counts)


@pytest.mark.parametrize("task", ["reverse", "lm", "translate"])
def test_activation_checkpointing_changes_no_result(tmp_path: Path, task: str, monkeypatch: pytest.MonkeyPatch):
    overrides = {**COMMON, **TINY[task], "trainer.batch_size": B, "trainer.limit_train_batches": 3}
    if task != "reverse":  # dropout on: the recomputed blocks must draw the same masks
        overrides["model.dropout"] = 0.2
    plain_grads, checkpointed_grads = Gradients(), Gradients()
    plain = train(task, output_dir=str(tmp_path), name="plain", callbacks=[plain_grads], **overrides)
    recomputed = []

    def spy(function: Any, *args: Any, **kwargs: Any) -> Any:
        recomputed.append(type(function).__name__)
        return checkpoint(function, *args, **kwargs)

    monkeypatch.setattr(stacks_module, "checkpoint", spy)
    checkpointed = train(
        task,
        output_dir=str(tmp_path),
        name="ac",
        callbacks=[checkpointed_grads],
        **overrides,
        **{"trainer.activation_checkpointing": True},
    )
    blocks = sum(len(s.layers) for s in transformer_stacks(checkpointed.module.model))
    assert len(recomputed) == 3 * blocks  # every block of every training step, nothing in evaluation
    assert len(plain_grads.steps) == len(checkpointed_grads.steps) == 3
    for a, b in zip(checkpointed_grads.steps, plain_grads.steps):
        _assert_same(a, b, atol=1e-6)
    _assert_same(dict(checkpointed.module.named_parameters()), dict(plain.module.named_parameters()), atol=1e-6)
    assert checkpointed.metrics == pytest.approx(plain.metrics, abs=1e-6)


STEPS = 3


@pytest.mark.parametrize("task", ["reverse", "lm", "translate"])
def test_every_accumulated_step_is_the_step_of_its_one_large_batch(tmp_path: Path, task: str):
    """Not only the first: each of 3 optimiser steps (the step's target count starts again at 0 at
    each) gets the gradient of its k batches made one, and the weights after the 3 steps are the same.
    lm and translate: batches of different target counts (test_token_weighting_matters_...)."""
    overrides = {"data.train_size": 128} if task == "reverse" else {}
    runs, steps = {}, {}
    for name, batch, batches, k in (("large", K * B, STEPS, 1), ("accumulated", B, K * STEPS, K)):
        grads = Gradients()
        settings = {"trainer.batch_size": batch, "trainer.limit_train_batches": batches}
        settings |= {"trainer.accumulate_grad_batches": k, "optim.warmup": 1}
        runs[name] = train(
            task,
            output_dir=str(tmp_path),
            name=name,
            callbacks=[grads],
            **{**COMMON, **TINY[task], **overrides, **settings},
        )
        steps[name] = grads.steps
    assert len(steps["large"]) == len(steps["accumulated"]) == STEPS
    for i, (accumulated, large) in enumerate(zip(steps["accumulated"], steps["large"])):
        assert max(float(g.abs().max()) for g in large.values()) > 1e-4, f"step {i}: no real gradient"
        _assert_same(accumulated, large, atol=1e-5)
    # The weights after the 3 steps. Where the loss does not depend on a weight (the attention keys'
    # bias: softmax ignores a shift), its gradient is float32 rounding noise, which Adam's normalised
    # step turns into a full step of either sign: those weights are left out.
    after = {run: dict(runs[run].module.named_parameters()) for run in ("large", "accumulated")}
    for name, weight in after["large"].items():
        used = torch.stack([step[name].abs() for step in steps["large"]]).amax(0) > 1e-6
        assert used.float().mean() > 0.5, name
        torch.testing.assert_close(after["accumulated"][name].detach()[used], weight.detach()[used], rtol=0, atol=1e-5)
