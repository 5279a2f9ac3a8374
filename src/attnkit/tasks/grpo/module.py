"""The grpo task's LightningModule: each training step generates ``grpo.group_size`` completions per prompt of its
batch with attnkit's batched decoder (one generator per row, seeded from the run's seed, the step and the row: a
resumed run generates what the uninterrupted one would), scores them, and makes ``grpo.num_iterations``
optimisation passes over them (manual optimisation: one optimiser step per pass; ``trainer.global_step`` counts
passes, as TRL's steps)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from attnkit.data.lm.blocks import IGNORE_INDEX, tokenizer_of
from attnkit.data.sft.artifacts import chat_of
from attnkit.models import build_model
from attnkit.models.generation.causal import sample
from attnkit.models.generation.params import SamplingParams
from attnkit.models.lm import LanguageModel
from attnkit.models.lora import is_lora
from attnkit.tasks.grpo.data import PromptRow
from attnkit.tasks.grpo.losses import group_advantages, grpo_loss, token_logps
from attnkit.tasks.grpo.rewards import RewardFunction, answer_match, format_reward, load_reward, score
from attnkit.tasks.preference.module import adapters_disabled
from attnkit.training.module import TaskModule

__all__ = ["GRPOModule", "Rollout", "build_rewards", "row_seed"]


def row_seed(seed: int, step: int, row: int) -> int:
    """The seed of completion ``row`` (its index in the step's batch over every process) of generation ``step``."""
    return (seed * 1_000_003 + step * 10_007 + row) % (2**63 - 1)


def build_rewards(settings: dict[str, Any]) -> list[tuple[str, RewardFunction]]:
    """``(name, function)`` per entry of ``grpo.rewards`` (see :mod:`attnkit.tasks.grpo.rewards`)."""
    out: list[tuple[str, RewardFunction]] = []
    column = str(settings.get("answer_column", "answer"))
    for name in settings.get("rewards") or ["answer_match"]:
        if name == "answer_match":

            def match(prompts: list[Any], completions: list[str], _column: str = column, **columns: Any) -> Any:
                if _column not in columns:
                    raise ValueError(f"reward answer_match reads the column {_column!r} (grpo.answer_column), which "
                                     f"the rows lack; their columns: {sorted(columns)}")  # fmt: skip
                return answer_match(prompts, completions, columns[_column])

            out.append((name, match))
        elif name == "format":
            pattern = settings.get("format_pattern")
            if not pattern:
                raise ValueError("reward format needs grpo.format_pattern (a regular expression)")
            out.append((name, format_reward(str(pattern))))
        else:
            out.append((name.rpartition(":")[2], load_reward(name)))
    return out


@dataclass
class Rollout:
    """One batch of completions: ``inputs`` / ``targets [N, T]`` (prompt + completion, right-padded; targets
    ``IGNORE_INDEX`` but at completion tokens), the completions' texts and ``lengths``, rewards per function
    ``[N, F]``, their weighted sum ``[N]`` and the ``advantages [N]``."""

    inputs: Tensor
    targets: Tensor
    texts: list[str]
    lengths: Tensor
    clipped: Tensor
    per_function: Tensor
    rewards: Tensor
    advantages: Tensor
    group_std: Tensor


class GRPOModule(TaskModule):
    """GRPO on batches of prompts (:class:`attnkit.tasks.grpo.data.PromptRow` lists)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False
        self.settings: dict[str, Any] = dict(self.hparams["config"].get("grpo") or {})
        self.rewards = build_rewards(self.settings)
        weights = self.settings.get("reward_weights") or [1.0] * len(self.rewards)
        if len(weights) != len(self.rewards):
            raise ValueError(f"grpo.reward_weights has {len(weights)} weights for {len(self.rewards)} rewards")
        self.reward_weights = torch.tensor([float(w) for w in weights])
        self.reference: nn.Module | None = None
        if float(self.settings.get("beta", 0.0)) and not is_lora(self.model):
            model = self.hparams["model"]
            self.reference = build_model(model["name"], model["config"]).requires_grad_(False).eval()
        artifacts = self.hparams["artifacts"]
        self._tokenizer = tokenizer_of(artifacts) if "tokenizer" in artifacts else None
        generation = chat_of(artifacts)[1] if artifacts else {}
        eos = generation.get("eos_token_id")
        self.stop_ids = tuple(int(i) for i in ([] if eos is None else [eos] if isinstance(eos, int) else eos))

    def train(self, mode: bool = True) -> GRPOModule:
        super().train(mode)
        if self.reference is not None:
            self.reference.eval()
        return self

    def metrics(self) -> dict[str, Metric]:
        return {}

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """A batch is a list of prompts (Python objects): the rollout makes its tensors on the module's device."""
        return batch

    # ------------------------------------------------------------------ generation and scoring
    @torch.no_grad()
    def generate(self, rows: list[list[int]], seeds: list[int], *, greedy: bool = False) -> list[list[int]]:
        """Each row's completion ids (up to and with its end token, at most ``grpo.max_completion_length``), row
        ``i`` drawn with a generator seeded with ``seeds[i]``."""
        model = self.model
        assert isinstance(model, LanguageModel)
        s = self.settings
        budget = int(s.get("max_completion_length", 64))
        params = SamplingParams(
            max_tokens=None,
            temperature=0.0 if greedy else float(s.get("temperature", 1.0)),
            top_p=None if greedy else s.get("top_p"),
            top_k=None if greedy else s.get("top_k"),
            stop_ids=self.stop_ids,
        )
        device = model.token_embedding.weight.device
        generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        was_training = model.training
        model.eval()
        try:
            prompts = [torch.tensor(r, dtype=torch.long) for r in rows]
            decoding = model.decoding(prompts, max_len=budget)
            new = sample(decoding, budget, params, generator=generators).tolist()
        finally:
            model.train(was_training)
        ends = {model.config.eos_id, *self.stop_ids}
        out = []
        for tokens in new:
            end = next((i + 1 for i, t in enumerate(tokens) if t in ends), len(tokens))
            out.append(tokens[:end])
        return out

    def rollout(self, batch: list[PromptRow], step: int, *, greedy: bool = False) -> Rollout:
        """Generate, score and compare the completions of ``batch`` at generation ``step``."""
        group = 1 if greedy else int(self.settings.get("group_size", 4))
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self._attached() else (1, 0)
        seed = int(self.hparams["config"].get("seed") or 0)
        first = rank * len(batch) * group
        prompts = [r.ids for r in batch for _ in range(group)]
        seeds = [row_seed(seed, step, first + i) for i in range(len(prompts))]
        completions = self.generate(prompts, seeds, greedy=greedy)
        tokenizer = self._tokenizer
        assert tokenizer is not None
        ends = {self.model.config.eos_id, *self.stop_ids}  # type: ignore[union-attr]  # a LanguageModel's config
        texts = [tokenizer.decode([t for t in c if t not in ends]) for c in completions]
        given = [r.prompt for r in batch for _ in range(group)]
        columns = {k: [r.columns.get(k) for r in batch for _ in range(group)] for k in batch[0].columns}
        per_function = torch.tensor(
            [score(name, f, given, texts, columns) for name, f in self.rewards], dtype=torch.float32
        ).T.reshape(len(texts), len(self.rewards))
        rewards = (per_function * self.reward_weights).nansum(1)
        rewards[per_function.isnan().all(1)] = math.nan
        advantages, std = group_advantages(rewards, group, scale=bool(self.settings.get("scale_rewards", True)))
        width = max(len(p) + len(c) for p, c in zip(prompts, completions)) - 1
        pad = tokenizer.pad_id if tokenizer.pad_id is not None else 0
        inputs = torch.full((len(prompts), max(width, 1)), pad, dtype=torch.long)
        targets = torch.full_like(inputs, IGNORE_INDEX)
        for i, (p, c) in enumerate(zip(prompts, completions)):
            ids = torch.tensor(p + c, dtype=torch.long)
            inputs[i, : len(ids) - 1] = ids[:-1]
            targets[i, len(p) - 1 : len(ids) - 1] = ids[len(p) :]
        budget = int(self.settings.get("max_completion_length", 64))
        lengths = torch.tensor([len(c) for c in completions], dtype=torch.float32)
        clipped = torch.tensor([len(c) == budget and c[-1] not in ends for c in completions], dtype=torch.float32)
        del world
        return Rollout(inputs.to(self.device), targets.to(self.device), texts, lengths, clipped, per_function,
                       rewards, advantages.to(self.device), std)  # fmt: skip

    def _attached(self) -> bool:
        try:
            self.trainer  # noqa: B018  # raises when the module is used without a Trainer
        except RuntimeError:
            return False
        return True

    @torch.no_grad()
    def reference_logps(self, inputs: Tensor, targets: Tensor) -> Tensor:
        if self.reference is not None:
            return token_logps(self.reference, inputs, targets)
        with adapters_disabled(self.model):
            return token_logps(self.model, inputs, targets)

    def rollout_metrics(self, r: Rollout) -> dict[str, Tensor]:
        """TRL's names: ``reward``, ``reward_std`` (over the batch), ``reward_std/group`` (the mean within-group
        spread), ``rewards/<name>/mean`` and ``/std``, ``completions/mean_length`` (and min, max, clipped_ratio),
        ``frac_reward_zero_std``."""
        out = {
            "reward": r.rewards.nanmean(),
            "reward_std": r.rewards[~r.rewards.isnan()].std() if r.rewards.numel() > 1 else torch.zeros(()),
            "reward_std/group": r.group_std.nanmean(),
            "frac_reward_zero_std": (r.group_std.nan_to_num(0.0) < 1e-8).float().mean(),
            "completions/mean_length": r.lengths.mean(),
            "completions/min_length": r.lengths.min(),
            "completions/max_length": r.lengths.max(),
            "completions/clipped_ratio": r.clipped.mean(),
        }
        for i, (name, _) in enumerate(self.rewards):
            column = r.per_function[:, i]
            out[f"rewards/{name}/mean"] = column.nanmean()
            out[f"rewards/{name}/std"] = column[~column.isnan()].std() if column.numel() > 1 else torch.zeros(())
        return {k: v.to(self.device) for k, v in out.items()}

    # ------------------------------------------------------------------ training
    def losses(self, r: Rollout, old: Tensor | None, ref: Tensor | None) -> tuple[Tensor, dict[str, Tensor]]:
        s = self.settings
        logps = token_logps(self.model, r.inputs, r.targets)
        return grpo_loss(
            logps,
            r.advantages,
            r.targets != IGNORE_INDEX,
            old_logps=old,
            ref_logps=ref,
            epsilon=float(s.get("epsilon", 0.2)),
            epsilon_high=s.get("epsilon_high"),
            beta=float(s.get("beta", 0.0)),
            loss_type=str(s.get("loss_type", "grpo")),
            max_completion_length=int(s.get("max_completion_length", 64)),
            use_bias_correction_kl=bool(s.get("use_bias_correction_kl", True)),
        )

    def training_step(self, batch: list[PromptRow], batch_idx: int) -> Tensor:
        iterations = int(self.settings.get("num_iterations", 1))
        step = self.trainer.global_step // iterations  # the generation's number: the same after a resume
        r = self.rollout(batch, step)
        old = None
        if iterations > 1:
            with torch.no_grad():
                old = token_logps(self.model, r.inputs, r.targets)
        ref = self.reference_logps(r.inputs, r.targets) if float(self.settings.get("beta", 0.0)) else None
        optimizer = self.optimizers()
        scheduler = self.lr_schedulers()
        assert not isinstance(optimizer, list) and scheduler is not None and not isinstance(scheduler, list)
        clip = self.settings.get("max_grad_norm")
        loss = torch.zeros((), device=self.device)
        stats: dict[str, Tensor] = {}
        for _ in range(iterations):
            loss, stats = self.losses(r, old, ref)
            optimizer.zero_grad()
            self.manual_backward(loss)
            if clip:
                self.clip_gradients(optimizer.optimizer, gradient_clip_val=float(clip), gradient_clip_algorithm="norm")
            optimizer.step()
            scheduler.step()
        n = float(r.inputs.shape[0])
        self._train_sums += torch.tensor([float(loss.detach()) * n, 0.0, n], device=self._train_sums.device)
        if self._logging_step():
            self.log("train/loss_step", loss.detach(), on_step=True, on_epoch=False, prog_bar=True)
            for name, value in {**stats, **self.rollout_metrics(r)}.items():
                self.log(f"train/{name}", value, on_step=True, on_epoch=False)
        return loss.detach()

    def on_train_start(self) -> None:
        super().on_train_start()
        if self.optim_config.max_iters is None:  # one optimiser step per pass
            scheduler = self.lr_schedulers()
            iterations = int(self.settings.get("num_iterations", 1))
            scheduler.max_iters = max(int(self.trainer.estimated_stepping_batches), 1) * iterations  # type: ignore[union-attr]  # CosineWarmupScheduler

    def _evaluate(self, batch: Any, stage: str, counted: bool = True) -> Tensor:
        """The greedy completion of each prompt, scored: ``<stage>/reward`` and ``<stage>/rewards/<name>/mean``
        (means over the split)."""
        r = self.rollout(batch, 0, greedy=True)
        n = len(batch) if counted else 0
        reward = r.rewards.nan_to_num(0.0).mean().to(self.device)
        self.log(f"{stage}/reward", reward, on_epoch=True, prog_bar=True, sync_dist=True, batch_size=n)
        for i, (name, _) in enumerate(self.rewards):
            value = r.per_function[:, i].nan_to_num(0.0).mean().to(self.device)
            self.log(f"{stage}/rewards/{name}/mean", value, on_epoch=True, sync_dist=True, batch_size=n)
        self.log(f"{stage}/completions/mean_length", r.lengths.mean().to(self.device), on_epoch=True,
                 sync_dist=True, batch_size=n)  # fmt: skip
        return reward
