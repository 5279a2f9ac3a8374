"""The sft task's masked loss against TRL's ``SFTTrainer`` with ``assistant_only_loss=True`` (a dev dependency): on
one fixed batch of the same model (a tiny random Llama with a ChatML template whose replies are marked with
``{% generation %}``, as TRL needs) and the same conversations, the same tokens count and the losses agree within
1e-5."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.data.sft.encode import collate_examples, encode_conversation, make_example
from attnkit.interop import load_pretrained
from attnkit.tasks.sft.module import assistant_loss, token_losses
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from chat_models import build_chat_model

CHATML_GENERATION = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CONVERSATIONS = [
    [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": f"What is {a} plus {b}?"},
        {"role": "assistant", "content": f"It is {a + b}."},
        *([{"role": "user", "content": "And doubled?"}, {"role": "assistant", "content": str(2 * (a + b))}] * (a % 2)),
    ]
    for a, b in [(1, 2), (3, 4), (5, 1), (7, 8), (2, 2), (9, 0)]
]


def test_the_masked_loss_equals_trl_sft_trainer_assistant_only_loss(tmp_path: Path) -> None:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    folder = build_chat_model(tmp_path / "model", context=128, template=CHATML_GENERATION)
    args = SFTConfig(
        output_dir=str(tmp_path / "trl"),
        assistant_only_loss=True,
        per_device_train_batch_size=len(CONVERSATIONS),
        max_length=128,
        packing=False,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
    )
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        args=args,
        train_dataset=Dataset.from_list([{"messages": c} for c in CONVERSATIONS]),
        processing_class=AutoTokenizer.from_pretrained(folder),
    )
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.eval()
    with torch.no_grad():
        trl_loss = float(trainer.compute_loss(trainer.model, dict(batch)))

    tok = tokenizer_from_folder(folder)
    template = ChatTemplate.from_folder(folder)
    examples = [make_example(*encode_conversation(tok, template, c))[0] for c in CONVERSATIONS]
    # the same ids and the same counted tokens, conversation by conversation (TRL's batch is shuffled)
    trl_rows = {}  # inputs (all ids but the last) -> targets (the next ids, -100 where not counted)
    for ids, labels, mask in zip(batch["input_ids"], batch["labels"], batch["attention_mask"]):
        n = int(mask.sum())
        trl_rows[tuple(ids[: n - 1].tolist())] = labels[1:n].tolist()
    assert {tuple(e.inputs): e.targets for e in examples} == trl_rows
    model = load_pretrained(folder).model
    with torch.no_grad():
        losses, counted = token_losses(model, collate_examples([[e] for e in examples], pad_id=0))
    ours = float(losses[counted].sum() / counted.sum())
    assert int(counted.sum()) == sum(int((r != IGNORE_INDEX).sum()) for r in batch["labels"])
    assert ours == pytest.approx(trl_loss, abs=1e-5, rel=0)
    # the loss the task trains on (SFTModule.step: the head chunk by chunk, no [N, V] logits)
    with torch.no_grad():
        task_loss, _, _ = assistant_loss(model, collate_examples([[e] for e in examples], pad_id=0))
    assert float(task_loss) == pytest.approx(trl_loss, abs=1e-5, rel=0)
