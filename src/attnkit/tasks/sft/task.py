"""Instruction tuning (supervised fine-tuning): teach a pretrained decoder to answer conversations in its chat
format. Only the assistant's tokens count in the loss (:mod:`attnkit.data.sft`); LoRA adapters by default."""

from __future__ import annotations

import functools
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from pydantic import Field

from attnkit.data.lm.blocks import tokenizer_of
from attnkit.data.sft.artifacts import chat_of
from attnkit.data.sft.config import SFTDataConfig
from attnkit.errors import ConfigError
from attnkit.interop import Pretrained
from attnkit.models.lm import LanguageModel
from attnkit.models.lora import LoraFineTuning, load_base_state_dict
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig
from attnkit.tasks.lm.task import load_lm_base
from attnkit.tasks.registry import register_task
from attnkit.text.chat import ChatTemplate, encode_chat, read_generation_config
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.resolve import resolve_model
from attnkit.training.task import LoadedRun

if TYPE_CHECKING:
    from attnkit.data.sft.module import SFTDataModule
    from attnkit.training.module import TaskModule

__all__ = ["SFTConfig", "SFTModelConfig", "SFTTask", "base_chat", "chat_reply"]


class SFTModelConfig(LoraFineTuning):
    """The pretrained decoder to fine-tune (``init``), its dropout and context, and LoRA (the default:
    rank 8 adapters on the frozen base; ``model.lora=null`` trains every weight)."""

    lora_checks_init: ClassVar[bool] = False  # the task refuses a missing init itself, LoRA or not
    init: str | None = Field(
        None,
        description="the decoder to fine-tune: a Hugging Face folder of a supported decoder, an "
        "attnkit model folder (attnkit import / export) or an attnkit lm run; its tokenizer and chat template are used",
    )
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout while fine-tuning")
    max_len: int | None = Field(None, gt=1, description="the context in tokens (default and at most: the base's)")


class SFTConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        "model": {"lora": {"rank": 8, "alpha": 16.0}},
        "optim": {"optimizer": "adamw", "lr": 2e-4, "weight_decay": 0.0, "warmup": 20, "gradient_clip_val": 1.0},
        "trainer": {"max_epochs": 3, "batch_size": 8},
    }
    model: SFTModelConfig = SFTModelConfig()
    data: SFTDataConfig = SFTDataConfig()


@functools.lru_cache(maxsize=2)
def _base(init: str) -> tuple[LanguageModel, dict[str, Any]]:
    """The base decoder and its artifacts (read once per process: the data, the model spec and the weights
    all need it)."""
    return load_lm_base(init)


def base_chat(init: str | Path) -> tuple[ChatTemplate | None, dict[str, Any]]:
    """The chat template (``None``: attnkit's default) and generation config of ``model.init``: a model folder's
    files, or none for an attnkit lm run."""
    resolved = resolve_model(init, role="model.init")
    if resolved.is_model_folder:
        return ChatTemplate.from_folder(resolved.path), read_generation_config(resolved.path)
    return None, {}


def chat_reply(
    model: LanguageModel,
    tokenizer: Tokenizer,
    template: ChatTemplate | None,
    generation_config: dict[str, Any],
    messages: list[dict[str, str]],
    max_new_tokens: int = 64,
) -> str:
    """The greedy reply of ``model`` to ``messages`` (as ``attnkit chat`` writes it)."""
    pretrained = Pretrained(model, "lm", tokenizer, Path("."), {}, template, generation_config)
    return pretrained.chat(messages, max_new_tokens)


