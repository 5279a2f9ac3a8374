"""The request bodies of the OpenAI-compatible endpoints, and the OpenAI-style error body.

Requests are pydantic models that *ignore* fields they do not know (``extra="ignore"``), as OpenAI's
clients send fields attnkit does not implement (``user``, ...).

The sampling options are :class:`attnkit.models.generation.SamplingParams`' fields under OpenAI's names
(``temperature``, ``top_p``, ``n``, ``stop``, ``seed``, ``max_tokens`` / ``max_completion_tokens``,
``presence_penalty``, ``frequency_penalty``, ``logit_bias``, ``logprobs`` / ``top_logprobs``) and the ones vLLM
also accepts (``top_k``, ``min_p``, ``repetition_penalty``); each field's description is the parameters type's
own (:func:`~attnkit.models.generation.field_doc`). The schema keeps each value as sent (``true`` or ``"0.5"`` is
no number) and :meth:`SamplingRequest.sampling_params` builds the :class:`SamplingParams` from them: its checks
are the only rules, and a :class:`SamplingError` becomes a :class:`RequestError` naming the OpenAI field (a 400).
The server narrows a few ranges to OpenAI's (its bounds, not other rules): ``temperature`` at most 2, at most 4
``stop`` strings, ``n`` at most the server's ``--max-batch``, completions' ``logprobs`` at most 5 (OpenAI's legacy
range; chat's ``top_logprobs`` is the parameters type's 0..20) and ``max_tokens`` at least 1 (0 only with
``echo``, to score a prompt).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from attnkit.models.generation import (
    FIELDS,
    SamplingError,
    SamplingParams,
    check_max_tokens,
    check_temperature,
    field_doc,
)

__all__ = [
    "MAX_COMPLETION_LOGPROBS",
    "MAX_STOPS",
    "MAX_TEMPERATURE",
    "OPTIONS",
    "SERVER_FIELDS",
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "RequestError",
    "SamplingRequest",
    "StreamOptions",
    "error_body",
    "validation_message",
]

MAX_STOPS = 4  # OpenAI's most stop sequences
MAX_TEMPERATURE = 2.0  # OpenAI's range is [0, 2]
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's legacy range of /v1/completions' logprobs
SERVER_FIELDS = (  # SamplingParams' fields a request does not set under their own name
    "max_tokens",  # max_tokens / max_completion_tokens, and the server's cap (--max-tokens)
    "logprobs",  # completions' logprobs (0..5), chat's logprobs + top_logprobs
    "stop_ids",  # the server's (EOS, a chat template's end-of-turn)
)
OPTIONS = tuple(name for name in FIELDS if name not in SERVER_FIELDS)
"""SamplingParams' fields a request sets under their own name (OpenAI's, and the extensions vLLM also accepts):
every field of the parameters type but :data:`SERVER_FIELDS`, so a new option is on the server at once."""


def _json_type(name: str) -> str | None:
    """The JSON type of field ``name`` in the API's schema (from its annotation; the value is checked by
    ``SamplingParams``)."""
    annotation = str(FIELDS[name].type)
    if annotation.startswith("tuple[tuple"):
        return "object"  # logit_bias: {"token id": bias}
    if annotation.startswith("tuple[str"):
        return None  # a string or a list of strings
    return "number" if "float" in annotation else "integer" if "int" in annotation else None


class RequestError(ValueError):
    """A request's value that is wrong: ``param`` is the request field to name in the 400 (OpenAI's name)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _option(name: str, *, default: Any = None, doc: str | None = None) -> Any:
    """A request field kept as sent (the parameters type checks it), described by ``SamplingParams``' field
    ``name``."""
    kind = _json_type(name)
    extra: dict[str, Any] | None = {"type": kind} if kind else None
    return Field(default, description=doc or field_doc(name), json_schema_extra=extra)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = False


_DOCS = {  # the server's bounds, added to the parameters type's descriptions
    "temperature": f"{field_doc('temperature')}; at most {MAX_TEMPERATURE:g}",
    "stop": f"{field_doc('stop')}: a string or a list of at most {MAX_STOPS}",
    "n": f"{field_doc('n')}; at most the server's --max-batch",
    "logit_bias": f"{field_doc('logit_bias')}: a JSON object, token id (as a string) -> bias",
}
# One request field per option, kept as sent (SamplingParams checks it) and described by the parameters type.
_FIELDS: dict[str, Any] = {name: (Any, _option(name, doc=_DOCS.get(name))) for name in OPTIONS}
_Options: Any = create_model("SamplingOptions", __base__=_Lenient, **_FIELDS)


