"""Language modelling: train a decoder-only Transformer on a text corpus, then generate text."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from pydantic import Field

from attnkit.data.lm.blocks import IGNORE_INDEX, artifacts_of, pack_documents, tokenizer_of
from attnkit.data.lm.config import LMDataConfig
from attnkit.data.readers.lines import numbered_inputs
from attnkit.errors import ConfigError
from attnkit.interop import load_pretrained
from attnkit.models.generation import SamplingParams
from attnkit.models.lm import LanguageModel, LanguageModelArchitecture, LanguageModelConfig
from attnkit.models.lora import LoraFineTuning, load_base_state_dict, merge_lora
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig
from attnkit.tasks.registry import register_task
from attnkit.text.framing import body_ids, document_bounds, prompt_ids
from attnkit.text.generate import generate_texts, sampling_params
from attnkit.text.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from attnkit.training.resolve import resolve_model

if TYPE_CHECKING:
    from attnkit.data.lm.module import LanguageModelDataModule
    from attnkit.training.module import TaskModule

__all__ = [
    "LMConfig",
    "LMModelConfig",
    "LanguageModelTask",
    "generate_from_run",
    "generate_text",
]


class LMModelConfig(LanguageModelArchitecture, LoraFineTuning):
    """A small character-level GPT that learns the built-in corpus in a couple of minutes on a CPU
    (no dropout: a short run on a large corpus does not overfit, and dropout slows a CPU step ~1.5x)."""

    init: str | None = Field(
        None,
        description="start from a trained language model: an attnkit lm run (folder or checkpoint), an attnkit model "
        "folder (attnkit export / import) or a Hugging Face folder of a supported decoder. Its "
        "tokenizer and architecture replace data.tokenizer/vocab_size and the model keys above (dropout still "
        "applies; max_len is the block length, at most the base's context)",
    )


class LMConfig(TaskConfig):
    defaults: ClassVar[dict[str, Any]] = {
        "model": {
            "d_model": 128,
            "num_heads": 4,
            "num_layers": 3,
            "dim_feedforward": 512,
            "dropout": 0.0,
            "max_len": 64,
        },
        "optim": {"optimizer": "adamw", "lr": 2e-3, "weight_decay": 0.01, "warmup": 100, "gradient_clip_val": 1.0},
        "trainer": {"max_epochs": 2, "batch_size": 32},
    }
    model: LMModelConfig = LMModelConfig()
    data: LMDataConfig = LMDataConfig()


@register_task
class LanguageModelTask(Task[LMConfig]):
    name = "lm"
    summary = "language modelling and text generation: any UTF-8 text file, or a built-in generated corpus"
    config_cls = LMConfig
    monitor = ("val/loss", "min")

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.lm.module import LanguageModelModule

        return LanguageModelModule

    def build_datamodule(self, cfg: LMConfig, artifacts: dict[str, Any] | None = None) -> LanguageModelDataModule:
        from attnkit.data.lm.module import LanguageModelDataModule

        kw: dict[str, Any] = dict(
            block=cfg.model.max_len, batch_size=cfg.trainer.batch_size, num_workers=cfg.trainer.num_workers
        )
        if artifacts:
            return LanguageModelDataModule.from_artifacts(cfg.data, artifacts, **kw)
        if cfg.model.init:  # the base model's tokenizer
            return LanguageModelDataModule.from_artifacts(cfg.data, load_lm_base(cfg.model.init)[1], **kw)
        return LanguageModelDataModule(cfg.data, progress=cfg.trainer.progress_bar, **kw)

    def model_spec(self, cfg: LMConfig, datamodule: Any) -> ModelSpec:
        if cfg.model.init:
            base = load_lm_base(cfg.model.init)[0].config
            if cfg.model.max_len > base.max_len:
                raise ConfigError(
                    f"model.max_len={cfg.model.max_len} is longer than the context of model.init={cfg.model.init} "
                    f"({base.max_len} positions); set model.max_len={base.max_len} or less"
                )
            model = base.model_copy(update={"dropout": cfg.model.dropout})
            return ModelSpec("lm", model.model_dump(), num_classes=model.vocab_size)
        arch = cfg.model.model_dump(exclude={"init", "lora"})
        model = LanguageModelConfig(
            **arch, vocab_size=datamodule.vocab_size, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID
        )
        return ModelSpec("lm", model.model_dump(), num_classes=datamodule.vocab_size)

    def init_weights(self, module: TaskModule, cfg: LMConfig) -> None:
        """With ``model.init``, the model starts from the base's weights (with ``model.lora``, they stay frozen)."""
        if cfg.model.init:
            model, _ = load_lm_base(cfg.model.init)
            load_base_state_dict(module.model, model.state_dict(), source=f"model.init={cfg.model.init}")

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        """Each input is a prompt; the output is the prompt and its greedy continuation (at most 200
        tokens, until the end of the document), line breaks written as ``\\n``."""
        tokenizer = tokenizer_of(module.hparams["artifacts"])
        out = []
        for prompt in inputs:
            (text,) = generate_text(_language_model(module), tokenizer, prompt, max_new_tokens=200, temperature=0.0)
            out.append(text.replace("\\", "\\\\").replace("\n", "\\n"))
        return out

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> LanguageModelDataModule:
        """A UTF-8 text file (or a folder of ``*.txt`` files), cut into documents as ``data.split_on`` says."""
        from attnkit.data.lm.module import LanguageModelDataModule

        return LanguageModelDataModule.for_test_file(
            cfg.data, artifacts, path, block=cfg.model.max_len, batch_size=batch_size
        )

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Scores every non-blank line as a text: ``{"line", "perplexity", "nll", "tokens"}``.

        Each text is read as a document (``<bos>`` text ``<eos>``); ``tokens`` are the predicted
        ones (the text's and ``<eos>``), ``nll`` their summed negative log-likelihood in nats and
        ``perplexity = exp(nll / tokens)``. A text longer than the context is cut into consecutive
        blocks of it (as in training). ``batch_size`` blocks run at a time."""
        tokenizer = tokenizer_of(module.hparams["artifacts"])
        block = _language_model(module).config.max_len
        lines = numbered_inputs(path)
        bos, eos = document_bounds(tokenizer)
        packed = [pack_documents([body_ids(tokenizer, text)], block, bos_id=bos, eos_id=eos) for _, text in lines]
        owner = torch.cat([torch.full((len(x),), i) for i, (x, _) in enumerate(packed)])
        inputs = torch.cat([x for x, _ in packed])
        targets = torch.cat([y for _, y in packed])
        nll = torch.zeros(len(lines), dtype=torch.float64)
        for rows in torch.arange(len(inputs)).split(batch_size):
            with torch.no_grad():
                logits = module.model(inputs[rows].to(module.device)).float()
            y = targets[rows].to(module.device)
            loss = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=IGNORE_INDEX, reduction="none").sum(-1)
            nll.index_add_(0, owner[rows], loss.double().cpu())
        counts = torch.zeros(len(lines), dtype=torch.long).index_add_(0, owner, (targets != IGNORE_INDEX).sum(-1))
        for (number, _), total, n in zip(lines, nll.tolist(), counts.tolist()):
            yield {"line": number, "perplexity": math.exp(total / n), "nll": total, "tokens": n}

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Causal self-attention over ``<bos>`` + the tokens of each text, then of the first
        ``max_len - 1`` tokens of each validation document of ``indices``."""
        tokenizer = tokenizer_of(module.hparams["artifacts"])
        model = _language_model(module)
        max_len = model.config.max_len
        inputs = [(f"{t!r}", t) for t in texts or []]
        for name, text in inputs:
            n = len(prompt_ids(tokenizer, text))
            if n > max_len:
                raise ValueError(
                    f"lm: input {name} is {n} tokens with <bos>, longer than the model's context of {max_len}; "
                    "plot a shorter text (the map of a longer one would not be what the model computes)"
                )
        if indices:
            cfg = LMConfig.model_validate(module.hparams["config"])
            datamodule = self.build_datamodule(cfg, module.hparams["artifacts"])
            datamodule.setup("validate")
            docs = datamodule.documents["val"]
            for index in indices:
                if not 0 <= index < len(docs):
                    raise ValueError(f"lm: validation document {index} out of range (there are {len(docs)})")
                inputs.append((f"validation document {index}", docs[index]))
        out = []
        for name, text in inputs:
            ids = prompt_ids(tokenizer, text)[:max_len]  # validation documents: their start
            maps = model.get_attention_maps(torch.tensor([ids], device=module.device))
            labels = [_token_label(tokenizer, i) for i in ids]
            out.append(AttentionExample([m[0].cpu() for m in maps], labels, labels, f"lm, {name}"))
        return out


def _language_model(module: TaskModule) -> LanguageModel:
    """The module's model (the task's model_spec builds a :class:`LanguageModel`)."""
    model = module.model
    assert isinstance(model, LanguageModel)
    return model


def _token_label(tokenizer: Tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id], skip_special=False)
    return text.replace(" ", "\u2423").replace("\n", "\\n") or "\u2205"


