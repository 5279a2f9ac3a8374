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
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from attnkit.interop import Pretrained
from attnkit.io import json_body
from attnkit.models import LanguageModel
from attnkit.models.generation import SamplingError, SamplingParams
from attnkit.models.generation.prefix_cache import PrefixCache
from attnkit.serve.engine import Engine
from attnkit.serve.guard import Guard
from attnkit.serve.limits import Admission, QueueFull, ServeLimits, TooMuchText
from attnkit.serve.responses import HTTPError as _Error
from attnkit.serve.responses import Reply, answer
from attnkit.serve.schemas import (
    ChatRequest,
    CompletionRequest,
    RequestError,
    SamplingRequest,
    error_body,
    validation_message,
)
from attnkit.text.tokenizers import Tokenizer

__all__ = ["API_KEY_ENV", "create_app"]

API_KEY_ENV = "ATTNKIT_API_KEY"
Body = TypeVar("Body", bound=SamplingRequest)
log = logging.getLogger(__name__)


def create_app(
    pretrained: Pretrained,
    *,
    model_name: str | None = None,
    api_key: str | None = None,
    max_batch: int = 32,
    prefix_cache_mb: int = 256,
    engine: Engine | None = None,
    limits: ServeLimits | None = None,
    local_only: bool = True,
) -> FastAPI:
    """The FastAPI app serving ``pretrained`` (an :class:`attnkit.interop.Pretrained` decoder).

    ``model_name``: the name clients pass as ``model`` (default: the model folder's name).
    ``api_key``: when set (default: the ``ATTNKIT_API_KEY`` environment variable), every request but
    ``GET /health`` needs ``Authorization: Bearer <api_key>`` (else 401), ``/docs`` and ``/openapi.json``
    included. ``max_batch``: most sequences decoded at once (a request with ``n`` choices counts ``n``).
    ``prefix_cache_mb``: MiB of keys and values of prompt prefixes that later requests reuse (a
    :class:`~attnkit.models.generation.prefix_cache.PrefixCache`; 0: off). ``engine``: an engine to use instead of
    one built here. ``limits``: :class:`ServeLimits` (default: its
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
    if isinstance(prefix_cache_mb, bool) or not isinstance(prefix_cache_mb, int) or prefix_cache_mb < 0:
        raise ValueError(f"prefix_cache_mb must be an int >= 0 (0: no prefix cache), got {prefix_cache_mb!r}")
    if engine is None:
        engine = Engine(
            model,
            tokenizer,
            stop_ids=pretrained.eos_ids,  # completions stop at EOS, as Pretrained.generate
            max_batch=max_batch,
            context=pretrained.context,
            prefix_cache=PrefixCache(prefix_cache_mb * 2**20) if prefix_cache_mb else None,
        )
    name = model_name or pretrained.source.name
    vocab = model.config.vocab_size
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
            data = json_body(await request.body())
        except ValueError as err:
            raise _Error(400, str(err)) from None
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

    def encoded(ids: list[int], param: str, params: SamplingParams, echo: bool = False) -> list[int]:
        try:
            engine.check(ids, params, prompt_logprobs=echo)
        except SamplingError as err:  # e.g. n over --max-batch
            raise _Error(400, str(err), param=err.field) from None
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
            for text in texts:  # a lone surrogate ("\ud800" in the JSON) is no text a tokenizer can read
                text.encode("utf-8")
            admission.reserve(count)
        except TooMuchText as err:
            raise _Error(400, str(err), param=err.param) from None
        except UnicodeEncodeError as err:
            raise _Error(
                400,
                f"the request's {param}: a lone surrogate ({err.object[err.start]!r}) is not a character; "
                "send text that is valid Unicode",
                param=param,
            ) from None
        except QueueFull as err:
            raise _Error(429, str(err), type="server_busy", code="queue_full", headers={"Retry-After": "1"}) from None
        try:
            return await to_thread.run_sync(encode, limiter=tokenizing)
        finally:  # _answer submits them before its first await: the count moves to the engine's queue at once
            admission.release(count)

    def sampling(
        body: SamplingRequest, cap: Any, stops: tuple[str, ...] = (), ids: tuple[int, ...] = ()
    ) -> SamplingParams:
        try:
            return body.sampling_params(
                cap=cap, max_batch=engine.max_batch, vocab_size=vocab, stops=stops, stop_ids=ids
            )
        except RequestError as err:
            raise _Error(400, str(err), param=err.param) from None

    def token_text(token: int) -> str:  # a log-probability's token: special tokens shown, as vLLM's
        return tokenizer.decode([token], skip_special=False)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await parse(request, CompletionRequest)
        params = sampling(body, limits.cap)
        given = body.token_prompts()
        if given is not None:  # token ids: checked against the vocabulary, counted as prompts (no text)
            for ids in given:
                bad = next((i for i in ids if not 0 <= i < vocab), None)
                if bad is not None:
                    raise _Error(
                        400,
                        f"prompt token ids must be in [0, {vocab}) (the model's vocabulary), got {bad}",
                        param="prompt",
                    )
        texts = body.prompts() if given is None else [""] * len(given)

        def encode() -> list[list[int]]:
            ids = given if given is not None else [pretrained.encode_prompt(p) for p in texts]
            return [encoded(p, "prompt", params, body.echo) for p in ids]

        prompts = await admitted(texts, "prompt", len(texts), encode)
        echoes = None
        if body.echo:
            echoes = texts if given is None else [pretrained.decode(p) for p in prompts]
        reply = Reply(
            name, chat=False, n=params.n, prompts=prompts, echoes=echoes, logprobs=params.logprobs, text=token_text
        )
        return await answer(engine, request, reply, params, stream=body.stream, usage=body.include_usage())

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await parse(request, ChatRequest)
        params = sampling(body, limits.cap, tuple(pretrained.stop_strings), tuple(pretrained.stop_ids))
        messages = body.dicts()

        def encode() -> list[list[int]]:
            try:
                ids = pretrained.encode_chat(messages, add_generation_prompt=True)
            except (ValueError, TypeError) as err:  # the template refuses the messages (raise_exception)
                raise _Error(400, f"the chat template refused the messages: {err}", param="messages") from None
            return [encoded(list(ids), "messages", params)]

        prompts = await admitted([m["content"] for m in messages], "messages", 1, encode)
        reply = Reply(
            name, chat=True, n=params.n, prompts=prompts, echoes=None, logprobs=params.logprobs, text=token_text
        )
        return await answer(engine, request, reply, params, stream=body.stream, usage=body.include_usage())

    return app
