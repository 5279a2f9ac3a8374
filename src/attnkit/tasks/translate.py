"""Translation with the encoder–decoder Transformer: built-in English->Spanish numbers or a Tatoeba pairs file."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import Tensor

from attnkit.config import StrictModel
from attnkit.data.base import numbered_inputs, read_lines
from attnkit.data.pairs import PairsDataConfig, PairsDataModule, tokenizers_from_artifacts
from attnkit.data.tokenizers import EOS_ID, Tokenizer
from attnkit.models.config import EncoderConfig
from attnkit.models.seq2seq import Hypotheses, Seq2SeqConfig, Seq2SeqTransformer, beam_search, greedy_decode
from attnkit.tasks.base import AttentionExample, ModelSpec, Task, TaskConfig
from attnkit.training.config import OptimConfig, TrainerConfig
from attnkit.training.distributed import gather_lists
from attnkit.training.module import ClassifierModule, TaskModule
from attnkit.training.runner import load_run

__all__ = [
    "DecodeConfig",
    "TranslateConfig",
    "TranslateModule",
    "TranslateTask",
    "corpus_scores",
    "read_lines",
    "translate_run",
    "translate_scored",
    "translate_texts",
]


class TranslateModelConfig(EncoderConfig):
    """The translator's size: ``num_layers`` encoder and ``num_decoder_layers`` decoder blocks."""

    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    num_decoder_layers: int | None = Field(None, gt=0, description="decoder blocks (default: num_layers)")
    dim_feedforward: int = 256
    dropout: float = 0.1
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"
    share_embeddings: bool = Field(True, description="one embedding matrix for both languages (data.shared_vocab)")
    tie_output: bool = Field(True, description="the output projection reuses the target embedding")


class DecodeConfig(StrictModel):
    """How the test split (and ``attnkit translate``) is decoded."""

    beam_size: int = Field(4, ge=1, description="1 = greedy decoding")
    length_penalty: float = Field(1.0, description="beam score = log P / length ** length_penalty")
    max_len: int | None = Field(
        None, gt=0, description="most tokens to generate, EOS included (default data.max_len+1)"
    )


