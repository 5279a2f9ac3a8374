"""The dpo task's losses and metrics against TRL's ``DPOTrainer`` (a dev dependency): on one fixed batch of the
same policy and reference (tiny random Llamas of different seeds) and the same pairs (as conversations and as
plain text), the same completion tokens count and loss and every metric agree within 1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from preference_helpers import conversational_pairs, policy_and_reference, text_pairs

from attnkit.data.preference.module import collate_pairs, encode_pair
from attnkit.data.preference.read import Pair
from attnkit.interop import load_pretrained
from attnkit.tasks.preference.losses import dpo_loss, sequence_logps
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder

METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected")  # fmt: skip


def trl_metrics(policy: Path, reference: Path, records: list[dict], tmp_path: Path, **options: object) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=len(records),
        max_length=128,
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16, which its reference forward would run in
        save_strategy="no",
        logging_strategy="no",
        **options,
    )
    trainer = DPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy),
        ref_model=AutoModelForCausalLM.from_pretrained(reference),
        args=args,
        train_dataset=Dataset.from_list(records),
        processing_class=AutoTokenizer.from_pretrained(policy),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    with torch.no_grad():
        loss = float(trainer.compute_loss(trainer.model, dict(batch)))
    trainer.log({"loss": loss})  # TRL's public log: its metrics of the batch, averaged
    return {**trainer.state.log_history[-1], "tokens": int(batch["completion_mask"].sum())}


def ours(policy: Path, reference: Path, records: list[dict], **options: object) -> dict:
    tokenizer, template = tokenizer_from_folder(policy), ChatTemplate.from_folder(policy)
    rows = [encode_pair(tokenizer, template, Pair(r["prompt"], r["chosen"], r["rejected"]), 128)[0] for r in records]
    inputs, targets = collate_pairs(rows, pad_id=0)
    with torch.no_grad():
        logps, tokens = sequence_logps(load_pretrained(policy).model.train(), inputs, targets)
        ref, _ = sequence_logps(load_pretrained(reference).model.eval(), inputs, targets)
    n = len(records)
    loss, metrics = dpo_loss(
        logps[:n], logps[n:], ref[:n], ref[n:], chosen_tokens=tokens[:n], rejected_tokens=tokens[n:], **options
    )
    return {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}, "tokens": int(tokens.sum())}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return policy_and_reference(tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize(
    ("records", "trl_options", "options"),
    [
        (conversational_pairs, {"beta": 0.1}, {"beta": 0.1}),
        (text_pairs, {"beta": 0.3}, {"beta": 0.3}),
        (conversational_pairs, {"beta": 0.2, "loss_type": ["ipo"]}, {"beta": 0.2, "loss_type": "ipo"}),
        (
            text_pairs,
            {"beta": 0.1, "loss_type": ["robust"], "label_smoothing": 0.2},
            {"beta": 0.1, "loss_type": "robust", "label_smoothing": 0.2},
        ),
    ],
    ids=["sigmoid-chat", "sigmoid-text", "ipo-chat", "robust-text"],
)
def test_loss_and_metrics_equal_trl_dpo_trainer(records, trl_options, options, models, tmp_path: Path) -> None:
    policy, reference = models
    expected = trl_metrics(policy, reference, records(), tmp_path, **trl_options)
    got = ours(policy, reference, records(), **options)
    assert got["tokens"] == expected["tokens"]
    assert abs(expected["rewards/margins"]) > 1e-2  # policy and reference differ: the figures are not trivial
    for name in ("loss", *METRICS):
        assert got[name] == pytest.approx(expected[name], abs=1e-5, rel=0), name
