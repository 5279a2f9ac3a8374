"""``attnkit train dpo`` / ``train kto``: the data in TRL's columns (errors as ``file:line``), the completion-only
log-probabilities (exactly no gradient at prompt positions), the LoRA reference (the base with the adapters
switched off), and short runs that learn a distinctive chosen style (LoRA, dpo) and train every weight beside a
frozen reference copy (kto), whose results chat and export load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from preference_helpers import conversational_pairs

from attnkit import api
from attnkit.data.preference.encode import collate_sequences
from attnkit.data.preference.module import collate_pairs, encode_pair
from attnkit.data.preference.read import Pair, read_feedback, read_pairs
from attnkit.errors import ConfigError
from attnkit.interop import load_pretrained
from attnkit.tasks import load_model
from attnkit.tasks.preference.losses import completion_logps, dpo_loss, sequence_logps
from attnkit.tasks.preference.module import adapters_disabled
from attnkit.text.chat import ChatTemplate
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from chat_models import build_chat_model


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("preference_base"), context=128)


def _write(path: Path, records: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def test_only_completion_tokens_count_prompt_positions_get_exactly_zero_gradient(base: Path) -> None:
    tokenizer, template = tokenizer_from_folder(base), ChatTemplate.from_folder(base)
    pairs = conversational_pairs()[:3]
    encoded = [encode_pair(tokenizer, template, Pair(p["prompt"], p["chosen"], p["rejected"]), 128)[0] for p in pairs]
    rows = [row for row in encoded if row is not None]
    assert len(rows) == len(pairs)
    sequences = [c for c, _ in rows] + [r for _, r in rows]
    inputs, targets = collate_pairs(rows, pad_id=0)
    model = load_pretrained(base).model
    logits = model(inputs).detach().requires_grad_(True)
    logps, tokens = completion_logps(logits, targets)
    n = len(pairs)
    loss, _ = dpo_loss(logps[:n], logps[n:], logps[:n].detach() - 1, logps[n:].detach(), beta=0.1)
    loss.backward()
    assert logits.grad is not None
    for row, s in enumerate(sequences):
        grad = logits.grad[row].abs().sum(-1)
        assert torch.equal(grad[: s.prompt_len - 1], torch.zeros(s.prompt_len - 1))  # the prompt: exactly zero
        assert bool((grad[s.prompt_len - 1 : len(s.ids) - 1] > 0).all())  # every completion token counts
        assert torch.equal(grad[len(s.ids) - 1 :], torch.zeros_like(grad[len(s.ids) - 1 :]))  # padding
        assert int(tokens[row]) == s.completion
    # the model-level log-probs (the head on the completion tokens only) are the same
    with torch.no_grad():
        assert torch.allclose(sequence_logps(model, inputs, targets)[0], logps.detach(), atol=1e-4)


def test_collate_marks_the_completion_tokens() -> None:
    from attnkit.data.preference.encode import Encoded

    inputs, targets = collate_sequences([Encoded([1, 2, 3, 4, 5], 3), Encoded([6, 7, 8], 1)], pad_id=0)
    assert inputs.tolist() == [[1, 2, 3, 4], [6, 7, 0, 0]]
    assert targets.tolist() == [[-100, -100, 4, 5], [7, 8, -100, -100]]


def test_the_implicit_prompt_is_trls(tmp_path: Path) -> None:
    from trl import extract_prompt

    record = {
        "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                   {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
        "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                     {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5"}],
    }  # fmt: skip
    (pair,) = read_pairs(_write(tmp_path / "p.jsonl", [record]))
    expected = extract_prompt(record)
    assert (pair.prompt, pair.chosen, pair.rejected) == (expected["prompt"], expected["chosen"], expected["rejected"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "malformed JSON"),
        ('["a"]', "expected a JSON object"),
        ('{"prompt": "a", "chosen": "b"}', "missing 'rejected'"),
        ('{"prompt": "a", "chosen": "b", "rejected": 3}', "'rejected' must be a string or a list of messages"),
        ('{"prompt": "a", "chosen": [{"role": "assistant", "content": "b"}], "rejected": "c"}', "mixes plain text"),
        (
            '{"prompt": [{"role": "robot", "content": "a"}], "chosen": [{"role": "assistant", "content": "b"}], '
            '"rejected": [{"role": "assistant", "content": "c"}]}',
            "prompt\\[0\\] has role 'robot'",
        ),
        ('{"chosen": "b", "rejected": "c"}', "no 'prompt' column"),
        (
            '{"chosen": [{"role": "user", "content": "x"}], "rejected": [{"role": "user", "content": "y"}]}',
            "share no first turns",
        ),
    ],
)
def test_malformed_pairs_are_reported_with_file_and_line(line: str, message: str, tmp_path: Path) -> None:
    good = {"prompt": "a", "chosen": "b", "rejected": "c"}
    path = _write(tmp_path / "pairs.jsonl", [good, "", line])
    with pytest.raises(ValueError, match=f"pairs.jsonl:3: .*{message}"):
        read_pairs(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "a", "completion": "b"}', "missing 'label'"),
        ('{"prompt": "a", "completion": "b", "label": "yes"}', "'label' must be true or false"),
        ('{"prompt": "a", "label": true}', "missing 'completion'"),
    ],
)
def test_malformed_feedback_is_reported_with_file_and_line(line: str, message: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "kto.jsonl", [{"prompt": "a", "completion": "b", "label": True}, line])
    with pytest.raises(ValueError, match=f"kto.jsonl:2: .*{message}"):
        read_feedback(path)


def _sum_pairs(numbers: list[tuple[int, int]]) -> list[dict[str, str]]:
    """Chosen: the bare sum; rejected: the sum hedged (a checkable style)."""
    return [
        {"prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
         "chosen": [{"role": "assistant", "content": f"It is {a + b}."}],
         "rejected": [{"role": "assistant", "content": f"The cat thinks it is {a + b} or so, late and cold."}]}
        for a, b in numbers
    ]  # fmt: skip


def _common(base: Path, out: Path, **extra: object) -> dict[str, object]:
    return {
        "model.init": str(base),
        "trainer.threads": 1,
        "trainer.progress_bar": False,
        "trainer.report": False,
        "trainer.batch_size": 8,
        "optim.warmup": 2,
        "seed": 0,
        "output_dir": str(out),
        **extra,
    }


def test_dpo_with_lora_learns_the_chosen_style_and_its_reference_is_the_base(base: Path, tmp_path: Path) -> None:
    numbers = [(a, b) for a in range(8) for b in range(8)]
    train = _write(tmp_path / "train.jsonl", _sum_pairs(numbers[:48]))
    val = _write(tmp_path / "val.jsonl", _sum_pairs(numbers[48:]))
    result = api.train(
        "dpo",
        **_common(
            base,
            tmp_path / "runs",
            **{
                "data.source": str(train),
                "data.val_source": str(val),
                "data.test_fraction": 0.0,
                "trainer.max_epochs": 3,
                "optim.lr": 1e-2,
            },
        ),
    )
    assert result.metrics["val/rewards/accuracies"] >= 0.95  # held-out pairs: the chosen style is preferred
    assert result.metrics["val/rewards/margins"] > 0
    # the reference is the base: the model with its adapters switched off computes what model.init does
    module = result.module
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        with adapters_disabled(module.model):
            off = module.model(ids)
        on = module.model(ids)
        assert torch.allclose(off, load_pretrained(base).model(ids), atol=1e-5)
    assert not torch.allclose(on, off, atol=1e-3)
    assert all(p.requires_grad for n, p in module.model.named_parameters() if "lora_" in n)  # switched on again
    # chat loads the result (base + adapters merged)
    assert load_model(result.run_dir).chat([{"role": "user", "content": "What is 1 plus 2?"}], max_new_tokens=8)


def test_kto_full_fine_tuning_keeps_a_frozen_reference(base: Path, tmp_path: Path) -> None:
    records = [
        {"prompt": p["prompt"], "completion": p["chosen" if i % 2 else "rejected"], "label": bool(i % 2)}
        for i, p in enumerate(_sum_pairs([(a, b) for a in range(4) for b in range(4)]))
    ]
    source = _write(tmp_path / "kto.jsonl", records)
    result = api.train(
        "kto",
        **_common(
            base,
            tmp_path / "runs",
            **{"data.source": str(source), "model.lora": None, "trainer.max_epochs": 1, "optim.lr": 1e-3},
        ),
    )
    module = result.module
    assert module.reference is not None and not any(p.requires_grad for p in module.reference.parameters())
    base_state = load_pretrained(base).model.state_dict()
    assert all(torch.equal(v, base_state[k]) for k, v in module.reference.state_dict().items())  # untouched
    assert any(not torch.equal(v, base_state[k]) for k, v in module.model.state_dict().items())  # trained
    assert {"val/kl", "val/rewards/chosen", "val/loss"} <= set(result.metrics)


def test_a_missing_init_says_what_to_set(tmp_path: Path) -> None:
    source = _write(tmp_path / "p.jsonl", [{"prompt": "a", "chosen": "b", "rejected": "c"}])
    with pytest.raises(ConfigError, match=r"model\.init=FOLDER"):
        api.train("dpo", **{"data.source": str(source), "output_dir": str(tmp_path)})


def test_init_takes_an_sft_run_directly_its_merged_model_is_the_reference(base: Path, tmp_path: Path) -> None:
    chats = [
        {"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                      {"role": "assistant", "content": f"It is {a + b}."}]}
        for a in range(4) for b in range(4)
    ]  # fmt: skip
    sft = api.train(
        "sft",
        **_common(
            base,
            tmp_path / "runs",
            **{"data.source": str(_write(tmp_path / "chats.jsonl", chats)), "trainer.max_epochs": 1, "optim.lr": 1e-2},
        ),
    )
    pairs = _write(tmp_path / "pairs.jsonl", _sum_pairs([(a, b) for a in range(4) for b in range(4)]))
    dpo = api.train(
        "dpo",
        **_common(sft.run_dir, tmp_path / "runs", **{"data.source": str(pairs), "trainer.max_epochs": 1}),
    )
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad(), adapters_disabled(dpo.module.model):
        reference = dpo.module.model(ids)
    sft_model = load_model(sft.run_dir).model
    with torch.no_grad():
        assert torch.allclose(reference, sft_model(ids), atol=1e-5)
        assert not torch.allclose(reference, load_pretrained(base).model(ids), atol=1e-3)  # not the sft run's base
