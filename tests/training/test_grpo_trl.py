"""The grpo task's loss against TRL's ``GRPOTrainer`` (a dev dependency): on one fixed batch of the same tiny model
(a random Llama saved as a Hugging Face folder), the same prompts and completions (left-padded prompts, right-padded
completions for TRL; one right-padded sequence each for attnkit), the same old and reference log-probabilities and
advantages, the loss and its KL and clip metrics agree within 1e-5, for beta 0 and > 0 and each normalisation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.interop import load_pretrained
from attnkit.tasks.grpo.losses import grpo_loss, token_logps
from chat_models import build_chat_model

PROMPTS = ["The old owl sat on the", "It was", "The big fox", "The quiet cat looked at the moon and"]
COMPLETION_LENGTHS = [5, 3, 6, 1]  # right-padded to 6; max_completion_length 8 (Dr. GRPO divides by it)
MAX_COMPLETION = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("grpo_trl"), context=64)


def _batch(folder: Path) -> dict[str, torch.Tensor]:
    """TRL's inputs: prompts left-padded, completions right-padded, advantages and old / ref log-probabilities."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    g = torch.Generator().manual_seed(0)
    width, cwidth = max(map(len, prompts)), max(COMPLETION_LENGTHS)
    prompt_ids = torch.full((len(prompts), width), tokenizer.pad_token_id)
    prompt_mask = torch.zeros_like(prompt_ids)
    for i, p in enumerate(prompts):
        prompt_ids[i, width - len(p) :] = torch.tensor(p)
        prompt_mask[i, width - len(p) :] = 1
    completion_ids = torch.randint(3, tokenizer.vocab_size, (len(prompts), cwidth), generator=g)
    completion_mask = (torch.arange(cwidth) < torch.tensor(COMPLETION_LENGTHS)[:, None]).long()
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id)
    shift = torch.randn(len(prompts), cwidth, generator=g)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.2, -0.7, 0.4, -1.5]),
        "shift": shift,  # old = logps + 0.3 shift (ratios off 1: some clipped), ref = logps - 0.5 shift
    }


def _ours(folder: Path, batch: dict[str, torch.Tensor], **options: object) -> dict[str, float]:
    model = load_pretrained(folder).model.train()
    rows = []
    for p_ids, p_mask, c_ids, c_mask in zip(
        batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"]
    ):
        rows.append((p_ids[p_mask.bool()].tolist(), c_ids[c_mask.bool()].tolist()))
    width = max(len(p) + len(c) for p, c in rows) - 1
    inputs = torch.zeros(len(rows), width, dtype=torch.long)
    targets = torch.full_like(inputs, IGNORE_INDEX)
    for i, (p, c) in enumerate(rows):
        ids = torch.tensor(p + c)
        inputs[i, : len(ids) - 1] = ids[:-1]
        targets[i, len(p) - 1 : len(ids) - 1] = ids[len(p) :]
    mask = targets != IGNORE_INDEX
    with torch.no_grad():
        logps = token_logps(model, inputs, targets)
    shift = torch.zeros_like(logps).masked_scatter(mask, batch["shift"][batch["completion_mask"].bool()])
    loss, metrics = grpo_loss(
        logps,
        batch["advantages"],
        mask,
        old_logps=logps + 0.3 * shift,
        ref_logps=logps - 0.5 * shift,
        max_completion_length=MAX_COMPLETION,
        **options,  # type: ignore[arg-type]
    )
    return {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}


@pytest.fixture(scope="module")
def trl_trainer(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One ``GRPOTrainer`` (its construction is slow); each case sets its public ``beta``, ``loss_type`` and
    ``epsilon_low`` / ``epsilon_high``, what its ``__init__`` copies from the config."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("trl")),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=MAX_COMPLETION,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        logging_strategy="no",
    )
    return GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=Dataset.from_list([{"prompt": p} for p in PROMPTS]),
        processing_class=AutoTokenizer.from_pretrained(folder),
    )


def _trl(trainer: Any, batch: dict[str, torch.Tensor], *, beta: float, loss_type: str, epsilon: float = 0.2) -> dict:
    trainer.beta, trainer.loss_type, trainer.epsilon_low, trainer.epsilon_high = beta, loss_type, epsilon, epsilon
    trainer.model.eval()  # the loss of one batch (the train mode only divides by the accumulation steps)
    inputs = {k: v for k, v in batch.items() if k != "shift"}
    with torch.no_grad():  # the policy's own log-probabilities, to build old / ref from as attnkit does
        full = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logits = trainer.model(input_ids=full, attention_mask=attention).logits[:, -batch["shift"].shape[1] - 1 : -1]
        logps = logits.float().log_softmax(-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
        inputs["old_per_token_logps"] = logps + 0.3 * batch["shift"]
        inputs["ref_per_token_logps"] = logps - 0.5 * batch["shift"]
        inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
        loss = float(trainer.compute_loss(trainer.model, inputs))
    trainer.log({"loss": loss})  # TRL's public log: its metrics of the batch
    logged = trainer.state.log_history[-1]
    return {k.removeprefix("eval_"): v for k, v in logged.items()}


@pytest.mark.parametrize(
    "options",
    [
        {"beta": 0.0, "loss_type": "grpo"},
        {"beta": 0.04, "loss_type": "grpo", "epsilon": 0.1},
        {"beta": 0.1, "loss_type": "dr_grpo"},
        {"beta": 0.0, "loss_type": "dr_grpo", "epsilon": 0.3},
        {"beta": 0.05, "loss_type": "dapo"},
    ],
    ids=["grpo", "grpo-beta", "dr_grpo-beta", "dr_grpo", "dapo-beta"],
)
def test_the_loss_equals_trl_grpo_trainer(options: dict[str, Any], folder: Path, trl_trainer: Any) -> None:
    batch = _batch(folder)
    expected = _trl(trl_trainer, batch, **options)
    got = _ours(folder, batch, **options)
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-5, rel=0)
    assert abs(expected["loss"]) > 1e-3  # not a trivial batch
    assert expected["clip_ratio/region_mean"] > 0  # some ratios are clipped
    for name in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
        assert got[name] == pytest.approx(expected[name], abs=1e-6), name
    if options["beta"]:
        assert got["kl"] == pytest.approx(expected["kl"], abs=1e-5, rel=0)
