"""The kto task's loss and metrics against TRL's ``KTOTrainer`` (a dev dependency): on one fixed batch of the same
policy and reference (tiny random Llamas of different seeds) and the same records (conversations and plain text,
desirable and undesirable), with the KL term from the same mismatched pairs, they agree within 1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from preference_helpers import feedback, policy_and_reference

from attnkit.data.preference.module import collate_feedback, encode_feedback
from attnkit.data.preference.read import Feedback
from attnkit.interop import load_pretrained
from attnkit.tasks.preference.losses import kto_loss, sequence_logps
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder

METRICS = ("kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return policy_and_reference(tmp_path_factory.mktemp("models"))


def trl_metrics(policy: Path, reference: Path, records: list[dict], tmp_path: Path, **options: object) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    args = KTOConfig(
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
    trainer = KTOTrainer(
        model=AutoModelForCausalLM.from_pretrained(policy),
        ref_model=AutoModelForCausalLM.from_pretrained(reference),
        args=args,
        train_dataset=Dataset.from_list(records),
        processing_class=AutoTokenizer.from_pretrained(policy),
    )
    batch = next(iter(trainer.get_train_dataloader()))  # sequential: the records in order
    trainer.model.train()
    with torch.no_grad():
        loss = float(trainer.compute_loss(trainer.model, dict(batch)))
    trainer.log({"loss": loss})
    return trainer.state.log_history[-1]


def ours(policy: Path, reference: Path, records: list[dict], **options: float) -> dict:
    tokenizer, template = tokenizer_from_folder(policy), ChatTemplate.from_folder(policy)
    rows = []
    for r in records:
        encoded = encode_feedback(tokenizer, template, Feedback(r["prompt"], r["completion"], r["label"]), 128)[0]
        rows.append((encoded, r["label"]))
    inputs, targets, labels, kl_inputs, kl_targets = collate_feedback(rows, pad_id=0, max_len=128)
    policy_model, reference_model = load_pretrained(policy).model.train(), load_pretrained(reference).model.eval()
    with torch.no_grad():
        logps, _ = sequence_logps(policy_model, inputs, targets)
        ref, _ = sequence_logps(reference_model, inputs, targets)
        kl = (sequence_logps(policy_model, kl_inputs, kl_targets)[0]
              - sequence_logps(reference_model, kl_inputs, kl_targets)[0]).mean().clamp(min=0)  # fmt: skip
    loss, metrics = kto_loss(logps, ref, labels, kl, **options)
    return {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}


@pytest.mark.parametrize(
    ("conversational", "options"),
    [(True, {"beta": 0.1}), (False, {"beta": 0.5, "desirable_weight": 1.5, "undesirable_weight": 0.7})],
    ids=["chat", "text-weighted"],
)
def test_loss_and_metrics_equal_trl_kto_trainer(conversational, options, models, tmp_path: Path) -> None:
    policy, reference = models
    records = feedback(conversational)
    expected = trl_metrics(policy, reference, records, tmp_path, **options)
    got = ours(policy, reference, records, **options)
    assert abs(expected["rewards/margins"]) > 1e-2  # policy and reference differ: the figures are not trivial
    for name in ("loss", *METRICS):
        assert got[name] == pytest.approx(expected[name], abs=1e-5, rel=0), name
