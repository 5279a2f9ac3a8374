"""The explorer's views of one input, per kind of model: what :mod:`attnkit.viz.explorer.app` serves
and :func:`attnkit.viz.explore` embeds.

:func:`load_explorer` turns any run, attnkit model folder or Hugging Face folder (or a loaded
:class:`~attnkit.interop.Pretrained` / :class:`~attnkit.tasks.LoadedRun`) into an :class:`Explorer`,
whose :meth:`Explorer.view` computes the payload of one input (see :mod:`.payload`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, ClassVar

import torch

from attnkit.data.lm.blocks import tokenizer_of
from attnkit.interop import Pretrained, load_pretrained, plain_model
from attnkit.models import BertClassifier, BertEncoder, LanguageModel
from attnkit.models.generation import SamplingParams, check_seed, check_temperature
from attnkit.text.tokenizers import Tokenizer
from attnkit.training.resolve import resolve_model
from attnkit.training.snapshots import load_snapshot, read_snapshot_index
from attnkit.training.task import LoadedRun
from attnkit.viz.explorer.payload import ATTENTION_BUDGET, next_token_table, pack_attention, token_label
from attnkit.viz.runs import loaded_run

__all__ = ["DecoderExplorer", "EncoderExplorer", "Explorer", "RunExplorer", "load_explorer"]

MAX_STEPS = 512  # the most tokens the page may ask a decoder to generate
MAX_TEMPERATURE = 10.0  # the highest temperature the page may ask for


class Explorer:
    """A model ready to explore: :meth:`info` (what it is, what to type) and :meth:`view` (one input)."""

    kind = "model"
    decoder = False
    example = ""
    hint = "a text"

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self._last: tuple[tuple[str, int, float, int], dict[str, Any]] | None = None  # (input, _compute's)

    def info(self) -> dict[str, Any]:
        """The model's description for the page."""
        return {
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "decoder": self.decoder,
            "example": self.example,
            "hint": self.hint,
        }

    def view(
        self,
        text: str,
        *,
        steps: int = 0,
        temperature: float = 0.0,
        seed: int = 0,
        layer: int | None = None,
        position: int | None = None,
        budget: int = ATTENTION_BUDGET,
        snapshot: int | None = None,
    ) -> dict[str, Any]:
        """The payload of input ``text``: ``{"model", "input", "blocks", ...}`` (decoders: ``steps`` tokens
        generated after it, greedy at ``temperature=0``, else sampled with ``seed``). A bad input is a
        :class:`ValueError` that says what was wrong.

        ``layer``: the attention of that layer only (from 0; all its heads, whole), else of every layer
        (top-k per row over ``budget``). ``position``: a decoder's next-token table at that position only
        (from 0; negative from the end), else at every position. The page asks for what it shows; the
        model's forward pass of the last input is kept, so asking for another layer or position of the
        same input costs no forward pass. ``snapshot``: a training step of the run's weight snapshots
        (:meth:`use_snapshot`; None: the trained weights)."""
        self.use_snapshot(snapshot)
        if not isinstance(text, str):
            raise ValueError(f"the input must be a text, got {type(text).__name__}")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= MAX_STEPS:
            raise ValueError(f"steps must be an int in [0, {MAX_STEPS}], got {steps!r}")
        if not self.decoder and steps:
            raise ValueError(f"this {self.kind} model does not generate: steps must be 0")
        # The page's bounds, tighter than SamplingParams' (its slider's top, and always a seed: a step is the
        # same when stepped again), with the rules of the one check; steps decode with a SamplingParams (tokens).
        check_temperature(temperature, maximum=MAX_TEMPERATURE)
        check_seed(seed, optional=False)
        if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
            raise ValueError(f"position must be an int (a token's index; -1: the last), got {position!r}")
        key = (text, steps, float(temperature), seed) if steps else (text, 0, 0.0, 0)  # what the pass depends on
        if self._last is None or self._last[0] != key:
            self._last = None
            with torch.no_grad():
                self._last = (key, self._compute(text, steps, float(temperature), seed))
        out = self._payload(self._last[1], layer, position, budget)
        out["model"] = self.info()
        out["input"] = {"text": text, "steps": steps, "temperature": temperature, "seed": seed, "snapshot": snapshot}
        return out

    def use_snapshot(self, step: Any) -> None:
        """Look at the weights of the run's snapshot of training step ``step`` from now on (None: the trained ones).
        Only a decoder's run trained with ``trainer.snapshot_every_n_steps`` has snapshots."""
        if step is not None:
            raise ValueError(
                f"snapshot: this {self.kind} model has no weight snapshots (an lm or sft run trained with "
                "trainer.snapshot_every_n_steps=K has); leave snapshot out"
            )

    def _compute(self, text: str, steps: int, temperature: float, seed: int) -> dict[str, Any]:
        """The model's pass over one input: what :meth:`_payload` reads (kept for the next request)."""
        raise NotImplementedError

    def _payload(self, run: dict[str, Any], layer: int | None, position: int | None, budget: int) -> dict[str, Any]:
        raise NotImplementedError