def load_lm_base(path: str | Path) -> tuple[LanguageModel, dict[str, Any]]:
    """The language model at ``path`` (``model.init``) as a plain model (a LoRA run's adapters merged),
    and the data artifacts it trains with (its tokenizer): an attnkit ``lm`` run folder or checkpoint, an
    attnkit model folder of a language model (``attnkit export`` / ``attnkit import``), or a Hugging Face
    folder of a supported decoder with its tokenizer (what :func:`attnkit.training.resolve.resolve_model`
    finds there)."""
    resolved = resolve_model(path, role="model.init")
    folder = resolved.path
    if resolved.is_model_folder:
        pretrained = load_pretrained(folder)
        if not isinstance(pretrained.model, LanguageModel):
            raise ConfigError(
                f"model.init={folder} holds a {pretrained.name!r} model, not a language model; the lm task starts "
                "from a decoder (an lm run, or a model folder of a decoder)"
            )
        artifacts = pretrained.info.get("artifacts") if resolved.kind == "model_folder" else None
        if not artifacts:
            if not isinstance(pretrained.tokenizer, Tokenizer):
                raise ConfigError(
                    f"model.init={folder} has no tokenizer files (tokenizer.json, or vocab.json + merges.txt); the lm "
                    "task trains with the model's own tokenizer"
                )
            artifacts = artifacts_of(pretrained.tokenizer)
        return pretrained.model, artifacts
    from attnkit.training.runner import load_run  # Lightning: only when a run is loaded

    loaded = load_run(resolved, LanguageModelTask())
    model = merge_lora(loaded.module.model)
    assert isinstance(model, LanguageModel)
    return model, loaded.hparams["artifacts"]