class SamplingRequest(_Options):
    """What completions and chat requests share: the model, the sampling options (:data:`OPTIONS`, ``null``
    for an option is its default) and streaming."""

    model: str = Field(..., min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def _max_tokens(self) -> tuple[str, Any]:
        """The request's ``(field name, value)`` of the most new tokens."""
        return "max_tokens", getattr(self, "max_tokens", None)

    def _logprobs(self) -> tuple[str, Any]:
        """The request's ``(field name, value)`` of ``SamplingParams.logprobs`` (checked by the subclass)."""
        return "logprobs", None

    def _min_tokens(self) -> int:
        return 1

    def sampling_params(
        self, *, cap: Any, max_batch: int, vocab_size: int, stops: tuple[str, ...] = (), stop_ids: tuple[int, ...] = ()
    ) -> SamplingParams:
        """The request's :class:`SamplingParams` (raises :class:`RequestError` naming the wrong field).

        ``cap(max_tokens)``: the server's cap of the most new tokens (``None``: its default). ``stops`` and
        ``stop_ids``: what the server adds (a chat template's end-of-turn strings and ids)."""
        name, limit = self._max_tokens()
        _check(check_max_tokens, limit, minimum=self._min_tokens(), field=name)
        stop = getattr(self, "stop", None)
        if isinstance(stop, list) and len(stop) > MAX_STOPS:
            raise RequestError(f"stop: at most {MAX_STOPS} stop sequences, got {len(stop)}", "stop")
        options = {k: getattr(self, k) for k in OPTIONS if getattr(self, k) is not None}
        if "logit_bias" in options:
            options["logit_bias"] = _bias(options["logit_bias"])
        logprobs_name, logprobs = self._logprobs()
        names = {"max_tokens": name, "logprobs": logprobs_name}
        try:
            params = SamplingParams(max_tokens=cap(limit), logprobs=logprobs, **options)
            params.check_vocab(vocab_size)
        except SamplingError as err:
            param = names.get(err.field, err.field)
            message = str(err)
            raise RequestError(message.replace(err.field, param, 1) if param != err.field else message, param) from None
        except TypeError as err:  # not a field of SamplingParams: cannot happen with OPTIONS, kept as a 400
            raise RequestError(str(err), "body") from None
        _check(check_temperature, params.temperature, maximum=MAX_TEMPERATURE)  # OpenAI's bound
        if params.n > max_batch:
            raise RequestError(
                f"n must be at most {max_batch} on this server (attnkit serve --max-batch: the sequences decoded "
                f"together), got {params.n}",
                "n",
            )
        extra = tuple(s for s in stops if s not in params.stop)
        return params.replace(stop=params.stop + extra, stop_ids=params.stop_ids + tuple(stop_ids))


def _check(check: Any, value: Any, **kwargs: Any) -> None:
    try:
        check(value, **kwargs)
    except SamplingError as err:
        raise RequestError(str(err), err.field) from None


def _bias(value: Any) -> Any:
    """OpenAI's ``logit_bias`` (a JSON object, token id as a string -> bias) as ``{id: bias}``; the ids and
    biases are then checked by ``SamplingParams``."""
    if not isinstance(value, Mapping):
        raise RequestError(
            f'logit_bias must be a JSON object mapping token ids (as strings, e.g. {{"50256": -100}}) to a bias in '
            f"[-100, 100], got {value!r}",
            "logit_bias",
        )
    out = {}
    for key, bias in value.items():
        # more than 20 digits: past every vocabulary (and int() refuses more than 4300)
        if not isinstance(key, str) or not key.isdigit() or not key.isascii() or len(key) > 20:
            raise RequestError(
                f'logit_bias keys must be token ids written as strings (e.g. "42"), got {key!r}', "logit_bias"
            )
        out[int(key)] = bias
    return out


def _prompt(value: Any) -> Any:
    """A text, a non-empty list of texts, a non-empty list of token ids or a non-empty list of such lists."""

    def ids(v: Any) -> bool:
        return isinstance(v, list) and bool(v) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)

    if isinstance(value, str):
        return value
    if (
        isinstance(value, list)
        and value
        and (all(isinstance(v, str) for v in value) or ids(value) or all(map(ids, value)))
    ):
        return value
    raise ValueError(
        "prompt must be a text, a non-empty list of texts, a non-empty list of token ids (ints) or a non-empty "
        "list of such lists"
    )


