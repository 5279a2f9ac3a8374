"""The OpenAI-compatible HTTP API (FastAPI): ``GET /v1/models``, ``POST /v1/completions`` and
``POST /v1/chat/completions`` (each also streamed as server-sent events with ``stream: true``), and
``GET /health`` (the engine's live rows and waiting requests).

In front of the app, :class:`~attnkit.serve.guard.Guard` refuses foreign ``Host`` headers (on loopback),
requests without the API key (every path but ``/health``), bodies that are not ``application/json`` and
bodies over ``--max-body-bytes``; :class:`~attnkit.serve.limits.Admission` refuses too many prompts or
characters before tokenizing (which runs off the event loop) and a full queue (429). A non-streamed request
whose client hangs up is cancelled like a stream.

Every request is decoded by one :class:`~attnkit.serve.engine.Engine` (continuous batching); the
engine thread hands each event to the request's asyncio queue with ``loop.call_soon_threadsafe``.
Errors have OpenAI's body ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from attnkit.interop import Pretrained
from attnkit.models import LanguageModel
from attnkit.serve.engine import Engine, Event, Failed, Finished, Piece, SamplingParams
from attnkit.serve.guard import Guard
from attnkit.serve.limits import Admission, QueueFull, ServeLimits, TooMuchText
from attnkit.serve.schemas import ChatRequest, CompletionRequest, SamplingRequest, error_body, validation_message
from attnkit.text.tokenizers import Tokenizer

__all__ = ["API_KEY_ENV", "create_app"]

API_KEY_ENV = "ATTNKIT_API_KEY"
Body = TypeVar("Body", bound=SamplingRequest)
DISCONNECT_POLL = 0.25  # seconds between checks that a non-streamed request's client is still there
log = logging.getLogger(__name__)


class _Error(Exception):
    def __init__(
        self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
        code: str | None = None, headers: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.body = status, error_body(message, type=type, param=param, code=code)
        self.headers = headers


def create_app(
    pretrained: Pretrained,
    *,
    model_name: str | None = None,
    api_key: str | None = None,
    max_batch: int = 32,
    engine: Engine | None = None,
    limits: ServeLimits | None = None,
    local_only: bool = True,
) -> FastAPI:
    """The FastAPI app serving ``pretrained`` (an :class:`attnkit.interop.Pretrained` decoder).

    ``model_name``: the name clients pass as ``model`` (default: the model folder's name).
    ``api_key``: when set (default: the ``ATTNKIT_API_KEY`` environment variable), every request but
    ``GET /health`` needs ``Authorization: Bearer <api_key>`` (else 401), ``/docs`` and ``/openapi.json``
    included. ``max_batch``: most sequences decoded at once (a request with ``n`` choices counts ``n``).
    ``engine``: an engine to use instead of one built here. ``limits``: :class:`ServeLimits` (default: its
    defaults). ``local_only``: refuse requests whose ``Host`` is not a loopback name (421); leave it True
    when listening on a loopback address (``attnkit serve`` sets it from ``--host``). The engine thread
    starts and stops with the app (its lifespan). Run it with uvicorn, as ``attnkit serve`` does.
    """
    model, tokenizer = pretrained.model, pretrained.tokenizer
    if not isinstance(model, LanguageModel) or not isinstance(tokenizer, Tokenizer):
        raise TypeError(
            f"{pretrained.source} holds a {type(model).__name__} with a {type(tokenizer).__name__} tokenizer; "
            "attnkit serve serves language models (GPT-2, Llama, Mistral, Qwen2, attnkit lm runs) with their tokenizer"
        )
    if engine is None:
        engine = Engine(
            model,
            tokenizer,
            stop_ids=pretrained.eos_ids,  # completions stop at EOS, as Pretrained.generate
            max_batch=max_batch,
            context=pretrained.context,
        )
    name = model_name or pretrained.source.name
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
    created = int(time.time())
    limits = limits or ServeLimits()
    admission = Admission(limits, lambda: engine.stats()["waiting"])
    tokenizing = CapacityLimiter(1)  # one request's text at a time, on a worker thread

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await asyncio.to_thread(engine.shutdown)

    app = FastAPI(title="attnkit serve", lifespan=lifespan)
    app.state.engine = engine
    app.add_middleware(
        Guard, local_only=local_only, max_body_bytes=limits.max_body_bytes, api_key=key,
        error=lambda message, code: error_body(message, code=code), limit_hint=" (attnkit serve --max-body-bytes)",
    )  # fmt: skip

    @app.exception_handler(_Error)
    async def _on_error(request: Request, err: _Error) -> JSONResponse:
        return JSONResponse(err.body, status_code=err.status, headers=err.headers)

    @app.exception_handler(HTTPException)
    async def _on_http(request: Request, err: HTTPException) -> JSONResponse:
        code = "not_found" if err.status_code == 404 else None
        return JSONResponse(error_body(str(err.detail), code=code), status_code=err.status_code)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": name, **engine.stats()}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": name, "object": "model", "created": created, "owned_by": "attnkit"}
        return {"object": "list", "data": [card]}

    async def parse(request: Request, kind: type[Body]) -> Body:
        try:
            data = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise _Error(400, f"the request body is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise _Error(400, "the request body must be a JSON object")
        try:
            body = kind.model_validate(data)
        except ValidationError as err:
            message, param = validation_message(err)
            raise _Error(400, message, param=param) from None
        if body.model != name:
            raise _Error(
                404,
                f"the model {body.model!r} does not exist: this server serves {name!r} (GET /v1/models)",
                param="model",
                code="model_not_found",
            )
        return body

    def encoded(ids: list[int], param: str, params: SamplingParams) -> list[int]:
        try:
            engine.check(ids, params)
        except ValueError as err:
            code = "context_length_exceeded" if len(ids) >= engine.context else None
            raise _Error(400, str(err), param=param if code else None, code=code) from None
        return ids

    async def admitted(
        texts: list[str], param: str, count: int, encode: Callable[[], list[list[int]]]
    ) -> list[list[int]]:
        """The ids of a request's ``count`` prompts: ``encode()`` run on a worker thread (one request at a
        time) once its ``texts`` pass the limits (else 400) and the queue has room (else 429)."""
        try:
            admission.check_texts(texts, param)
            admission.reserve(count)
        except TooMuchText as err:
            raise _Error(400, str(err), param=err.param) from None
        except QueueFull as err:
            raise _Error(429, str(err), type="server_busy", code="queue_full", headers={"Retry-After": "1"}) from None
        try:
            return await to_thread.run_sync(encode, limiter=tokenizing)
        finally:  # _answer submits them before its first await: the count moves to the engine's queue at once
            admission.release(count)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await parse(request, CompletionRequest)
        params = _params(body, limits.cap(body.max_tokens), (), ())
        texts = body.prompts()

        def encode() -> list[list[int]]:
            return [encoded(pretrained.encode_prompt(p), "prompt", params) for p in texts]

        prompts = await admitted(texts, "prompt", len(texts), encode)
        return await _answer(engine, request, body, prompts, params, name, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await parse(request, ChatRequest)
        params = _params(body, limits.cap(body.limit()), tuple(pretrained.stop_strings), tuple(pretrained.stop_ids))
        messages = body.dicts()

        def encode() -> list[list[int]]:
            try:
                ids = pretrained.encode_chat(messages, add_generation_prompt=True)
            except (ValueError, TypeError) as err:  # the template refuses the messages (raise_exception)
                raise _Error(400, f"the chat template refused the messages: {err}", param="messages") from None
            return [encoded(list(ids), "messages", params)]

        prompts = await admitted([m["content"] for m in messages], "messages", 1, encode)
        return await _answer(engine, request, body, prompts, params, name, chat=True)

    return app


def _params(body: Any, max_tokens: int | None, stops: tuple[str, ...], stop_ids: tuple[int, ...]) -> SamplingParams:
    """The engine's parameters of a request (chat adds the template's end-of-turn strings and ids)."""
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=body.stops() + tuple(s for s in stops if s not in body.stops()),
        n=body.n,
        stop_ids=stop_ids,
    )


async def _answer(
    engine: Engine,
    request: Request,
    body: Any,
    prompts: list[list[int]],
    params: SamplingParams,
    name: str,
    *,
    chat: bool,
) -> Response:
    """Submit one engine request per prompt; the JSON answer, or the stream of chunks. A client that
    hangs up cancels its engine requests: a stream's at its next chunk, a JSON answer's within
    ``DISCONNECT_POLL`` seconds."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()
    requests = []
    try:
        for k, ids in enumerate(prompts):

            def sink(event: Event, k: int = k) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, (k, event))

            requests.append(engine.submit(ids, params, sink))
    except BaseException:  # a prompt the engine refuses: the ones already queued leave with it
        for r in requests:
            r.cancel()
        raise
    meta = _Meta(name, chat, params.n, sum(map(len, prompts)))
    if body.stream:
        chunks = _stream(queue, meta, len(prompts) * params.n, body.include_usage(), requests)
        return StreamingResponse(chunks, media_type="text/event-stream")
    texts: dict[int, list[str]] = {}
    reasons: dict[int, str] = {}

    async def collect() -> None:
        async for index, event in _events(queue, len(prompts) * params.n, params.n, meta):
            if isinstance(event, Piece):
                texts.setdefault(index, []).append(event.text)
            else:
                reasons[index] = event.reason

    task = asyncio.ensure_future(collect())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL)
            if not task.done() and await request.is_disconnected():
                log.info("a client hung up: its %d prompt(s) leave the engine", len(prompts))
                return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
        task.result()  # a failure's _Error
    finally:
        task.cancel()
        for r in requests:
            r.cancel()
    choices = [meta.choice(i, "".join(texts.get(i, [])), reasons[i]) for i in sorted(reasons)]
    return JSONResponse({**meta.head(), "choices": choices, "usage": meta.usage()})


