"""``attnkit train grpo``: the rewards (final-answer extraction, the format reward, user functions by import path and
their errors), group-relative advantages, the masking of the loss (exactly no gradient at prompt and padding
positions), per-row seeded generation (the same seed, the same completions, alone or batched), the config's
errors, and a two-step run that writes its metrics."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback
from torch import Tensor, nn

from attnkit import api
from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.errors import ConfigError
from attnkit.interop import load_pretrained
from attnkit.models.generation.causal import sample
from attnkit.models.generation.params import SamplingParams
from attnkit.tasks.grpo.losses import group_advantages, grpo_loss, token_logps
from attnkit.tasks.grpo.module import build_rewards, row_seed
from attnkit.tasks.grpo.rewards import answer_match, extract_answer, format_reward, load_reward
from chat_models import build_chat_model


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("grpo_base"), context=64)


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("2 plus 3 is 5", "5"),
        ("first 12, then 1,234.", "1234"),
        ("it is -7.50 dollars", "-7.5"),
        ("so 3.0", "3"),
        ("work: 4 + 4 = 8\n#### 8", "8"),
        ("#### 42 apples\nlater 7", "42 apples"),
        ("Answer: Paris.", "Paris"),
        ("answer:7 and then 9", "7 and then 9"),
        ("The answer: 3\nAnswer:  $1,000 ", "1000"),
        ("no number here", None),
        ("#### ", None),
        ("", None),
    ],
)
def test_extract_answer(completion: str, answer: str | None) -> None:
    assert extract_answer(completion) == answer


def test_answer_match_and_format() -> None:
    completions = ["so it is 5", "#### 6", "five", "Answer: 1,000"]
    assert answer_match(["p"] * 4, completions, answer=["5", 5, "5", "1000"]) == [1.0, 0.0, 0.0, 1.0]
    reward = format_reward(r"^<think>.*</think>\s*\d+$")
    assert reward(prompts=["p", "p"], completions=["<think>a\nb</think> 4", "4"]) == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"grpo.format_pattern='\(' is not a regular expression"):
        format_reward("(")


def test_user_reward_by_import_path_and_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_rewards.py").write_text(
        "def length(prompts, completions, answer, **kw):\n    return [len(c) / 10 for c in completions]\n"
        "NOT_A_FUNCTION = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    function = load_reward("my_rewards:length")
    assert function(prompts=["p"], completions=["abcd"], answer=["1"]) == [0.4]
    rewards = build_rewards({"rewards": ["answer_match", "my_rewards:length"], "answer_column": "solution"})
    assert [name for name, _ in rewards] == ["answer_match", "length"]
    assert rewards[0][1](prompts=["p"], completions=["3"], solution=["3"], answer=["4"]) == [1.0]
    with pytest.raises(ValueError, match="reads the column 'solution'"):
        rewards[0][1](prompts=["p"], completions=["3"], answer=["3"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:f", "reward 'no_such_module_xyz:f': cannot import module 'no_such_module_xyz'"),
        ("my_rewards:missing", "reward 'my_rewards:missing': module 'my_rewards' has no 'missing'"),
        ("my_rewards:NOT_A_FUNCTION", "reward 'my_rewards:NOT_A_FUNCTION': my_rewards.NOT_A_FUNCTION is a int"),
        ("exact_match", "reward 'exact_match' is neither a built-in reward"),
    ],
)
def test_a_bad_reward_path_is_a_clear_error(
    spec: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_rewards.py").write_text("NOT_A_FUNCTION = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_reward(spec)


def test_group_advantages() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 0.0, 3.0, math.nan, 3.0])
    advantages, std = group_advantages(rewards, 4)
    first = torch.tensor([1.0, 0.0, 0.0, 1.0])
    expected = (first - 0.5) / (first.std() + 1e-4)
    assert torch.allclose(advantages[:4], expected)
    assert torch.equal(advantages[4:8], torch.zeros(4))  # one reward for all: nothing to learn
    assert advantages[10] == 0.0 and torch.allclose(advantages[[8, 9, 11]].sum(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(std[:4], first.std().expand(4))
    unscaled, _ = group_advantages(rewards, 4, scale=False)  # Dr. GRPO
    assert torch.allclose(unscaled[:4], first - 0.5)
    with pytest.raises(ValueError, match="do not make groups of 5"):
        group_advantages(rewards, 5)


class _Logits(nn.Module):
    """Stands for a language model: ``model(inputs, only=mask)`` returns rows of a leaf tensor of logits."""

    def __init__(self, logits: Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, inputs: Tensor, only: Tensor) -> Tensor:
        return self.logits[only]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_only_completion_tokens_count_prompt_and_padding_get_exactly_zero_gradient(loss_type: str) -> None:
    # rows: prompt length, completion length (prompt + completion right-padded to 9 positions)
    layout = [(3, 4), (5, 2), (2, 7)]
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, 11, (3, 9), generator=g)
    targets = torch.full((3, 9), IGNORE_INDEX)
    for row, (p, c) in enumerate(layout):
        targets[row, p - 1 : p - 1 + c] = torch.randint(0, 11, (c,), generator=g)
    logits = torch.randn(3, 9, 11, generator=g, requires_grad=True)
    logps = token_logps(_Logits(logits), inputs, targets)
    mask = targets != IGNORE_INDEX
    loss, _ = grpo_loss(
        logps,
        torch.tensor([1.0, -0.5, 0.7]),
        mask,
        old_logps=logps.detach() + 0.1,
        ref_logps=logps.detach() - 0.2,
        beta=0.1,
        loss_type=loss_type,
        max_completion_length=8,
    )
    loss.backward()
    assert logits.grad is not None
    grad = logits.grad.abs().sum(-1)
    for row, (p, c) in enumerate(layout):
        assert torch.equal(grad[row, : p - 1], torch.zeros(p - 1))  # the prompt: exactly zero
        assert bool((grad[row, p - 1 : p - 1 + c] > 0).all())  # every completion token counts
        assert torch.equal(grad[row, p - 1 + c :], torch.zeros(9 - p + 1 - c))  # padding: exactly zero


def test_the_same_seeds_give_the_same_completions_alone_or_batched(base: Path) -> None:
    model = load_pretrained(base).model.eval()
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([8, 9]), torch.tensor([5, 6, 7])]
    params = SamplingParams(max_tokens=None, temperature=1.0)

    def draw(rows: list[Tensor], seeds: list[int]) -> list[list[int]]:
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        return sample(model.decoding(rows, max_len=12), 12, params, generator=generators, stop_at_eos=False).tolist()

    seeds = [row_seed(0, 3, i) for i in range(3)]
    batched = draw(prompts, seeds)
    assert batched == draw(prompts, seeds)  # the same seeds: the same completions
    assert batched[0] != batched[2]  # the same prompt, another seed: another completion
    assert draw(prompts[1:2], seeds[1:2])[0] == batched[1]  # a row's draw does not depend on the others
    assert row_seed(0, 3, 1) != row_seed(0, 4, 1) and row_seed(0, 3, 1) != row_seed(1, 3, 1)
    with pytest.raises(ValueError, match="2 generators for 3 rows"):
        sample(model.decoding(prompts, max_len=4), 4, params, generator=[torch.Generator()] * 2)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _common(base: Path, tmp_path: Path, **extra: object) -> dict[str, object]:
    rows = [{"prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}], "answer": str(a + b)}
            for a in range(3) for b in range(3)]  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    return {
        "model.init": str(base),
        "data.source": str(_write(tmp_path / "prompts.jsonl", rows)),
        "data.val_source": str(_write(tmp_path / "val.jsonl", rows[:2])),
        "trainer.threads": 1,
        "trainer.progress_bar": False,
        "trainer.report": False,
        "trainer.batch_size": 2,
        "trainer.log_every_n_steps": 1,
        "grpo.group_size": 2,
        "grpo.max_completion_length": 6,
        "seed": 0,
        "output_dir": str(tmp_path / "runs"),
        **extra,
    }


def test_config_errors_say_what_to_set(base: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"set grpo\.max_grad_norm instead of optim\.gradient_clip_val"):
        api.train("grpo", **_common(base, tmp_path, **{"optim.gradient_clip_val": 1.0}))
    with pytest.raises(ConfigError, match=r"grpo\.reward_weights has 1 weights for 2 rewards"):
        api.train(
            "grpo",
            **_common(
                base,
                tmp_path,
                **{
                    "grpo.rewards": ["answer_match", "format"],
                    "grpo.format_pattern": "x",
                    "grpo.reward_weights": [1.0],
                },
            ),
        )
    with pytest.raises(ConfigError, match=r"the format reward needs grpo\.format_pattern"):
        api.train("grpo", **_common(base, tmp_path, **{"grpo.rewards": ["format"]}))


def test_a_two_step_run_writes_its_metrics(base: Path, tmp_path: Path) -> None:
    result = api.train(
        "grpo",
        **_common(
            base,
            tmp_path,
            **{
                "trainer.limit_train_batches": 2,
                "grpo.rewards": ["answer_match", "format"],
                "grpo.reward_weights": [1.0, 0.5],
                "grpo.format_pattern": r"\d",
                "grpo.beta": 0.1,
                "grpo.num_iterations": 2,
            },
        ),
    )
    rows = list(csv.DictReader(open(next(Path(result.run_dir).rglob("metrics.csv")))))  # noqa: SIM115
    train = [r for r in rows if r.get("train/reward")]
    assert len(train) == 2  # one logged row per batch of completions
    for name in (
        "train/reward",
        "train/reward_std",
        "train/rewards/answer_match/mean",
        "train/rewards/format/mean",
        "train/completions/mean_length",
        "train/kl",
        "train/clip_ratio/region_mean",
        "train/loss_step",
    ):
        assert all(math.isfinite(float(r[name])) for r in train), name
    assert all(0 < float(r["train/completions/mean_length"]) <= 6 for r in train)
    assert {"val/reward", "val/rewards/answer_match/mean"} <= set(result.metrics)
    last = torch.load(Path(result.run_dir) / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == 4  # two passes per batch of completions: 4 optimiser steps


def test_a_resumed_run_generates_and_trains_as_the_uninterrupted_one(base: Path, tmp_path: Path) -> None:
    # one prompt, one batch per epoch: the data's order cannot differ (a run stopped by limit_train_batches resumes
    # its loader mid-epoch; one resumed at an epoch's end shuffles its next epoch in another order)
    (tmp_path / "data").mkdir()
    rows = [{"prompt": f"The {w} owl sat on the", "answer": "1"} for w in ("old", "young", "small")]
    source, held_out = _write(tmp_path / "data" / "p.jsonl", rows[:1]), _write(tmp_path / "data" / "v.jsonl", rows[1:])
    common = {
        "data.source": str(source),
        "data.val_source": str(held_out),
        "data.test_source": str(held_out),
        "trainer.batch_size": 1,
        "grpo.group_size": 3,
        "optim.max_iters": 10,
        "optim.lr": 1e-3,
        "grpo.beta": 0.1,
        "grpo.rewards": ["format"],
        "grpo.format_pattern": "a",
    }

    class Final(Callback):
        """The adapters when training ends (what the run's last step made)."""

        def on_train_end(self, trainer: Any, module: Any) -> None:
            self.state = {k: v.detach().clone() for k, v in module.state_dict().items() if "lora" in k}

    whole, first, resumed = Final(), Final(), Final()
    api.train("grpo", callbacks=[whole], **_common(base, tmp_path / "a", **common, **{"trainer.max_epochs": 2}))
    run = api.train("grpo", callbacks=[first], **_common(base, tmp_path / "b", **common, **{"trainer.max_epochs": 1}))
    api.train("grpo", resume=run.run_dir, callbacks=[resumed], **{"trainer.max_epochs": 2})
    expected, got = whole.state, resumed.state
    assert expected and expected.keys() == got.keys()
    assert not all(torch.equal(v, first.state[k]) for k, v in got.items())  # it trained on
    for name, value in expected.items():
        assert torch.equal(got[name], value), name


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"answer": "3"}', "missing 'prompt'"),
        ('{"prompt": [{"role": "robot", "content": "hi"}]}', r"prompt\[0\] must be an object with a 'role'"),
        ('{"prompt": 3}', "'prompt' must be a string or a non-empty list of messages"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"prompt": "a"', "malformed JSON"),
    ],
)
def test_malformed_prompts_are_reported_with_file_and_line(line: str, message: str, tmp_path: Path) -> None:
    from attnkit.tasks.grpo.data import read_prompts

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "fine", "answer": "1"}\n\n' + line + "\n")
    with pytest.raises(ValueError, match=f"prompts.jsonl:3: {message}"):
        read_prompts(path)
    ok = _write(tmp_path / "ok.jsonl", [{"prompt": "x", "answer": 1}])
    assert read_prompts(ok)[0].columns == {"answer": 1}