class CompletionRequest(SamplingRequest):
    """``POST /v1/completions``: ``prompt`` is a text, a list of texts, a list of token ids or a list of lists
    of token ids (``n`` choices each). ``echo``: the prompt comes first in each choice's text (and, with
    ``logprobs``, its tokens first in the log-probabilities; ``max_tokens`` 0 then scores the prompt alone)."""

    prompt: Any = Field(..., description="a text, a list of texts, a list of token ids or a list of such lists")
    max_tokens: Any = _option("max_tokens", default=16)
    echo: bool = False
    logprobs: Any = Field(
        None,
        description=f"the chosen token's log-probability and that many alternatives' (0..{MAX_COMPLETION_LOGPROBS})",
        json_schema_extra={"type": "integer"},
    )

    @field_validator("prompt", mode="before")
    @classmethod
    def _check_prompt(cls, value: Any) -> Any:
        return _prompt(value)

    def _logprobs(self) -> tuple[str, Any]:
        value = self.logprobs
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COMPLETION_LOGPROBS
        ):
            raise RequestError(
                f"logprobs must be null or an int in [0, {MAX_COMPLETION_LOGPROBS}] (the chosen token's "
                f"log-probability and that many most likely alternatives; OpenAI's range), got {value!r}",
                "logprobs",
            )
        return "logprobs", value

    def _min_tokens(self) -> int:
        return 0 if self.echo else 1

    def token_prompts(self) -> list[list[int]] | None:
        """The prompts as token ids when they were sent as ids, else ``None``."""
        if isinstance(self.prompt, list) and isinstance(self.prompt[0], int):
            return [list(self.prompt)]
        if isinstance(self.prompt, list) and isinstance(self.prompt[0], list):
            return [list(p) for p in self.prompt]
        return None

    def prompts(self) -> list[str]:
        """The prompts as texts (when sent as texts)."""
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class _TextPart(_Lenient):
    type: Literal["text"]
    text: str


class ChatMessage(_Lenient):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[_TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatRequest(SamplingRequest):
    """``POST /v1/chat/completions``: ``messages`` go through the model's chat template; ``max_tokens``
    (or ``max_completion_tokens``) defaults to what fits the context. ``logprobs: true`` gives each new token's
    log-probability, and ``top_logprobs`` (0..20) that many alternatives."""

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: Any = _option("max_tokens")
    max_completion_tokens: Any = _option("max_tokens")
    logprobs: bool | None = Field(None, description="each new token's log-probability (OpenAI's chat format)")
    top_logprobs: Any = Field(
        None, description="the most likely alternatives of each new token (0..20; needs logprobs: true)",
        json_schema_extra={"type": "integer"},
    )  # fmt: skip

    def _max_tokens(self) -> tuple[str, Any]:
        if self.max_completion_tokens is not None:
            return "max_completion_tokens", self.max_completion_tokens
        return "max_tokens", self.max_tokens

    def _logprobs(self) -> tuple[str, Any]:
        if not self.logprobs:
            if self.top_logprobs not in (None, 0):
                raise RequestError("top_logprobs needs logprobs: true", "top_logprobs")
            return "top_logprobs", None
        return "top_logprobs", 0 if self.top_logprobs is None else self.top_logprobs

    def dicts(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text()} for m in self.messages]


def error_body(
    message: str, *, type: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def validation_message(err: ValidationError) -> tuple[str, str | None]:
    """``(message, param)`` of the first problem of a request body: what was wrong and where."""
    first = err.errors()[0]
    loc = [str(x) for x in first.get("loc", ())]
    param = ".".join(loc) or None
    message = first.get("msg", "invalid value")
    if first.get("type") == "missing":
        return f"missing required parameter {param!r}", param
    if first.get("type") == "value_error":  # our own check's message says what was wrong
        return f"invalid {param}: {message.removeprefix('Value error, ')}", param
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    return f"invalid {param}: {message}{shown}", param