class DecoderExplorer(Explorer):
    """A language model (an lm run, an imported GPT-2 / Llama / Mistral / Qwen2): causal self-attention,
    the next-token table at every position and generation step by step."""

    kind = "decoder"
    decoder = True
    example = "The"
    hint = "a text to continue"

    def __init__(self, pretrained: Pretrained, run_dir: Path | None = None) -> None:
        super().__init__(pretrained.name, str(pretrained.source))
        if not isinstance(pretrained.model, LanguageModel) or not isinstance(pretrained.tokenizer, Tokenizer):
            raise ValueError(f"{pretrained.source}: a decoder explorer needs a language model with its tokenizer")
        self.pretrained = pretrained
        self.model: LanguageModel = pretrained.model.eval()
        self.tokenizer: Tokenizer = pretrained.tokenizer
        self.label = functools.lru_cache(maxsize=65536)(self._label)
        # The run's weight snapshots (a LoRA run's hold adapters, which the merged model here cannot take: none).
        self.run_dir = run_dir
        entries = read_snapshot_index(run_dir) if run_dir is not None else []
        self.snapshots = [] if any(e.get("lora") for e in entries) else entries
        self.snapshot: int | None = None  # the step whose weights the model holds; None: the trained ones
        self._trained: dict[str, torch.Tensor] | None = None  # the trained weights, kept while a snapshot is shown

    def info(self) -> dict[str, Any]:
        return {**super().info(), "snapshots": [{"step": e["step"], "loss": e.get("loss")} for e in self.snapshots]}

    def use_snapshot(self, step: Any) -> None:
        if step == self.snapshot and (step is None or not isinstance(step, bool)):
            return
        if step is None:
            assert self._trained is not None  # set when a snapshot was loaded
            self.model.load_state_dict(self._trained)
        else:
            steps = [e["step"] for e in self.snapshots]
            entry = next(
                (
                    e
                    for e in self.snapshots
                    if e["step"] == step and isinstance(step, int) and not isinstance(step, bool)
                ),
                None,
            )
            if entry is None:
                raise ValueError(
                    f"snapshot must be one of the run's snapshot steps {steps} (or null: the trained weights), got "
                    f"{step!r}"
                    if steps
                    else "snapshot: this run has no weight snapshots (train it with "
                    "trainer.snapshot_every_n_steps=K); leave snapshot out"
                )
            if self._trained is None:
                self._trained = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            assert self.run_dir is not None  # snapshots come from a run folder
            load_snapshot(self.model, self.run_dir, entry)
        self.snapshot = step
        self._last = None  # the kept forward pass was of other weights

    def _label(self, token_id: int) -> str:
        if token_id >= self.tokenizer.vocab_size:  # a model's padded vocabulary: ids no token has
            return f"<{token_id}>"
        return token_label(self.tokenizer.decode([token_id], skip_special=False))

    def tokens(self, text: str, steps: int = 0, temperature: float = 0.0, seed: int = 0) -> tuple[list[int], int, bool]:
        """``(ids, prompt length, finished)``: the prompt's ids then ``steps`` generated ones, exactly as
        :meth:`Pretrained.generate` makes them (one :class:`SamplingParams`: greedy, or sampled with ``seed``),
        cut after a stop id (``finished``)."""
        prompt = self.pretrained.encode_prompt(text)
        context = self.model.config.max_len
        if len(prompt) + steps > context:
            raise ValueError(
                f"the input is {len(prompt)} tokens and {steps} more were asked for, past the model's context of "
                f"{context} tokens: shorten the input or step back"
            )
        if not steps:
            return prompt, len(prompt), False
        stops = self.pretrained.eos_ids
        params = SamplingParams(max_tokens=steps, temperature=temperature, seed=seed, stop_ids=tuple(stops))
        out = self.model.generate(torch.tensor([prompt]), steps, params=params)  # its generator: seeded with seed
        new = out[0, len(prompt) :].tolist()
        end = next((i + 1 for i, t in enumerate(new) if t in stops), None)
        return prompt + new[: end or len(new)], len(prompt), end is not None

    def _compute(self, text: str, steps: int, temperature: float, seed: int) -> dict[str, Any]:
        ids, prompt_length, finished = self.tokens(text, steps, temperature, seed)
        logits, maps = self.model.forward_with_attention(torch.tensor([ids]))
        labels = [self.label(i) for i in ids]
        out = {"ids": ids, "prompt_length": prompt_length, "finished": finished, "labels": labels}
        return {**out, "logits": logits[0], "maps": [m[0] for m in maps]}

    def _payload(self, run: dict[str, Any], layer: int | None, position: int | None, budget: int) -> dict[str, Any]:
        labels = run["labels"]
        block = pack_attention(
            run["maps"], name="self-attention", query_labels=labels, key_labels=labels, causal=True, budget=budget,
            layer=layer,
        )  # fmt: skip
        if position is not None and not -len(labels) <= position < len(labels):
            raise ValueError(f"position {position} is out of range: the input has {len(labels)} tokens")
        positions = None if position is None else [position % len(labels)]
        return {
            "tokens": labels,
            "ids": run["ids"],
            "prompt_length": run["prompt_length"],
            "finished": run["finished"],
            "blocks": [block],
            "next": next_token_table(run["logits"], self.label, positions=positions),
        }


