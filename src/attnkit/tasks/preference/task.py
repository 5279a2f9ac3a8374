"""Preference tuning of a pretrained decoder: DPO on preference pairs (``train dpo``) and KTO on unpaired,
labelled completions (``train kto``), with LoRA adapters by default. The reference model is the base: the same
model with its adapters switched off, or a frozen copy when every weight is trained (``model.lora=null``)."""

from __future__ import annotations

import functools
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from attnkit.config import StrictModel
from attnkit.data.lm.blocks import tokenizer_of
from attnkit.data.preference.config import PreferenceDataConfig
from attnkit.data.sft.artifacts import chat_of
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models.lm import LanguageModel
from attnkit.models.lora import load_base_state_dict, merge_lora
from attnkit.tasks.base import ModelSpec, Task, TaskConfig
from attnkit.tasks.lm.task import generate_text, load_lm_base
from attnkit.tasks.registry import register_task
from attnkit.tasks.sft.task import SFTModelConfig, base_chat, chat_reply
from attnkit.text.chat import ChatTemplate

if TYPE_CHECKING:
    from attnkit.data.preference.module import PreferenceDataModule
    from attnkit.training.module import TaskModule
    from attnkit.training.task import LoadedRun

__all__ = ["DPOConfig", "DPOLossConfig", "DPOTask", "KTOConfig", "KTOLossConfig", "KTOTask", "load_tuning_base"]


class ReferenceConfig(StrictModel):
    """How the reference model's log-probabilities are had (dpo and kto)."""

    precompute_reference: bool = Field(
        False,
        description="compute the reference log-probs of every train/val/test record once before training (stored in "
        "the checkpoints) and keep no reference copy (TRL's precompute_ref_log_probs)",
    )


class DPOLossConfig(ReferenceConfig):
    """The DPO loss (TRL's ``DPOConfig`` names)."""

    loss_type: Literal["sigmoid", "ipo", "robust"] = Field(
        "sigmoid", description="sigmoid (DPO), ipo (IPO, length-normalised as TRL) or robust (robust DPO)"
    )
    beta: float = Field(0.1, gt=0.0, description="how far from the reference the policy may move (IPO: its tau)")
    label_smoothing: float = Field(
        0.0, ge=0.0, lt=0.5, description="the assumed share of flipped labels (sigmoid: conservative DPO; robust)"
    )


class KTOLossConfig(ReferenceConfig):
    """The KTO loss (TRL's ``KTOConfig`` names)."""

    beta: float = Field(0.1, gt=0.0, description="how far from the reference the policy may move")
    desirable_weight: float = Field(1.0, gt=0.0, description="weight of the desirable completions' losses")
    undesirable_weight: float = Field(1.0, gt=0.0, description="weight of the undesirable completions' losses")


_DEFAULTS: dict[str, Any] = {
    "model": {"lora": {"rank": 8, "alpha": 16.0}},
    "optim": {"optimizer": "adamw", "lr": 5e-5, "weight_decay": 0.0, "warmup": 10, "gradient_clip_val": 1.0},
    "trainer": {"max_epochs": 1, "batch_size": 8},
}


class DPOConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = _DEFAULTS
    model: SFTModelConfig = SFTModelConfig()
    data: PreferenceDataConfig = PreferenceDataConfig()
    loss: DPOLossConfig = DPOLossConfig()


class KTOConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = _DEFAULTS
    model: SFTModelConfig = SFTModelConfig()
    data: PreferenceDataConfig = PreferenceDataConfig()
    loss: KTOLossConfig = KTOLossConfig()


TUNED_TASKS = ("sft", "dpo", "kto")  # runs whose model is a tuned decoder, taken as model.init directly


def load_tuning_base(init: str | Path) -> tuple[LanguageModel, dict[str, Any]]:
    """The decoder at ``init`` and its artifacts: what :func:`attnkit.tasks.lm.task.load_lm_base` reads (a model
    folder, an lm run), or an sft, dpo or kto run (its LoRA adapters merged; its artifacts hold its chat
    template)."""
    try:
        return load_lm_base(init)
    except CheckpointError as err:  # a run, of another task than lm
        from attnkit.tasks import load_run  # the package imports this module: only when a run is loaded

        loaded = load_run(init)
        if loaded.task.name not in TUNED_TASKS:
            raise err from None
        model = merge_lora(loaded.module.model)
        assert isinstance(model, LanguageModel)
        return model, dict(loaded.hparams["artifacts"])


@functools.lru_cache(maxsize=2)
def _base(init: str) -> tuple[LanguageModel, dict[str, Any]]:
    """The base decoder and its artifacts, read once per process (the data, the spec and the weights need it)."""
    return load_tuning_base(init)


def _base_chat(init: str) -> tuple[ChatTemplate | None, dict[str, Any]]:
    """The chat template and generation config of ``init``: a model folder's files, or those a tuned run stored."""
    template, generation = base_chat(init)
    if template is None and not generation:
        template, generation = chat_of(_base(init)[1])
    return template, generation


base_decoder = _base  # public names for the tasks built on PreferenceTask (grpo)
base_decoder_chat = _base_chat