# ====================================================================== generation
def generate_text(
    model: LanguageModel,
    tokenizer: Tokenizer,
    prompt: str | Sequence[str] = "",
    params: SamplingParams | None = None,
    *,
    num_samples: int = 1,
    batch_size: int = 8,
    write: Callable[[str], None] | None = None,
    **options: Any,
) -> list[str]:
    """Texts that continue ``prompt`` (each is the prompt followed by its continuation).

    ``prompt`` is one text (``num_samples`` samples, generated one after the other and streamed to
    ``write``: the prompt, then every new piece, then ``"\n"``) or a list of texts (``num_samples``
    each, generated in left-padded batches of ``batch_size``, each row as if alone; ``write``
    receives each finished text followed by ``"\n"``, in order).

    The sampling options are one :class:`~attnkit.models.generation.SamplingParams`: ``params``, with
    ``options`` (its fields by name, e.g. ``temperature=0``, ``top_p=0.9``, ``stop=["."]``, ``seed=1``;
    ``max_new_tokens`` is ``max_tokens``, 200 by default) over it. ``seed`` makes sampling reproducible (one
    generator for all the samples of a call).

    Each prompt is encoded as the beginning of a document (``<bos>`` + its tokens; an empty prompt
    starts from ``<bos>`` alone); characters/words the tokenizer does not know become ``<unk>``.
    Generation stops at ``<eos>`` (the end of a document), after ``max_tokens``, or once the
    continuation contains one of the ``stop`` strings (it is cut before the stop string): the one text
    path, :func:`attnkit.text.generate.generate_texts`.
    """
    params = sampling_params(params, options, max_tokens=200)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    bad = [p for p in prompts if not isinstance(p, str)]
    if bad:
        raise TypeError(f"prompt must be a str or a list of str, got {type(bad[0]).__name__}")
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(params.seed) if params.seed is not None else None
    if isinstance(prompt, str):
        texts = []
        for _ in range(num_samples):
            if write is not None:
                write(prompt)
            stream = None if write is None else (lambda _row, piece, out=write: out(piece))
            (new,) = generate_texts(
                model, tokenizer, [prompt_ids(tokenizer, prompt)], params, generator=generator, on_text=stream
            )
            if write is not None:
                write("\n")
            texts.append(prompt + new)
        return texts
    items = [p for p in prompts for _ in range(num_samples)]
    texts = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        encoded = [prompt_ids(tokenizer, p) for p in chunk]
        for p, new in zip(chunk, generate_texts(model, tokenizer, encoded, params, generator=generator)):
            texts.append(p + new)
            if write is not None:
                write(texts[-1] + "\n")
    return texts


def generate_from_run(
    run: str | Path, prompt: str | Sequence[str] = "", params: SamplingParams | None = None, **kwargs: Any
) -> list[str]:
    """:func:`generate_text` with the model and tokenizer of a trained ``lm`` run (folder or checkpoint)."""
    from attnkit.training.runner import load_run  # Lightning: only when a run is loaded

    loaded = load_run(run, LanguageModelTask())
    tokenizer = tokenizer_of(loaded.hparams["artifacts"])
    return generate_text(_language_model(loaded.module), tokenizer, prompt, params, **kwargs)