class EncoderExplorer(Explorer):
    """A BERT-family encoder (an imported BERT, or a BERT classifier's encoder): self-attention over the
    tokens, ``[CLS]`` and ``[SEP]`` included."""

    kind = "encoder"
    example = "The cat sat on the mat."

    def __init__(self, pretrained: Pretrained) -> None:
        super().__init__(pretrained.name, str(pretrained.source))
        model = pretrained.model
        if isinstance(model, BertClassifier):
            model = model.bert
        if not isinstance(model, BertEncoder) or pretrained.tokenizer is None:
            raise ValueError(f"{pretrained.source}: an encoder explorer needs a BERT-family encoder with its tokenizer")
        self.encoder: BertEncoder = model
        self.tokenizer: Any = pretrained.tokenizer
        self.pretrained = pretrained

    def _compute(self, text: str, steps: int, temperature: float, seed: int) -> dict[str, Any]:
        ids, mask = self.pretrained.encode([text])
        maps = self.encoder.get_attention_maps(ids, mask)
        labels = [token_label(self.tokenizer.id_to_token(int(i))) for i in ids[0]]
        return {"labels": labels, "mask": mask[0], "maps": [m[0] for m in maps]}

    def _payload(self, run: dict[str, Any], layer: int | None, position: int | None, budget: int) -> dict[str, Any]:
        labels = run["labels"]
        block = pack_attention(
            run["maps"], name="self-attention", query_labels=labels, key_labels=labels, key_mask=run["mask"],
            budget=budget, layer=layer,
        )  # fmt: skip
        return {"tokens": labels, "blocks": [block]}


