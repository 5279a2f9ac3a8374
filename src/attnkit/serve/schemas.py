"""The request bodies of the OpenAI-compatible endpoints, and the OpenAI-style error body.

Requests are pydantic models that *ignore* fields they do not know (``extra="ignore"``), as OpenAI's
clients send fields attnkit does not implement (``logprobs``, ``user``, ``frequency_penalty`` at its
default, ...); the fields below are checked, and a value out of range is a 400 error that names it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

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


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class StreamOptions(_Lenient):
    include_usage: bool = False


class SamplingRequest(_Lenient):
    """What completions and chat requests share: the model, the sampling parameters and streaming."""

    model: str = Field(..., min_length=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None

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
    max_tokens: int | None = Field(16, ge=1)

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
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)

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
    if first.get("type") == "missing":
        return f"missing required parameter {param!r}", param
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    return f"invalid {param}: {message}{shown}", param