# The task's defaults are class defaults (not a default instance), so that overriding one key of
# a section (`trainer.threads=1`) keeps the others.
class TranslateOptimConfig(OptimConfig):
    optimizer: Literal["adam", "adamw"] = "adamw"
    lr: float = Field(2e-3, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    warmup: int = Field(200, ge=0, description="linear warm-up steps (batches)")
    gradient_clip_val: float | None = Field(1.0, gt=0.0, description="clip the gradient norm; null to disable")


class TranslateTrainerConfig(TrainerConfig):
    max_epochs: int = Field(5, gt=0)
    batch_size: int = Field(64, gt=0)


class TranslateConfig(TaskConfig):
    model: TranslateModelConfig = TranslateModelConfig()
    data: PairsDataConfig = PairsDataConfig()
    decode: DecodeConfig = DecodeConfig()
    label_smoothing: float = Field(0.1, ge=0.0, lt=1.0, description="cross-entropy label smoothing")
    optim: TranslateOptimConfig = TranslateOptimConfig()
    trainer: TranslateTrainerConfig = TranslateTrainerConfig()

    @model_validator(mode="after")
    def _check_sharing(self) -> TranslateConfig:
        if self.model.share_embeddings and not self.data.shared_vocab:
            raise ValueError(
                "model.share_embeddings=true needs one vocabulary for both languages: set data.shared_vocab=true, "
                "or model.share_embeddings=false"
            )
        return self


# ====================================================================== decoding helpers
def decode_batch(
    model: Seq2SeqTransformer, src: Tensor, src_mask: Tensor, *, beam_size: int, length_penalty: float, max_len: int
) -> Hypotheses:
    """Greedy decoding for ``beam_size == 1``, else beam search."""
    if beam_size == 1:
        return greedy_decode(model, src, src_mask, max_len=max_len)
    return beam_search(model, src, src_mask, beam_size=beam_size, max_len=max_len, length_penalty=length_penalty)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Corpus BLEU and chrF (sacrebleu, 0-100, default settings) and the exact-match rate (0-1)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        return {"bleu": 0.0, "chrf": 0.0, "exact": 0.0}
    hyps, refs = list(hypotheses), list(references)
    return {
        "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
        "exact": sum(h.strip() == r.strip() for h, r in zip(hyps, refs)) / len(refs),
    }


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


# ====================================================================== module
class TranslateModule(ClassifierModule):
    """Teacher-forced cross-entropy (label smoothing, padding ignored); token accuracy through
    :class:`TaskModule`'s metric. At the end of a test run the test split is decoded (greedy or beam
    search, per ``decode``) and BLEU, chrF and exact match are logged as ``test/bleu``,
    ``test/chrf``, ``test/exact``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.hparams["config"]
        self.label_smoothing = float(cfg.get("label_smoothing", 0.0))
        self.decode_config = DecodeConfig.model_validate(cfg.get("decode", {}))
        self.data_config = PairsDataConfig.model_validate(cfg["data"])
        self._tokenizers: tuple[Tokenizer, Tokenizer] | None = None
        self._hyps: list[str] = []
        self._refs: list[str] = []

    @property
    def tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        """``(source, target)`` tokenizers, rebuilt from the checkpoint's artifacts."""
        if self._tokenizers is None:
            self._tokenizers = tokenizers_from_artifacts(self.hparams["artifacts"])
        return self._tokenizers

    def step(self, batch: Any) -> tuple[Tensor, Tensor, Tensor]:
        src, src_mask, tgt_in, tgt_out, _ = batch
        logits = self.model(src, tgt_in, src_mask)
        valid = tgt_out != self.model.pad_id
        logits, target = logits[valid], tgt_out[valid]
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing), logits, target

    def max_decode_len(self) -> int:
        return self.decode_config.max_len or self.data_config.max_len + 1

    def on_test_epoch_start(self) -> None:
        self._hyps, self._refs = [], []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        src, src_mask, _, _, index = batch
        refs = self.trainer.datamodule.datasets["test"].refs  # type: ignore[attr-defined]
        d = self.decode_config
        hyps = decode_batch(
            self.model, src, src_mask, beam_size=d.beam_size, length_penalty=d.length_penalty,
            max_len=self.max_decode_len(),
        )  # fmt: skip
        tgt_tok = self.tokenizers[1]
        self._hyps += [_one_line(tgt_tok.decode(ids)) for ids in hyps.token_lists()]
        self._refs += [refs[i] for i in index.tolist()]

    def on_test_epoch_end(self) -> None:
        # A corpus score is not a mean of per-process scores: in a multi-process run every process
        # gathers all translations and references and scores the whole test split (sacrebleu sums
        # the statistics of every sentence). The figures are then identical on every process; the
        # "max" sync keeps them bit-exact and tells Lightning they are global.
        hyps, refs = gather_lists(self._hyps), gather_lists(self._refs)
        for name, value in corpus_scores(hyps, refs).items():
            self.log(f"test/{name}", torch.tensor(value, dtype=torch.float64), sync_dist=True, reduce_fx="max")


# ====================================================================== translating user text
def _source_ids(module: TranslateModule, text: str) -> tuple[list[int], int]:
    """Encoder input for ``text`` (prepared as the training data, cut to ``data.max_len``, + EOS)
    and its token count before cutting."""
    text = text.strip().lower() if module.data_config.lowercase else text.strip()
    ids = module.tokenizers[0].encode(text)
    return [*ids[: module.data_config.max_len], EOS_ID], len(ids)


def translate_texts(module: TaskModule, texts: Sequence[str], **options: Any) -> list[str]:
    """One translation per text (:func:`translate_scored` without the scores; same options)."""
    return [text for text, _ in translate_scored(module, texts, **options)]