class RunExplorer(Explorer):
    """A trained run of an encoder task (reverse, anomaly, classify) or of translate: its task's attention
    example for the input (:meth:`attnkit.tasks.Task.attention_examples`) and what the task predicts."""

    HINTS: ClassVar[dict[str, tuple[str, str]]] = {
        "reverse": ("symbols separated by spaces", "3 1 4 1 5"),
        "anomaly": ("the index of a test set", "0"),
        "classify": ("a text to classify", "a wonderful film"),
        "translate": ("a sentence to translate", "hello"),
    }

    def __init__(self, loaded: LoadedRun, source: str) -> None:
        self.task_name = str(loaded.hparams.get("task") or loaded.task.name)
        super().__init__(self.task_name, source)
        self.kind = self.task_name
        self.loaded = loaded
        self.hint, self.example = self.HINTS.get(self.task_name, ("an input as for attnkit predict", ""))

    def _payload(self, run: dict[str, Any], layer: int | None, position: int | None, budget: int) -> dict[str, Any]:
        example = run["example"]
        name = "cross-attention" if self.task_name == "translate" else "self-attention"
        block = pack_attention(
            example.maps, name=name, query_labels=example.query_labels, key_labels=example.key_labels, budget=budget,
            layer=layer,
        )  # fmt: skip
        block["query_axis"], block["key_axis"] = example.query_axis, example.key_axis
        return {"tokens": example.key_labels, "title": example.title, "blocks": [block], **run["extra"]}

    def _compute(self, text: str, steps: int, temperature: float, seed: int) -> dict[str, Any]:
        if not text.strip():
            raise ValueError(f"type an input: {self.hint} (e.g. {self.example!r})")
        module = self.loaded.module.eval()
        example = self.loaded.task.attention_examples(module, [text])[0]
        out: dict[str, Any] = {}
        if self.task_name == "anomaly" and example.probabilities is not None:
            probs = example.probabilities
            out["items"] = {
                "probabilities": probs,
                "predicted": max(range(len(probs)), key=probs.__getitem__),
                "target": example.target,
            }
        elif self.task_name == "classify":
            out["classes"] = self._classes(text, example.maps, example.key_labels)
        elif self.task_name == "translate":
            out["hypotheses"] = self._hypotheses(text)
        return {"example": example, "extra": out}

    def _classes(self, text: str, maps: list[torch.Tensor], words: list[str]) -> dict[str, Any]:
        """Class probabilities, and per layer x head the attention of the pooled representation over the
        tokens: the ``[CLS]`` row (cls pooling), else the mean of the rows (mean pooling)."""
        module = self.loaded.module
        dm: Any = self.loaded.task.build_datamodule(self.loaded.config, module.hparams["artifacts"])
        ids, mask = dm.encode_texts([text])  # the classify task's TextClassificationDataModule
        probs = module.model(ids.to(module.device), mask.to(module.device)).softmax(-1)[0].tolist()
        cls = bool(words) and words[0] == "[CLS]"
        pooled = [(m[:, 0] if cls else m.mean(dim=1)).tolist() for m in maps]  # [L][H][T]
        names = list(module.hparams["artifacts"]["label_names"])
        return {
            "names": names,
            "probabilities": probs,
            "predicted": max(range(len(probs)), key=probs.__getitem__),
            "pooling": "cls" if cls else "mean",
            "pooled_attention": [[[round(v, 4) for v in head] for head in layer] for layer in pooled],
        }

    def _hypotheses(self, text: str) -> list[dict[str, Any]]:
        """The translation of greedy decoding and of the run's beam search, with their scores (summed
        log-probability of the tokens, end of sentence included)."""
        from attnkit.tasks.translate import translate_scored

        module = self.loaded.module
        beam = int(module.hparams["config"].get("decode", {}).get("beam_size", 1))
        out = []
        for size in sorted({1, max(beam, 4)}):
            [(translation, score)] = translate_scored(module, [text], beam_size=size, warn=lambda _m: None)
            out.append({"beam_size": size, "text": translation, "log_prob": score})
        return out


def load_explorer(source: Any) -> Explorer:
    """An :class:`Explorer` of ``source``: a run folder or checkpoint file, an attnkit model folder, a
    Hugging Face folder (see :func:`attnkit.tasks.load_model`), a loaded :class:`Pretrained` or
    :class:`LoadedRun`, or an :class:`Explorer` (returned as it is)."""
    if isinstance(source, Explorer):
        return source
    if isinstance(source, Pretrained):
        return _from_pretrained(source)
    if isinstance(source, LoadedRun):
        return _from_run(source, str(source.run_dir or source.checkpoint))
    if not isinstance(source, (str, Path)):
        raise TypeError(f"explore takes a run or model folder (a path), a Pretrained or a LoadedRun, got {source!r}")
    resolved = resolve_model(source)
    if resolved.is_model_folder:
        return _from_pretrained(load_pretrained(resolved.path))
    return _from_run(loaded_run(resolved), str(resolved.path))


def _from_pretrained(pretrained: Pretrained) -> Explorer:
    if isinstance(pretrained.model, LanguageModel):
        return DecoderExplorer(pretrained)
    if isinstance(pretrained.model, (BertEncoder, BertClassifier)):
        return EncoderExplorer(pretrained)
    raise ValueError(
        f"{pretrained.source} holds a {pretrained.name!r} model: from model folders attnkit explore reads decoders "
        "and BERT encoders; explore the run it was exported from instead"
    )


def _from_run(loaded: LoadedRun, source: str) -> Explorer:
    if loaded.hparams.get("task") == "lm" or isinstance(loaded.module.model, LanguageModel):
        artifacts = loaded.hparams.get("artifacts") or {}
        tokenizer = tokenizer_of(artifacts) if "tokenizer" in artifacts else None
        model = plain_model(loaded.module.model, merge=True, source=source).eval()
        return DecoderExplorer(Pretrained(model, "lm", tokenizer, Path(source), dict(loaded.hparams)), loaded.run_dir)
    return RunExplorer(loaded, source)
