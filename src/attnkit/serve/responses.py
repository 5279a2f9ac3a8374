"""The answers of ``/v1/completions`` and ``/v1/chat/completions``: a request's engine events turned into
OpenAI's JSON body, or its stream of server-sent chunks, log-probabilities included.

A request submits one engine request per prompt (its ``n`` choices are that request's rows); the engine thread
hands each :data:`~attnkit.serve.events.Event` to the request's asyncio queue as ``(prompt number, event)``.
Choice ``k * n + i`` is choice ``i`` of prompt ``k``.

Log-probabilities (the engine's :class:`~attnkit.serve.events.TokenLogprob`, the model's own log-softmax) come
in OpenAI's two formats. Chat (``logprobs: true``, ``top_logprobs: k``): ``logprobs.content`` is one
``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}`` per new token. Completions
(``logprobs: k``): ``{tokens, token_logprobs, top_logprobs, text_offset}``, ``top_logprobs`` holding per token a
``{token: logprob}`` of the ``k`` most likely tokens and the chosen one (as OpenAI's: up to ``k + 1``). A
token's text is ``tokenizer.decode([id])``, its ``bytes`` that text's UTF-8. With ``echo`` the prompt's tokens
come first (the first one's log-probability is ``null``: nothing predicts it), from the engine's
:class:`~attnkit.serve.events.Prompt` event. A log-probability that is not finite is sent as -9999.0 (JSON has
no infinity), as OpenAI does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from attnkit.models.generation import SamplingParams
from attnkit.serve.engine import Engine
from attnkit.serve.events import Event, Failed, Finished, Piece, Prompt, TokenLogprob
from attnkit.serve.schemas import error_body

__all__ = ["DISCONNECT_POLL", "HTTPError", "Reply", "answer", "chat_logprobs", "completion_logprobs"]

DISCONNECT_POLL = 0.25  # seconds between checks that a non-streamed request's client is still there
NO_LOGPROB = -9999.0  # what OpenAI sends for a log-probability of -inf
log = logging.getLogger(__name__)


class HTTPError(Exception):
    """An error answer: ``status`` and OpenAI's error body."""

    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
        code: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.body = status, error_body(message, type=type, param=param, code=code)
        self.headers = headers


def _lp(value: float) -> float:
    return value if math.isfinite(value) else NO_LOGPROB


def completion_logprobs(
    entries: Sequence[tuple[int, TokenLogprob | None]], offset: int, text: Callable[[int], str]
) -> dict[str, list[Any]]:
    """OpenAI's legacy ``logprobs`` of ``(token id, entry)`` pairs (an entry ``None``: no log-probability, the
    first prompt token's), the first token at ``offset`` characters of the choice's text."""
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for token, entry in entries:
        s = text(token)
        out["tokens"].append(s)
        out["text_offset"].append(offset)
        offset += len(s)
        if entry is None:
            out["token_logprobs"].append(None)
            out["top_logprobs"].append(None)
            continue
        top: dict[str, float] = {}
        for other, lp in entry.top:
            top.setdefault(text(other), _lp(lp))
        top.setdefault(s, _lp(entry.logprob))
        out["token_logprobs"].append(_lp(entry.logprob))
        out["top_logprobs"].append(top)
    return out