@register_task
class SFTTask(Task[SFTConfig]):
    name = "sft"
    summary = "instruction tuning of a pretrained decoder on conversations (JSONL), with its chat template"
    config_cls = SFTConfig
    monitor = ("val/loss", "min")

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.sft.module import SFTModule

        return SFTModule

    @staticmethod
    def _init(cfg: SFTConfig) -> str:
        if not cfg.model.init:
            raise ConfigError(
                "the sft task fine-tunes a pretrained decoder: set model.init=FOLDER (or --init FOLDER), a Hugging "
                "Face folder of a supported decoder, an attnkit model folder or an lm run"
            )
        return cfg.model.init

    def _context(self, cfg: SFTConfig) -> int:
        base = _base(self._init(cfg))[0].config.max_len
        if cfg.model.max_len is not None and cfg.model.max_len > base:
            raise ConfigError(
                f"model.max_len={cfg.model.max_len} is longer than the context of model.init={cfg.model.init} "
                f"({base} positions); set model.max_len={base} or less"
            )
        return cfg.model.max_len or base

    def build_datamodule(self, cfg: SFTConfig, artifacts: dict[str, Any] | None = None) -> SFTDataModule:
        from attnkit.data.sft.module import SFTDataModule

        if artifacts:
            tokenizer = tokenizer_of(artifacts)
            template, generation = chat_of(artifacts)
            context = int(artifacts.get("context") or self._context(cfg))
        else:
            init = self._init(cfg)
            tokenizer = tokenizer_of(_base(init)[1])
            template, generation = base_chat(init)
            context = self._context(cfg)
        pad = tokenizer.pad_id if tokenizer.pad_id is not None else tokenizer.eos_id
        return SFTDataModule(
            cfg.data,
            tokenizer,
            template,
            context=context,
            pad_id=pad if pad is not None else 0,
            batch_size=cfg.trainer.batch_size,
            num_workers=cfg.trainer.num_workers,
            generation_config=generation,
        )

    def model_spec(self, cfg: SFTConfig, datamodule: Any) -> ModelSpec:
        base = _base(self._init(cfg))[0].config
        model = base.model_copy(update={"dropout": cfg.model.dropout, "max_len": self._context(cfg)})
        return ModelSpec("lm", model.model_dump(), num_classes=model.vocab_size)

    def init_weights(self, module: TaskModule, cfg: SFTConfig) -> None:
        """The model starts from the base's weights (with ``model.lora``, they stay frozen)."""
        init = self._init(cfg)
        load_base_state_dict(module.model, _base(init)[0].state_dict(), source=f"model.init={init}")
        _base.cache_clear()  # the module holds the weights now: no second copy of the base while training

    def build_eval_datamodule(
        self,
        cfg: SFTConfig,
        artifacts: dict[str, Any],
        path: str | Path,
        *,
        batch_size: int,
        standardized: bool = False,
    ) -> SFTDataModule:
        """A ``.jsonl`` file of conversations (any layout) as the test split, encoded as the run's training data."""
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

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Causal self-attention over each text as a user message (rendered with the run's chat template and its
        generation prompt), then over each validation conversation of ``indices`` (its first ``max_len`` tokens)."""
        artifacts = module.hparams["artifacts"]
        tokenizer = tokenizer_of(artifacts)
        template, _ = chat_of(artifacts)
        model = module.model
        assert isinstance(model, LanguageModel)
        inputs = [(repr(t), encode_chat(tokenizer, template, [{"role": "user", "content": t}])) for t in texts or []]
        if indices:
            cfg = SFTConfig.model_validate(module.hparams["config"])
            datamodule = self.build_datamodule(cfg, artifacts)
            datamodule.setup("validate")
            chats = datamodule.chats["val"]
            for index in indices:
                if not 0 <= index < len(chats):
                    raise ValueError(f"sft: validation conversation {index} out of range (there are {len(chats)})")
                ids = encode_chat(tokenizer, template, chats[index].messages, add_generation_prompt=False)
                inputs.append((f"validation conversation {index}", ids))
        out = []
        for name, ids in inputs:
            ids = ids[: model.config.max_len]
            maps = model.get_attention_maps(torch.tensor([ids], device=module.device))
            labels = [tokenizer.decode([i], skip_special=False).replace("\n", "\\n") or "\u2205" for i in ids]
            out.append(AttentionExample([m[0].cpu() for m in maps], labels, labels, f"sft, {name}"))
        return out

    def report_sections(self, run: LoadedRun) -> list[tuple[str, str, str]]:
        """The replies to a few validation conversations (their last reply left out) before training (the base
        model) and after, beside the reference reply."""
        cfg = run.config
        assert isinstance(cfg, SFTConfig)
        artifacts = run.hparams["artifacts"]
        datamodule = self.build_datamodule(cfg, artifacts)
        datamodule.setup("validate")
        tokenizer = tokenizer_of(artifacts)
        template, generation = chat_of(artifacts)
        after_model = run.module.model
        assert isinstance(after_model, LanguageModel)
        before_model = _base(self._init(cfg))[0]
        rows = []
        for messages, reference in datamodule.prompts("val", 3):
            cells = [messages[-1]["content"], reference]
            for model in (before_model, after_model):
                cells.append(chat_reply(model, tokenizer, template, generation, messages))
            rows.append("<tr>" + "".join(f"<td><pre>{html.escape(c)}</pre></td>" for c in cells) + "</tr>")
        head = "<tr><th>prompt (last message)</th><th>reference</th><th>before training</th><th>after</th></tr>"
        table = f'<table class="metrics">{head}{"".join(rows)}</table>'
        return [("replies", "Replies to validation prompts, before and after training (greedy)", table)]
