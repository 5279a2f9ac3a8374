"""Translation with the encoder–decoder Transformer: built-in English->Spanish numbers or a Tatoeba pairs file
(its config: :mod:`attnkit.tasks.translate.config`; its LightningModule: :mod:`attnkit.tasks.translate.module`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnkit.data.readers.lines import numbered_inputs, read_lines
from attnkit.models.seq2seq import Seq2SeqConfig
from attnkit.tasks.base import AttentionExample, ModelSpec, Task
from attnkit.tasks.registry import register_task
from attnkit.tasks.translate.config import DecodeConfig, TranslateConfig
from attnkit.tasks.translate.decoding import corpus_scores, decode_batch, one_line
from attnkit.text.tokenizers import EOS_ID

if TYPE_CHECKING:
    from attnkit.data.translate.module import PairsDataModule
    from attnkit.tasks.translate.module import TranslateModule
    from attnkit.training.module import TaskModule

__all__ = [
    "DecodeConfig",
    "TranslateConfig",
    "TranslateTask",
    "corpus_scores",
    "read_lines",
    "translate_run",
    "translate_scored",
    "translate_texts",
]


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
    from attnkit.tasks.translate.module import TranslateModule

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
                out[i] = (one_line(tgt_tok.decode(ids)), log_prob)
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
    from attnkit.training.runner import load_run  # Lightning: only when a run is loaded

    loaded = load_run(run, TranslateTask())
    return translate_texts(loaded.module, texts, beam_size=beam_size, warn=warn)


@register_task
class TranslateTask(Task[TranslateConfig]):
    name = "translate"
    summary = "translation with an encoder-decoder Transformer: Tatoeba pairs files or built-in English->Spanish"
    config_cls = TranslateConfig
    monitor = ("val/acc", "max")  # teacher-forced token accuracy: cheap, and follows the exact-match rate

    def module_class(self) -> type[TaskModule]:
        from attnkit.tasks.translate.module import TranslateModule

        return TranslateModule

    def build_datamodule(self, cfg: TranslateConfig, artifacts: dict[str, Any] | None = None) -> PairsDataModule:
        from attnkit.data.translate.module import PairsDataModule

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
        from attnkit.data.translate.module import PairsDataModule

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
        from attnkit.tasks.translate.module import TranslateModule

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
            title = f"translate, {name}: {one_line(tgt_tok.decode(out_ids.tolist()))!r}"
            out.append(
                AttentionExample(
                    [m[0].cpu() for m in maps], query_labels, key_labels, title, "output token", "source token"
                )
            )
        return out