def _merge(first: dict[str, list[Any]], second: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {key: first[key] + second[key] for key in first}


def chat_logprobs(entries: Sequence[TokenLogprob], text: Callable[[int], str]) -> list[dict[str, Any]]:
    """OpenAI's chat ``logprobs.content``: one entry per token."""

    def one(token: int, lp: float) -> dict[str, Any]:
        s = text(token)
        return {"token": s, "logprob": _lp(lp), "bytes": list(s.encode("utf-8"))}

    return [{**one(e.id, e.logprob), "top_logprobs": [one(i, lp) for i, lp in e.top]} for e in entries]


@dataclass
class _Choice:
    prompt: int  # which prompt of the request
    pieces: list[str] = field(default_factory=list)
    entries: list[TokenLogprob] = field(default_factory=list)  # the Pieces' (a stream sends them as they come)
    finished: Finished | None = None
    offset: int = 0  # a stream's text offset of the next token


class Reply:
    """One request's answer as it forms: what every body and chunk shares, each choice's text and
    log-probabilities, and the token counts.

    ``prompts``: the ids of each prompt; ``echoes``: each prompt's text when ``echo`` (else ``None``);
    ``logprobs``: the ``SamplingParams.logprobs`` (``None``: none); ``text``: a token id's text."""

    def __init__(
        self, model: str, *, chat: bool, n: int, prompts: list[list[int]], echoes: list[str] | None,
        logprobs: int | None, text: Callable[[int], str],
    ) -> None:  # fmt: skip
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.model, self.chat, self.n, self.prompts, self.echoes = model, chat, n, prompts, echoes
        self.logprobs, self.text = logprobs, text
        self.created = int(time.time())
        self.prompt_tokens, self.completion_tokens = sum(map(len, prompts)), 0
        self.choices = [_Choice(k) for k in range(len(prompts)) for _ in range(n)]
        self.prompt_entries: dict[int, tuple[TokenLogprob | None, ...]] = {}
        for c in self.choices:
            c.offset = len(self.echo(c.prompt))

    def echo(self, k: int) -> str:
        return "" if self.echoes is None else self.echoes[k]

    def head(self, chunk: bool = False) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "total_tokens": total}

    # ------------------------------------------------------------------ log-probabilities
    def _prompt_part(self, k: int) -> dict[str, list[Any]]:
        """The prompt's tokens of an echoed completion's ``logprobs``."""
        entries = self.prompt_entries.get(k, ())
        ids = self.prompts[k]
        pairs = [(token, entries[j] if j < len(entries) else None) for j, token in enumerate(ids)]
        return completion_logprobs(pairs, 0, self.text)

    def _logprobs(self, c: _Choice, entries: Sequence[TokenLogprob], offset: int) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        if self.chat:
            return {"content": chat_logprobs(entries, self.text), "refusal": None}
        return completion_logprobs([(e.id, e) for e in entries], offset, self.text)

    def body(self) -> dict[str, Any]:
        """The whole answer (every choice finished)."""
        choices = []
        for index, c in enumerate(self.choices):
            assert c.finished is not None
            text = "".join(c.pieces)
            entries = c.finished.logprobs or tuple(c.entries)
            if self.chat:  # a chat reply's log-probabilities are its content's: never a stop id's
                entries = entries[: len(c.finished.ids)]
            lps = self._logprobs(c, entries, len(self.echo(c.prompt)))
            if self.chat:
                message = {"role": "assistant", "content": text}
                choices.append(
                    {"index": index, "message": message, "logprobs": lps, "finish_reason": c.finished.reason}
                )
                continue
            if lps is not None and self.echoes is not None:
                lps = _merge(self._prompt_part(c.prompt), lps)
            text = self.echo(c.prompt) + text
            choices.append({"index": index, "text": text, "logprobs": lps, "finish_reason": c.finished.reason})
        return {**self.head(), "choices": choices, "usage": self.usage()}

    # ------------------------------------------------------------------ streaming
    def _delta(self, index: int, text: str | None, lps: Any, reason: str | None, role: bool = False) -> dict[str, Any]:
        if not self.chat:
            return {"index": index, "text": text or "", "logprobs": lps, "finish_reason": reason}
        delta: dict[str, str] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        return {"index": index, "delta": delta, "logprobs": lps, "finish_reason": reason}

    def first(self) -> list[dict[str, Any]]:
        """A chat stream's first chunk's choices (each choice's role)."""
        return [self._delta(i, "", None, None, role=True) for i in range(len(self.choices))] if self.chat else []

    def on_prompt(self, k: int) -> list[dict[str, Any]]:
        """The chunk choices an echoed prompt gives: its text (and its tokens' log-probabilities) per choice."""
        if self.echoes is None:
            return []
        lps = self._prompt_part(k) if self.logprobs is not None else None
        return [self._delta(i, self.echo(k), lps, None) for i, c in enumerate(self.choices) if c.prompt == k]

    def on_piece(self, index: int, piece: Piece) -> dict[str, Any]:
        c = self.choices[index]
        lps = self._logprobs(c, piece.logprobs, c.offset)
        c.offset += sum(len(self.text(e.id)) for e in piece.logprobs)
        return self._delta(index, piece.text, lps, None)

    def on_finished(self, index: int, event: Finished) -> dict[str, Any]:
        """The last chunk of a choice: the log-probabilities no Piece carried (if any) and the reason."""
        c = self.choices[index]
        rest = event.logprobs[len(c.entries) : len(event.ids) if self.chat else None]
        lps = self._logprobs(c, rest, c.offset) if rest else None
        return self._delta(index, None if self.chat else "", lps, event.reason)


