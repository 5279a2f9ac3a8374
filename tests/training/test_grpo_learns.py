"""It learns (GRPO): after a short ``sft`` on noisy demonstrations, ``train grpo`` with the built-in ``answer_match``
reward raises the greedy reward on held-out prompts from at most 0.3 to at least 0.8, on one CPU thread in minutes.

The task: reverse three digits (``Reverse 381`` -> ``183``). The sft conversations reverse the digits in 25 % of
the replies and repeat them in the others, so the sft model has the format and the skill but repeats when greedy
(held-out reward about 0); sampled, it reverses now and then, and GRPO makes that its habit. The held-out prompts
(100 validation, 100 test) are in no training conversation and no training prompt.

The chain runs in the background lane (tests/background_runs.py): this file, run as a script, writes the base
model (a random Llama, 2 layers, width 64, ChatML) and the data; then ``attnkit train sft``; a grpo run that makes
no change (``optim.lr=1e-12`` for one step: float32 weights stay as they are), whose test reward is the starting
model's; and the grpo run itself."""

from __future__ import annotations

import itertools
import json
import random
import sys
from pathlib import Path

import pytest

import background_runs

REVERSED_SHARE = 0.25  # the share of sft replies that reverse (the others repeat the digits)
COMMON = ["trainer.threads=1", "trainer.progress_bar=false", "trainer.report=false", "seed=0"]
SFT = ["train", "sft", "--init", "{out}/base", "--output_dir", "{out}/runs", "name=sft", "data.source={out}/sft.jsonl",
       "model.lora=null", "trainer.max_epochs=25", "trainer.batch_size=16", "optim.lr=3e-3", "optim.warmup=10",
       *COMMON]  # fmt: skip
GRPO = ["train", "grpo", "--init", "{out}/runs/sft/sft", "--output_dir", "{out}/runs",
        "data.source={out}/prompts.jsonl", "data.val_source={out}/val.jsonl", "data.test_source={out}/test.jsonl",
        "model.lora=null", "grpo.max_completion_length=6", *COMMON]  # fmt: skip
# the starting model scored as the grpo task scores: one step of learning rate 1e-12 changes no float32 weight
BEFORE = [*GRPO, "name=before", "optim.lr=1e-12", "trainer.limit_train_batches=1", "trainer.batch_size=1",
          "grpo.group_size=2"]  # fmt: skip
AFTER = [*GRPO, "name=grpo", "optim.lr=1e-3", "trainer.max_epochs=3", "trainer.batch_size=8", "grpo.group_size=8"]
RUN = background_runs.declare("grpo-learns", ["python", __file__, "{out}"], SFT, BEFORE, AFTER, timeout=900)


def _question(digits: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Reverse {digits}"}]


def write_inputs(out: Path) -> None:
    """The base model ``out/base`` and the data: ``sft.jsonl`` (conversations), ``prompts.jsonl``, ``val.jsonl``,
    ``test.jsonl`` (prompts with their ``answer``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from chat_models import build_chat_model

    folder = build_chat_model(out / "base", context=64)
    config = AutoConfig.from_pretrained(folder)
    config.hidden_size, config.intermediate_size, config.initializer_range = 64, 256, 0.1
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)

    rng = random.Random(0)
    strings = ["".join(s) for s in itertools.product("123456789", repeat=3) if s != s[::-1]]  # 648
    rng.shuffle(strings)
    val, test, train = strings[:100], strings[100:200], strings[200:]
    with open(out / "sft.jsonl", "w") as f:
        for s in train:
            reply = s[::-1] if rng.random() < REVERSED_SHARE else s
            f.write(json.dumps({"messages": [*_question(s), {"role": "assistant", "content": reply}]}) + "\n")
    for name, rows in {"prompts": train, "val": val, "test": test}.items():
        with open(out / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps({"prompt": _question(s), "answer": s[::-1]}) + "\n" for s in rows)


def _metrics(out: Path, name: str) -> dict[str, float]:
    return json.loads((out / "runs" / "grpo" / name / "metrics.json").read_text())["metrics"]


@pytest.mark.slow
@pytest.mark.background("grpo-learns")
@pytest.mark.timeout(3000)
def test_grpo_raises_the_held_out_reward_from_at_most_0_3_to_at_least_0_8() -> None:
    import torch

    out, _ = RUN.result()
    runs = out / "runs"
    before, after = _metrics(out, "before"), _metrics(out, "grpo")
    figures = f"before: {before}\nafter: {after}\n({RUN.seconds:.0f} s)"
    # the starting model's score: the "before" run changed none of the sft model's weights
    sft = torch.load(runs / "sft" / "sft" / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    kept = torch.load(runs / "grpo" / "before" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert kept["global_step"] == 1 and sft["state_dict"].keys() == kept["state_dict"].keys()
    assert all(torch.equal(v, kept["state_dict"][k]) for k, v in sft["state_dict"].items())
    # it has the format (three digits and the end of its turn) but repeats the digits
    assert 3.5 <= before["test/completions/mean_length"] <= 4.5, figures
    assert before["val/reward"] <= 0.3 and before["test/reward"] <= 0.3, figures
    # the test prompts: neither trained on nor used to pick the checkpoint (the best of val/reward)
    assert after["test/reward"] >= 0.8 and after["val/reward"] >= 0.8, figures
    print(figures)  # shown with pytest -rP


if __name__ == "__main__":  # the lane's first step: python tests/training/test_grpo_learns.py OUT
    write_inputs(Path(sys.argv[1]))