class _Meta:
    """What every response and chunk of one request shares, and its token counts."""

    def __init__(self, model: str, chat: bool, n: int, prompt_tokens: int) -> None:
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.model, self.chat, self.n = model, chat, n
        self.created = int(time.time())
        self.prompt_tokens, self.completion_tokens = prompt_tokens, 0

    def head(self, chunk: bool = False) -> dict[str, Any]:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def usage(self) -> dict[str, int]:
        total = self.prompt_tokens + self.completion_tokens
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "total_tokens": total}

    def choice(self, index: int, text: str, reason: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": index, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
        return {"index": index, "text": text, "logprobs": None, "finish_reason": reason}

    def delta(self, index: int, text: str | None, reason: str | None, role: bool = False) -> dict[str, Any]:
        if not self.chat:
            return {"index": index, "text": text or "", "logprobs": None, "finish_reason": reason}
        delta: dict[str, str] = {"role": "assistant"} if role else {}
        if text is not None:
            delta["content"] = text
        return {"index": index, "delta": delta, "finish_reason": reason}


async def _events(
    queue: asyncio.Queue[tuple[int, Event]], choices: int, n: int, meta: _Meta
) -> AsyncIterator[tuple[int, Piece | Finished]]:
    """The events of every choice (index = prompt * n + choice) until all have finished; a failure
    raises a 500 error."""
    finished = 0
    while finished < choices:
        k, event = await queue.get()
        if isinstance(event, Failed):
            raise _Error(500, event.message, type="server_error")
        if isinstance(event, Finished):
            finished += 1
            meta.completion_tokens += event.tokens
        yield k * n + event.index, event


async def _stream(
    queue: asyncio.Queue[tuple[int, Event]], meta: _Meta, choices: int, usage: bool, requests: list[Any]
) -> AsyncIterator[str]:
    def chunk(choice_list: list[dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**meta.head(chunk=True), 'choices': choice_list, **extra})}\n\n"

    try:
        if meta.chat:
            yield chunk([meta.delta(i, "", None, role=True) for i in range(choices)])
        try:
            async for index, event in _events(queue, choices, meta.n, meta):
                if isinstance(event, Piece):
                    yield chunk([meta.delta(index, event.text, None)])
                else:
                    yield chunk([meta.delta(index, None if meta.chat else "", event.reason)])
        except _Error as err:
            yield f"data: {json.dumps(err.body)}\n\n"
            return
        if usage:
            yield chunk([], usage=meta.usage())
        yield "data: [DONE]\n\n"
    finally:  # the client went away (or all is sent): free the rows
        for r in requests:
            r.cancel()