async def _events(queue: asyncio.Queue[tuple[int, Event]], reply: Reply) -> AsyncIterator[tuple[int, Event]]:
    """The events of every choice (index = prompt * n + choice; a Prompt's index is its prompt's) until all
    have finished; they are recorded in ``reply``. A failure raises a 500 error."""
    left = len(reply.choices)
    while left:
        k, event = await queue.get()
        if isinstance(event, Failed):
            raise HTTPError(500, event.message, type="server_error")
        if isinstance(event, Prompt):
            reply.prompt_entries[k] = event.logprobs
            yield k, event
            continue
        assert isinstance(event, Piece | Finished)
        index = k * reply.n + event.index
        if isinstance(event, Finished):
            left -= 1
            reply.completion_tokens += event.tokens
        yield index, event
        if isinstance(event, Finished):  # recorded after the stream's chunk: it reads what came before
            reply.choices[index].finished = event
        else:
            reply.choices[index].pieces.append(event.text)
            reply.choices[index].entries += event.logprobs


async def answer(
    engine: Engine, request: Request, reply: Reply, params: SamplingParams, *, stream: bool, usage: bool
) -> Response:
    """Submit one engine request per prompt of ``reply``; the JSON answer, or the stream of chunks. A client that
    hangs up cancels its engine requests: a stream's at its next chunk, a JSON answer's within
    ``DISCONNECT_POLL`` seconds."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
    requests = []
    echo = reply.echoes is not None  # the prompt's log-probabilities (max_tokens 0: only those)
    try:
        for k, ids in enumerate(reply.prompts):

            def sink(event: Event, k: int = k) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, (k, event))

            if echo:
                requests.append(engine.submit(ids, params, sink, prompt_logprobs=True))
            else:
                requests.append(engine.submit(ids, params, sink))
    except BaseException:  # a prompt the engine refuses: the ones already queued leave with it
        for r in requests:
            r.cancel()
        raise
    if stream:
        return StreamingResponse(_stream(queue, reply, usage, requests), media_type="text/event-stream")

    async def collect() -> None:
        async for _ in _events(queue, reply):
            pass

    task = asyncio.ensure_future(collect())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL)
            if not task.done() and await request.is_disconnected():
                log.info("a client hung up: its %d prompt(s) leave the engine", len(reply.prompts))
                return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
        task.result()  # a failure's HTTPError
    finally:
        task.cancel()
        for r in requests:
            r.cancel()
    return JSONResponse(reply.body())


async def _stream(
    queue: asyncio.Queue[tuple[int, Event]], reply: Reply, usage: bool, requests: list[Any]
) -> AsyncIterator[str]:
    def chunk(choice_list: list[dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**reply.head(chunk=True), 'choices': choice_list, **extra})}\n\n"

    try:
        if reply.chat:
            yield chunk(reply.first())
        try:
            async for index, event in _events(queue, reply):
                if isinstance(event, Prompt):
                    if choices := reply.on_prompt(index):
                        yield chunk(choices)
                elif isinstance(event, Piece):
                    yield chunk([reply.on_piece(index, event)])
                elif isinstance(event, Finished):
                    yield chunk([reply.on_finished(index, event)])
        except HTTPError as err:
            yield f"data: {json.dumps(err.body)}\n\n"
            return
        if usage:
            yield chunk([], usage=reply.usage())
        yield "data: [DONE]\n\n"
    finally:  # the client went away (or all is sent): free the rows
        for r in requests:
            r.cancel()