class PreferenceTask(Task[Any]):
    """What dpo and kto share (everything but the data's layout and the loss)."""

    kind: ClassVar[Literal["pairs", "feedback"]]
    monitor = ("val/loss", "min")

    def _init(self, cfg: Any) -> str:
        if not cfg.model.init:
            raise ConfigError(
                f"the {self.name} task tunes a pretrained decoder: set model.init=FOLDER (or --init FOLDER), a Hugging "
                "Face GPT-2 / Llama / Mistral / Qwen2 folder, an attnkit model folder or an lm run"
            )
        return str(cfg.model.init)

    def _context(self, cfg: Any) -> int:
        base = _base(self._init(cfg))[0].config.max_len
        if cfg.model.max_len is not None and cfg.model.max_len > base:
            raise ConfigError(
                f"model.max_len={cfg.model.max_len} is longer than the context of model.init={cfg.model.init} "
                f"({base} positions); set model.max_len={base} or less"
            )
        return int(cfg.model.max_len or base)

    def build_datamodule(self, cfg: Any, artifacts: dict[str, Any] | None = None) -> PreferenceDataModule:
        from attnkit.data.preference.module import PreferenceDataModule

        if artifacts:
            tokenizer = tokenizer_of(artifacts)
            template, generation = chat_of(artifacts)
            context = int(artifacts.get("context") or self._context(cfg))
        else:
            init = self._init(cfg)
            tokenizer = tokenizer_of(_base(init)[1])
            template, generation = _base_chat(init)
            context = self._context(cfg)
        pad = tokenizer.pad_id if tokenizer.pad_id is not None else tokenizer.eos_id
        return PreferenceDataModule(
            cfg.data,
            tokenizer,
            template,
            kind=self.kind,
            context=context,
            pad_id=pad if pad is not None else 0,
            batch_size=cfg.trainer.batch_size,
            num_workers=cfg.trainer.num_workers,
            generation_config=generation,
        )

    def model_spec(self, cfg: Any, datamodule: Any) -> ModelSpec:
        base = _base(self._init(cfg))[0].config
        model = base.model_copy(update={"dropout": cfg.model.dropout, "max_len": self._context(cfg)})
        return ModelSpec("lm", model.model_dump(), num_classes=model.vocab_size)

    def init_weights(self, module: TaskModule, cfg: Any) -> None:
        """The policy starts from the base's weights (with ``model.lora`` they stay frozen); without LoRA the
        reference copy gets them too."""
        init = self._init(cfg)
        state = _base(init)[0].state_dict()
        load_base_state_dict(module.model, state, source=f"model.init={init}")
        reference = getattr(module, "reference", None)
        if reference is not None:
            reference.load_state_dict(state)
        _base.cache_clear()  # the module holds the weights now

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> PreferenceDataModule:
        """A ``.jsonl`` file of the task's records as the test split, encoded as the run's training data."""
        data = cfg.data.model_copy(update={"source": str(path), "val_source": str(path), "test_source": str(path)})
        trainer = cfg.trainer.model_copy(update={"batch_size": batch_size})
        return self.build_datamodule(cfg.model_copy(update={"data": data, "trainer": trainer}), artifacts)

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Each input is a user message; the output is the model's greedy reply (line breaks as ``\\n``)."""
        artifacts = module.hparams["artifacts"]
        template, generation = chat_of(artifacts)
        tokenizer = tokenizer_of(artifacts)
        model = module.model
        assert isinstance(model, LanguageModel)
        out = []
        for text in inputs:
            reply = chat_reply(model, tokenizer, template, generation, [{"role": "user", "content": text}], 200)
            out.append(reply.replace("\\", "\\\\").replace("\n", "\\n"))
        return out

    def report_sections(self, run: LoadedRun) -> list[tuple[str, str, str]]:
        """The replies to a few validation prompts before training (the base) and after, beside the chosen (dpo)
        or a desirable (kto) completion."""
        cfg = run.config
        artifacts = run.hparams["artifacts"]
        datamodule = self.build_datamodule(cfg, artifacts)
        datamodule.setup("validate")
        tokenizer = tokenizer_of(artifacts)
        template, generation = chat_of(artifacts)
        after = run.module.model
        assert isinstance(after, LanguageModel)
        before = _base(self._init(cfg))[0]
        rows = []
        for prompt, reference in datamodule.prompts("val", 3):
            shown = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            wanted = reference if isinstance(reference, str) else "\n".join(m["content"] for m in reference)
            cells = [shown, wanted]
            for model in (before, after):
                if isinstance(prompt, str):
                    text = generate_text(model, tokenizer, prompt, temperature=0, max_tokens=64)[0]
                    cells.append(text[len(prompt) :])
                else:
                    cells.append(chat_reply(model, tokenizer, template, generation, prompt))
            rows.append("<tr>" + "".join(f"<td><pre>{html.escape(c)}</pre></td>" for c in cells) + "</tr>")
        head = "<tr><th>prompt</th><th>preferred</th><th>before training</th><th>after</th></tr>"
        table = f'<table class="metrics">{head}{"".join(rows)}</table>'
        return [("replies", "Replies to validation prompts, before and after training (greedy)", table)]


@register_task
class DPOTask(PreferenceTask):
    name = "dpo"
    summary = "preference tuning of a pretrained decoder on prompt/chosen/rejected pairs (DPO, IPO)"
    config_cls = DPOConfig
    kind = "pairs"

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.preference.module import DPOModule

        return DPOModule


@register_task
class KTOTask(PreferenceTask):
    name = "kto"
    summary = "preference tuning of a pretrained decoder on prompt/completion/label feedback (KTO)"
    config_cls = KTOConfig
    kind = "feedback"

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.preference.module import KTOModule

        return KTOModule
