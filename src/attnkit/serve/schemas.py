"""The request bodies of the OpenAI-compatible endpoints, and the OpenAI-style error body.

Requests are pydantic models that *ignore* fields they do not know (``extra="ignore"``), as OpenAI's
clients send fields attnkit does not implement (``logprobs``, ``user``, ``frequency_penalty`` at its
default, ...); the fields below are checked, and a value out of range is a 400 error that names it.
The sampling options (``temperature``, ``top_p``, ``seed``, ``max_tokens``) are checked by
:func:`attnkit.models.generation.check_sampling`'s rules, the ones ``attnkit generate``, ``chat`` and ``explore``
share, on the values as sent (``true`` or ``"0.5"`` is no number); ``temperature`` is at most 2, as OpenAI's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from attnkit.models.generation import (
    SamplingError,
    check_max_tokens,
    check_seed,
    check_temperature,
    check_top_p,
)

__all__ = [
    "ChatMessage",
    "ChatRequest",
    "CompletionRequest",
    "SamplingRequest",
    "StreamOptions",
    "error_body",
    "validation_message",
]

MAX_N = 16
MAX_STOPS = 4
MAX_TEMPERATURE = 2.0  # OpenAI's range is [0, 2]
SAMPLING_ERROR = "sampling_option"  # the pydantic error type of a sampling option out of range


def _shared(check: Any, value: Any, **kwargs: Any) -> Any:
    """``value`` if ``check`` (a shared sampling check) takes it; its message as the field's error if not."""
    try:
        check(value, **kwargs)
    except SamplingError as err:
        raise PydanticCustomError(SAMPLING_ERROR, "{message}", {"message": str(err)}) from None
    return value


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = False


class SamplingRequest(_Lenient):
    """What completions and chat requests share: the model, the sampling parameters and streaming."""

    model: str = Field(..., min_length=1)
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("temperature", mode="before")
    @classmethod
    def _check_temperature(cls, value: Any) -> Any:
        if value is None:  # an explicit null is the default
            return 1.0
        return _shared(check_temperature, value, maximum=MAX_TEMPERATURE)

    @field_validator("top_p", mode="before")
    @classmethod
    def _check_top_p(cls, value: Any) -> Any:
        if value is None:  # an explicit null is the default
            return 1.0
        return _shared(check_top_p, value)

    @field_validator("seed", mode="before")
    @classmethod
    def _check_seed(cls, value: Any) -> Any:
        return _shared(check_seed, value)

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOPS:
            raise ValueError(f"at most {MAX_STOPS} stop sequences, got {len(stops)}")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return value

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(SamplingRequest):
    """``POST /v1/completions``: ``prompt`` is a text or a list of texts (``n`` choices each)."""

    prompt: str | list[str]
    max_tokens: int | None = 16

    @field_validator("max_tokens", mode="before")
    @classmethod
    def _check_max_tokens(cls, value: Any) -> Any:
        return _shared(check_max_tokens, value, minimum=1)

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise ValueError("prompt must be a text or a non-empty list of texts")
        return value

    def prompts(self) -> list[str]:
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
    (or ``max_completion_tokens``) defaults to what fits the context."""

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None

    @field_validator("max_tokens", "max_completion_tokens", mode="before")
    @classmethod
    def _check_max_tokens(cls, value: Any, info: ValidationInfo) -> Any:
        return _shared(check_max_tokens, value, minimum=1, field=str(info.field_name))

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

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
    if first.get("type") == SAMPLING_ERROR:  # the shared check's message names the field and the value
        return message, param
    if first.get("type") == "missing":
        return f"missing required parameter {param!r}", param
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    return f"invalid {param}: {message}{shown}", param