def translate_scored(
    module: TaskModule,
    texts: Sequence[str],
    *,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    batch_size: int = 64,
    warn: Callable[[str], None] | None = None,
) -> list[tuple[str, float | None]]:
    """One ``(translation, score)`` per text, decoded as the run's ``decode`` config says
    (``beam_size``, ``length_penalty`` override it; ``beam_size=1`` is greedy). The score is the
    summed log-probability of the translation's tokens, end of sentence included.

    Text is prepared as the training data (``data.lowercase``). Characters or words the vocabulary
    lacks become ``<unk>``. An empty (or blank) text translates to ``""`` with score None. A text
    longer than ``data.max_len`` tokens is cut to its first ``max_len`` tokens, and ``warn``
    (default :func:`warnings.warn`) says so. A newline inside a translation becomes a space.
    """
    if isinstance(texts, str):
        raise TypeError("translate_texts expects a list of texts, got a single str")
    if not isinstance(module, TranslateModule):
        raise ValueError(f"this is a {module.hparams.get('task')!r} run; translating needs a 'translate' run")
    warn = warn or (lambda message: warnings.warn(message, stacklevel=3))
    d = module.decode_config
    beam = d.beam_size if beam_size is None else beam_size
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise ValueError(f"beam size must be an int >= 1 (1 = greedy), got {beam!r}")
    alpha = d.length_penalty if length_penalty is None else length_penalty
    tgt_tok = module.tokenizers[1]
    max_len = module.data_config.max_len
    encoded: list[tuple[int, list[int]]] = []
    for i, text in enumerate(texts):
        if not text.strip():
            continue
        ids, count = _source_ids(module, text)
        if count > max_len:
            warn(f"input {i + 1} has {count} tokens; translating its first data.max_len={max_len} only")
        encoded.append((i, ids))
    out: list[tuple[str, float | None]] = [("", None)] * len(texts)
    encoded.sort(key=lambda item: len(item[1]))  # similar lengths together: less padding
    model = module.model
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start : start + batch_size]
            width = max(len(ids) for _, ids in chunk)
            src = torch.full((len(chunk), width), model.pad_id, dtype=torch.long)
            for row, (_, ids) in enumerate(chunk):
                src[row, : len(ids)] = torch.tensor(ids)
            src = src.to(module.device)
            hyps = decode_batch(
                model, src, src != model.pad_id, beam_size=beam, length_penalty=alpha,
                max_len=module.max_decode_len(),
            )  # fmt: skip
            for (i, _), ids, log_prob in zip(chunk, hyps.token_lists(), hyps.log_probs.tolist()):
                out[i] = (_one_line(tgt_tok.decode(ids)), log_prob)
    finally:
        model.train(was_training)
    return out


