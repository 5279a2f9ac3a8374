"""Reinforcement learning with verifiable rewards: ``train grpo`` (GRPO, Dr. GRPO, DAPO's token mean) on prompts,
with LoRA adapters by default. The reference model (``grpo.beta > 0``) is the base: the same model with its
adapters switched off, or a frozen copy when every weight is trained."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from attnkit.config import StrictModel
from attnkit.data.lm.blocks import tokenizer_of
from attnkit.data.sft.artifacts import chat_of
from attnkit.errors import ConfigError
from attnkit.tasks.base import TaskConfig
from attnkit.tasks.grpo.config import GRPODataConfig
from attnkit.tasks.preference.task import PreferenceTask, base_decoder, base_decoder_chat
from attnkit.tasks.registry import register_task
from attnkit.tasks.sft.task import SFTModelConfig

if TYPE_CHECKING:
    from attnkit.training.module import TaskModule

__all__ = ["GRPOConfig", "GRPOSettings", "GRPOTask"]


class GRPOSettings(StrictModel):
    """GRPO's options (TRL's ``GRPOConfig`` names where it has them)."""

    rewards: list[str] = Field(
        ["answer_match"], min_length=1, description="answer_match, format, or package.module:function each"
    )
    reward_weights: list[float] | None = Field(None, description="one weight per reward (default: 1 each)")
    answer_column: str = Field("answer", description="the column answer_match compares the final answer with")
    format_pattern: str | None = Field(None, description="the regular expression of the format reward")
    group_size: int = Field(4, ge=2, description="completions per prompt (TRL's num_generations)")
    max_completion_length: int = Field(64, ge=1, description="most new tokens per completion")
    temperature: float = Field(1.0, ge=0.01, description="sampling temperature of the completions")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling of the completions")
    top_k: int | None = Field(None, ge=1, description="top-k sampling of the completions")
    epsilon: float = Field(0.2, gt=0.0, lt=1.0, description="the clipping range of the probability ratio")
    epsilon_high: float | None = Field(None, gt=0.0, description="its upper side (DAPO; default: epsilon)")
    beta: float = Field(0.0, ge=0.0, description="the KL penalty to the reference (0: no reference computed)")
    use_bias_correction_kl: bool = Field(True, description="multiply the KL term by the probability ratio (TRL's)")
    num_iterations: int = Field(1, ge=1, description="optimisation passes per batch of completions")
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field("grpo", description="grpo, dr_grpo or dapo normalisation")
    scale_rewards: bool = Field(True, description="divide advantages by the group's std (Dr. GRPO: false)")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="clip the gradient norm (null: no clipping)")

    @model_validator(mode="after")
    def _check(self) -> GRPOSettings:
        if self.reward_weights is not None and len(self.reward_weights) != len(self.rewards):
            raise ValueError(f"grpo.reward_weights has {len(self.reward_weights)} weights for "
                             f"{len(self.rewards)} rewards ({self.rewards}); give one per reward")  # fmt: skip
        if "format" in self.rewards and not self.format_pattern:
            raise ValueError("the format reward needs grpo.format_pattern, a regular expression")
        return self


class GRPOConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        "model": {"lora": {"rank": 8, "alpha": 16.0}},
        "optim": {"optimizer": "adamw", "lr": 1e-5, "weight_decay": 0.0, "warmup": 0, "gradient_clip_val": None},
        "trainer": {"max_epochs": 1, "batch_size": 4},
    }
    model: SFTModelConfig = SFTModelConfig()
    data: GRPODataConfig = GRPODataConfig()
    grpo: GRPOSettings = GRPOSettings()

    @model_validator(mode="after")
    def _manual(self) -> GRPOConfig:
        if self.optim.gradient_clip_val is not None:
            raise ValueError("grpo clips the gradient itself: set grpo.max_grad_norm instead of "
                             "optim.gradient_clip_val (leave that null)")  # fmt: skip
        if self.trainer.accumulate_grad_batches != 1:
            raise ValueError("grpo takes no trainer.accumulate_grad_batches: raise trainer.batch_size (prompts per "
                             "step) instead")  # fmt: skip
        return self


@register_task
class GRPOTask(PreferenceTask):
    name = "grpo"
    summary = "RL with verifiable rewards on prompts (GRPO, Dr. GRPO): completions scored by reward functions"
    config_cls = GRPOConfig
    monitor = ("val/reward", "max")

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.grpo.module import GRPOModule

        return GRPOModule

    def build_datamodule(self, cfg: Any, artifacts: dict[str, Any] | None = None) -> Any:  # a PromptDataModule
        from attnkit.tasks.grpo.data import PromptDataModule

        if artifacts:
            tokenizer = tokenizer_of(artifacts)
            template, generation = chat_of(artifacts)
            context = int(artifacts.get("context") or self._context(cfg))
        else:
            init = self._init(cfg)
            tokenizer = tokenizer_of(base_decoder(init)[1])
            template, generation = base_decoder_chat(init)
            context = self._context(cfg)
        room = context - cfg.grpo.max_completion_length
        if cfg.data.max_prompt_len is not None and cfg.data.max_prompt_len > room:
            raise ConfigError(f"data.max_prompt_len={cfg.data.max_prompt_len} + grpo.max_completion_length="
                              f"{cfg.grpo.max_completion_length} exceed the context ({context}); lower "
                              "one")  # fmt: skip
        required = (cfg.grpo.answer_column,) if "answer_match" in cfg.grpo.rewards else ()
        return PromptDataModule(
            cfg.data,
            tokenizer,
            template,
            context=context,
            max_prompt_len=cfg.data.max_prompt_len or room,
            batch_size=cfg.trainer.batch_size,
            num_workers=cfg.trainer.num_workers,
            generation_config=generation,
            required=required,
        )

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> Any:  # a PromptDataModule
        data = cfg.data.model_copy(update={"source": str(path), "val_source": str(path), "test_source": str(path)})
        trainer = cfg.trainer.model_copy(update={"batch_size": batch_size})
        return self.build_datamodule(cfg.model_copy(update={"data": data, "trainer": trainer}), artifacts)
