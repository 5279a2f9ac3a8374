"""attnkit's language models as an lm-evaluation-harness model (``lm_eval --model attnkit``).

:class:`AttnkitLM` scores and generates as lm-evaluation-harness's own Hugging Face backend (``hf``,
``lm_eval.models.huggingface.HFLM``) does, so that the two give the same numbers on the same weights:

- the same tokenisation: a context and its continuation are encoded together and split where the
  context's own encoding ends (``TemplateLM._encode_pair``), with the BOS the tokenizer's own encoding
  starts with (none when the text already starts with the BOS text); an empty context is the prefix
  token (BOS, else EOS); contexts are cut on the left to the model's context;
- the same batching order (lm_eval's ``Collator``, longest first; one-token continuations of the same
  context share one forward pass), right-padded rows read at their own positions: in a causal model
  a token never attends to the padding after it, so padding changes no result;
- ``loglikelihood_rolling``: lm_eval's disjoint rolling windows of the model's context;
- ``generate_until``: greedy (or sampling with ``do_sample=True``) with attnkit's batched generation of
  left-padded prompts, cut at the first ``until`` string or the EOS (the gen_kwargs become one
  ``SamplingParams``; the text comes from :func:`attnkit.text.generate.generate_texts`, the one text path);
  at most ``max_gen_toks`` new tokens (a task's, else the model's default of 256), the prompt cut on the left
  to the context less those.
  Where HFLM stops with an assertion when ``max_gen_toks`` leaves no room for a prompt: a
  ``max_gen_toks`` that was asked for is a ``ValueError`` that says how to set a smaller one; the
  default, on a model whose context is 256 tokens or less, becomes half the context (with a warning).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.models.utils import Collator
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from attnkit.interop import Pretrained
from attnkit.models import LanguageModel
from attnkit.models.generation import SamplingParams
from attnkit.tasks import load_model
from attnkit.text.framing import body_ids, document_bounds
from attnkit.text.generate import generate_texts
from attnkit.text.tokenizers import Tokenizer

__all__ = ["GENERATION_OPTIONS", "MAX_GEN_TOKS_ALIASES", "AttnkitLM"]

logger = logging.getLogger(__name__)

# generate_until's options (a task's generation_kwargs), read into one SamplingParams (generation_settings).
GENERATION_OPTIONS = (
    "until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed",
)  # fmt: skip
# The options that only apply when sampling (do_sample=True), as transformers' generate reads them.
_SAMPLING_ONLY = ("top_k", "top_p", "min_p", "seed")
# Other names of max_gen_toks, in lm_eval's order of priority after it (lm_eval.models.utils.normalize_gen_kwargs).
MAX_GEN_TOKS_ALIASES = ("max_new_tokens", "max_tokens", "max_completion_tokens")
_MAX_GEN_TOKS = 256  # as HFLM
_HOW_TO_SET = (
    "ask for fewer new tokens: `attnkit eval --gen-kwargs max_gen_toks=N` "
    "(evaluate_harness(gen_kwargs={'max_gen_toks': N}), lm_eval's --gen_kwargs or the task's generation_kwargs)"
)
_Request = tuple[tuple[str, str] | None, list[int], list[int]]


def _positive_int(name: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number < 1 or str(number) != str(value).strip():
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return number


class AttnkitLM(TemplateLM):
    """An attnkit language model for lm-evaluation-harness.

    Args:
        pretrained: a :class:`~attnkit.interop.Pretrained` (from :func:`attnkit.api.load_model`) or the
            path of a model folder (an attnkit model folder or a Hugging Face GPT-2 / Llama / Mistral /
            Qwen2 folder, or an attnkit run; :func:`attnkit.tasks.load_model`).
        batch_size: requests per forward pass (an int: attnkit has no ``auto`` batch size).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``... (default: CUDA when there is one).
        max_length: the context used, in tokens (default: the model's; at most the model's).
        dtype: ``"float32"`` (default: as loaded), ``"bfloat16"`` or ``"float16"``.
        max_gen_toks: generate_until's default number of new tokens (a task's ``max_gen_toks`` wins);
            default 256, or half the context when that leaves no room for a prompt.

    lm_eval passes ``max_batch_size`` and other options it has for every model; those are ignored.
    """

    def __init__(
        self,
        pretrained: Pretrained | str | Path,
        batch_size: int | str = 1,
        device: str | None = None,
        max_length: int | str | None = None,
        dtype: str | None = None,
        max_gen_toks: int | str | None = None,
        **ignored: Any,
    ) -> None:
        super().__init__()
        if isinstance(pretrained, str | Path):
            pretrained = load_model(pretrained)
        if not isinstance(pretrained, Pretrained):
            raise TypeError(
                f"pretrained must be a model folder's path or a Pretrained, not a {type(pretrained).__name__}"
            )
        model = pretrained.model
        if not isinstance(model, LanguageModel):
            raise TypeError(
                f"{pretrained.source} holds a {type(model).__name__} ({pretrained.name!r}), not a language model: "
                "lm-evaluation-harness scores decoders (attnkit lm runs, GPT-2, Llama, Mistral, Qwen2)"
            )
        if not isinstance(pretrained.tokenizer, Tokenizer):
            raise TypeError(f"{pretrained.source} has no tokenizer that attnkit can use to score text")
        if str(batch_size).startswith("auto"):
            raise ValueError("batch_size='auto' is not supported by the attnkit model: give a number, e.g. 8")
        if ignored:
            logger.debug("AttnkitLM: ignoring options %s", sorted(ignored))
        self.pretrained = pretrained
        self.tok: Tokenizer = pretrained.tokenizer
        self.batch_size_per_gpu = _positive_int("batch_size", batch_size)
        context = model.config.max_len
        self._max_length = context if max_length is None else _positive_int("max_length", max_length)
        if self._max_length > context:
            raise ValueError(f"max_length={self._max_length} is longer than the model's context of {context} tokens")
        # the default, made to fit the context (said once, when a request uses it)
        self._clamped = max_gen_toks is None and self._max_length <= _MAX_GEN_TOKS
        if max_gen_toks is None:
            self._max_gen_toks = max(self._max_length // 2, 1) if self._clamped else _MAX_GEN_TOKS
        else:
            self._max_gen_toks = self._room("max_gen_toks", max_gen_toks)
        if device and str(device).startswith("cuda") and not torch.cuda.is_available():
            # lm_eval's command line asks for "cuda" by default; its HF backend falls back to the CPU too
            logger.warning("device %r asked for, but there is no CUDA device: using the CPU", device)
            device = "cpu"
        self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        if dtype not in (None, "auto", *dtypes):
            raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {dtype!r}")
        self.model: LanguageModel = model.to(self._device).eval()
        if dtype in dtypes:
            self.model.to(dtypes[dtype])
        self._bos, _ = document_bounds(self.tok)
        eos = self.tok.eos_id
        self._eot = eos if eos is not None else model.config.eos_id
        bos = self.tok.bos_id
        self._prefix = bos if bos is not None else self._eot
        self._bos_text = self.tok.decode([bos], skip_special=False) if bos is not None else None

    # ------------------------------------------------------------------ what lm_eval asks of a model
    @property
    def eot_token_id(self) -> int:
        """The end-of-text id (the tokenizer's EOS, else the model's)."""
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        """What an empty context is: the BOS id, else the EOS id (as HFLM)."""
        return self._prefix

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self.batch_size_per_gpu

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def tokenizer_name(self) -> str:
        return str(self.pretrained.source).replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        """The ids of ``string``: with the BOS that starts the tokenizer's own encoding (Llama's ``<s>``;
        none for GPT-2 and Qwen2) unless ``add_special_tokens`` is false, or it is ``None`` and the text
        already starts with the BOS text. ``left_truncate_len`` keeps the last ids only."""
        special = add_special_tokens
        if special is None:
            special = not (self._bos_text and string.startswith(self._bos_text))
        ids = body_ids(self.tok, string)
        if special and self._bos is not None:
            ids = [self._bos, *ids]
        left = kwargs.get("left_truncate_len")
        return ids[-left:] if left else ids

    def tok_decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tok.decode(list(ids), skip_special=skip_special_tokens)

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """The source of the chat template ``--apply_chat_template`` uses (the folder's, else attnkit's default)."""
        if chat_template is False or chat_template is None:
            return None
        return self.pretrained.template.source

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The conversation as text, as transformers' ``apply_chat_template(tokenize=False)`` writes it."""
        return self.pretrained.template.render(chat_history, add_generation_prompt=add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        params = sum(p.numel() for p in self.model.parameters())
        return {"model_source": str(self.pretrained.source), "model_num_parameters": params}

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def _logprobs(self, rows: list[list[int]]) -> torch.Tensor:
        """Log-probabilities ``[B, T, V]`` (float32) after each position of ``rows``, right-padded to ``T``."""
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return F.log_softmax(self.model(ids.to(self._device)).float(), dim=-1)

    def _loglikelihood_tokens(
        self, requests: list[_Request], disable_tqdm: bool = False, **kwargs: Any
    ) -> list[tuple[float, bool]]:
        """``(sum of the continuation's log-probabilities, whether greedy decoding gives it)`` per
        ``(key, context ids, continuation ids)`` request, in the order given."""

        def sort_key(req: _Request) -> tuple[int, tuple[int, ...]]:
            toks = req[1] + req[2]
            return -len(toks), tuple(toks)

        order = Collator(requests, sort_fn=sort_key, group_by="contexts", group_fn=lambda r: r[-2] + r[-1][:-1])
        results: list[tuple[float, bool]] = []
        for chunk in order.get_batched(n=self.batch_size, batch_fn=None):
            rows = []
            for _, context, continuation in chunk:
                if not context or not continuation:
                    raise ValueError("a loglikelihood request needs a non-empty context and continuation")
                if len(context) + len(continuation) > self.max_length + 1:
                    logger.warning(
                        "context (%d tokens) and continuation (%d) exceed the context of %d tokens: "
                        "cutting %d tokens on the left",
                        len(context),
                        len(continuation),
                        self.max_length,
                        len(context) + len(continuation) - self.max_length - 1,
                    )
                rows.append((context + continuation)[-(self.max_length + 1) :][:-1])
            logprobs = self._logprobs(rows)
            for (key, context, continuation), row, scores in zip(chunk, rows, logprobs, strict=True):
                scores = scores[len(row) - len(continuation) : len(row)].unsqueeze(0)  # [1, n, V]
                greedy = scores.argmax(dim=-1)
                for key_, cont, cont_scores in order.get_cache(
                    req_str=key, cxt_toks=context, cont_toks=continuation, logits=scores
                ):
                    target = torch.tensor(cont, dtype=torch.long, device=cont_scores.device).unsqueeze(0)
                    is_greedy = bool((greedy[:, -target.shape[1] :] == target).all())
                    # the last positions: a request that shares its tokens with a longer continuation's
                    # (rolling windows of a repetitive text) is scored on its own (HFLM gathers the first ones)
                    picked = cont_scores[:, -target.shape[1] :]
                    logprob = float(torch.gather(picked, 2, target.unsqueeze(-1)).sum())
                    results.append((logprob, is_greedy))
                    if key_ is not None:
                        self.cache_hook.add_partial("loglikelihood", key_, (logprob, is_greedy))
        return order.get_original(results)

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """The log-likelihood of whole texts, in disjoint windows of the context (each conditioned on
        the text before it, the first on the prefix token), as lm_eval's HF backend."""
        windows: list[_Request] = []
        counts = []
        for (text,) in (req.args for req in requests):
            pieces = [
                make_disjoint_window(w)
                for w in get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.prefix_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            windows += [(None, context, continuation) for context, continuation in pieces]
            counts.append(len(pieces))
        scores = self._loglikelihood_tokens(windows)
        out: list[float] = []
        start = 0
        for req, n in zip(requests, counts, strict=True):
            out.append(sum(score for score, _ in scores[start : start + n]))
            start += n
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), out[-1])
        return out

    # ------------------------------------------------------------------ generation
    def _room(self, name: str, value: Any) -> int:
        """``value`` as a number of new tokens that leaves room for a prompt in the context."""
        number = _positive_int(name, value)
        if number >= self.max_length:
            raise ValueError(
                f"{name}={number} leaves no room for the prompt in the context of {self.max_length} tokens "
                f"(a prompt is cut on the left to the context less {name}): {_HOW_TO_SET}, N < {self.max_length}"
            )
        return number

    def generation_settings(self, options: dict[str, Any]) -> SamplingParams:
        """The :class:`~attnkit.models.generation.SamplingParams` of a request's generation options (a task's
        ``generation_kwargs``, with ``--gen-kwargs`` over them): ``max_tokens`` is ``max_gen_toks``, ``stop``
        the ``until`` strings and the EOS text; greedy unless ``do_sample`` (then ``temperature``, 1 by default,
        ``top_k``, ``top_p``, ``min_p`` and ``seed``, as transformers reads them); ``repetition_penalty``
        always. A ``ValueError`` for options the model does not take (or a wrong value: a
        :class:`~attnkit.models.generation.SamplingError` naming it) and for a ``max_gen_toks`` that leaves no
        room for a prompt."""
        if not isinstance(options, dict):
            raise TypeError(f"generation options must be a dict, got {type(options).__name__}")
        unknown = sorted(set(options) - set(GENERATION_OPTIONS) - set(MAX_GEN_TOKS_ALIASES))
        if unknown:
            raise ValueError(
                f"generation options {unknown} are not supported by the attnkit model; "
                f"it takes {list(GENERATION_OPTIONS)} (max_gen_toks also as {', '.join(MAX_GEN_TOKS_ALIASES)})"
            )
        until = options.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        if not all(isinstance(u, str) for u in until):
            raise ValueError(f"until must be a string or a list of strings, got {options.get('until')!r}")
        eos = self.tok.decode([self.eot_token_id], skip_special=False)
        if eos and eos not in until:
            until.append(eos)
        name = next((k for k in ("max_gen_toks", *MAX_GEN_TOKS_ALIASES) if options.get(k) is not None), None)
        max_gen_toks = self._room(name or "max_gen_toks", self.max_gen_toks if name is None else options[name])
        if name is None and self._clamped:
            self._clamped = False
            logger.warning(
                "the default max_gen_toks=%d leaves no room for a prompt in the context of %d tokens: "
                "requests that do not set it generate at most %d tokens; to choose, %s",
                _MAX_GEN_TOKS,
                self.max_length,
                max_gen_toks,
                _HOW_TO_SET,
            )
        fields: dict[str, Any] = {"temperature": 0.0}
        if options.get("do_sample"):  # as transformers: sampling only when asked, at temperature 1 by default
            fields["temperature"] = float(options.get("temperature", 1.0))
            fields |= {k: options[k] for k in _SAMPLING_ONLY if options.get(k) is not None}
        if options.get("repetition_penalty") is not None:  # transformers applies it to greedy decoding too
            fields["repetition_penalty"] = options["repetition_penalty"]
        return SamplingParams(max_tokens=max_gen_toks, stop=tuple(dict.fromkeys(u for u in until if u)), **fields)

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """The text generated after each request's context, cut before the first of its ``until``
        strings (and the EOS); requests with the same generation options are generated together, in
        batches of left-padded prompts (each row computed as if alone)."""

        def sort_key(req: tuple[str, dict[str, Any]]) -> tuple[int, str]:
            return -len(self.tok_encode(req[0])), req[0]

        order = Collator(
            [req.args for req in requests], sort_fn=sort_key, group_by="gen_kwargs", group_fn=lambda r: r[1]
        )
        results: list[str] = []
        for chunk in order.get_batched(n=self.batch_size, batch_fn=None):
            contexts = [context for context, _ in chunk]
            options = chunk[0][1]
            params = self.generation_settings(options)
            assert params.max_tokens is not None
            max_context = self.max_length - params.max_tokens  # >= 1: generation_settings checked
            special = not (self._bos_text and contexts[0].startswith(self._bos_text))
            prompts = [self.tok_encode(c, add_special_tokens=special)[-max_context:] for c in contexts]
            # the one text path: stops at the EOS, cut before the first `until` string (lm_eval's split)
            texts = generate_texts(self.model, self.tok, prompts, params, stop_ids=[self.eot_token_id])
            for (context, _), text in zip(chunk, texts, strict=True):
                results.append(text)
                self.cache_hook.add_partial("generate_until", (context, options), text)
        return order.get_original(results)