def translate_run(
    run: str | Path,
    texts: Sequence[str],
    *,
    beam_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[str]:
    """Load a translate run (folder or checkpoint) and translate ``texts`` (see :func:`translate_texts`)."""
    loaded = load_run(run, TranslateTask())
    return translate_texts(loaded.module, texts, beam_size=beam_size, warn=warn)


# ====================================================================== task
class TranslateTask(Task[TranslateConfig]):
    name = "translate"
    summary = "translation with an encoder-decoder Transformer: Tatoeba pairs files or built-in English->Spanish"
    config_cls = TranslateConfig
    module_cls = TranslateModule
    monitor = ("val/acc", "max")  # teacher-forced token accuracy: cheap, and follows the exact-match rate

    def build_datamodule(self, cfg: TranslateConfig, artifacts: dict[str, Any] | None = None) -> PairsDataModule:
        t = cfg.trainer
        if artifacts:
            return PairsDataModule.from_artifacts(cfg.data, artifacts, t.batch_size, t.num_workers)
        return PairsDataModule(cfg.data, t.batch_size, t.num_workers)

    def model_spec(self, cfg: TranslateConfig, datamodule: Any) -> ModelSpec:
        src_tok, tgt_tok = datamodule.tokenizers
        model = Seq2SeqConfig(
            **cfg.model.model_dump(),
            src_vocab_size=src_tok.vocab_size,
            tgt_vocab_size=tgt_tok.vocab_size,
            max_len=cfg.data.max_len + 2,
            pad_id=tgt_tok.pad_id,
            bos_id=tgt_tok.bos_id,
            eos_id=tgt_tok.eos_id,
        )
        return ModelSpec("seq2seq", model.model_dump(), num_classes=tgt_tok.vocab_size)

    def predict(self, module: TaskModule, inputs: list[str]) -> list[str]:
        return translate_texts(module, inputs)

    def build_eval_datamodule(
        self, cfg: Any, artifacts: dict[str, Any], path: str | Path, *, batch_size: int, standardized: bool = False
    ) -> PairsDataModule:
        """A tab-separated pairs file (``source<TAB>reference``, as ``data.source``)."""
        return PairsDataModule.for_test_file(cfg.data, artifacts, path, batch_size)

    def predict_file(
        self, module: TaskModule, path: str | Path, *, batch_size: int = 64, standardized: bool = False
    ) -> Iterator[dict[str, Any]]:
        """Per line: ``{"line", "input", "translation", "log_prob"}`` (the translation's summed token
        log-probability), decoded as the run's ``decode`` config says."""
        lines = numbered_inputs(path)
        scored = translate_scored(module, [text for _, text in lines], batch_size=batch_size)
        for (number, text), (translation, log_prob) in zip(lines, scored):
            yield {"line": number, "input": text, "translation": translation, "log_prob": log_prob}

    def attention_examples(
        self, module: TaskModule, texts: list[str] | None = None, indices: list[int] | None = None
    ) -> list[AttentionExample]:
        """Cross-attention of every decoder layer (``[H, output tokens, source tokens]``) while the
        model writes its own translation: the alignment picture."""
        if not isinstance(module, TranslateModule):
            raise ValueError("attention_examples needs a translate run")
        inputs = [(f"input {text!r}", text) for text in texts or []]
        if indices:
            cfg = TranslateConfig.model_validate(module.hparams["config"])
            dm = self.build_datamodule(cfg, module.hparams["artifacts"])
            dm.setup("validate")
            assert dm.splits is not None
            for index in indices:
                if not 0 <= index < len(dm.splits.val):
                    raise ValueError(
                        f"translate: validation example {index} out of range (there are {len(dm.splits.val)})"
                    )
                inputs.append((f"validation example {index}", dm.splits.val[index][0]))
        src_tok, tgt_tok = module.tokenizers
        model = module.model
        out = []
        for name, text in inputs:
            ids = _source_ids(module, text)[0]
            src = torch.tensor([ids], device=module.device)
            model.eval()
            d = module.decode_config
            hyp = decode_batch(
                model, src, src != model.pad_id, beam_size=d.beam_size, length_penalty=d.length_penalty,
                max_len=module.max_decode_len(),
            )  # fmt: skip
            out_ids = hyp.tokens[0, : int(hyp.lengths[0])]
            tgt_in = torch.cat([torch.tensor([model.bos_id], device=src.device), out_ids[:-1]]).unsqueeze(0)
            maps = model.get_attention_maps(src, tgt_in)["cross"]
            key_labels = [src_tok.decode([i], skip_special=False) for i in ids]
            query_labels = [tgt_tok.decode([int(i)], skip_special=False) for i in out_ids]
            title = f"translate, {name}: {_one_line(tgt_tok.decode(out_ids))!r}"
            out.append(
                AttentionExample(
                    [m[0].cpu() for m in maps], query_labels, key_labels, title, "output token", "source token"
                )
            )
        return out
