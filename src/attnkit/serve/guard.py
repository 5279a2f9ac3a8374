"""The guard in front of attnkit's local web apps (``attnkit serve`` and ``attnkit explore``): an ASGI
middleware that refuses a request before any of it reaches the app.

In order, for every HTTP request:

1. **Host** (when the server listens on a loopback address, ``local_only``): a ``Host`` header that is not
   a loopback name (``localhost``, ``127.x.x.x``, ``[::1]``, any port) is refused with **421**. A web page of
   another site that the user opens can send requests to ``127.0.0.1`` (or, by DNS rebinding, to a name of
   its own that resolves there); its requests carry that site's name as ``Host``.
2. **API key** (when ``api_key`` is set): every path but ``open_paths`` (``/health``) needs
   ``Authorization: Bearer <key>``, else **401** (``/docs`` and ``/openapi.json`` included).
3. **Content type**: a request with a body (``POST``, ``PUT``, ``PATCH``) must send
   ``Content-Type: application/json``, else **415**. A page of another site can send a cross-origin
   ``text/plain`` POST without asking; ``application/json`` needs the browser's CORS preflight, which these
   servers never grant.
4. **Size**: a ``Content-Length`` over ``max_body_bytes`` is refused with **413** before a byte of the body
   is read; a body sent without one (chunked) is counted as it arrives and refused the moment it passes the
   limit. The body within the limit is handed to the app as one message.

Each refusal is a JSON body made by ``error(message, code)`` (OpenAI's error body for ``serve``, ``{"detail":
...}`` for ``explore``).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Collection
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Guard", "detail_body", "host_name", "is_loopback"]

ErrorBody = Callable[[str, str], dict[str, Any]]  # (message, code) -> the JSON body of a refusal
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def detail_body(message: str, code: str) -> dict[str, Any]:
    """FastAPI's error body, ``{"detail": message, "code": code}``."""
    return {"detail": message, "code": code}


def host_name(host: str) -> str:
    """The name of a ``Host`` header (or an address to listen on) without its port: ``localhost:8000`` ->
    ``localhost``, ``[::1]:8000`` -> ``::1``, ``::1`` -> ``::1``."""
    host = host.strip()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else host
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a ``Host`` header or an address to listen on, with or without a port) names this
    machine's loopback: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    name = host_name(host).lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Guard:
    """ASGI middleware refusing what the module docstring lists. ``local_only``: refuse non-loopback
    ``Host`` headers (set it when listening on a loopback address). ``max_body_bytes``: the most bytes of
    a request body (``limit_hint`` names the option that sets it, in the 413's message). ``api_key``:
    required on every path but ``open_paths``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        local_only: bool,
        max_body_bytes: int,
        api_key: str | None = None,
        open_paths: Collection[str] = ("/health",),
        error: ErrorBody = detail_body,
        limit_hint: str = "",
    ) -> None:
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be an int >= 1, got {max_body_bytes!r}")
        self.app, self.local_only, self.max_body_bytes = app, local_only, max_body_bytes
        self.api_key, self.open_paths, self.error, self.limit_hint = api_key, frozenset(open_paths), error, limit_hint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, why, code = refusal
            await self.refuse(scope, receive, send, status, why, code)
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:  # the body, counted as it arrives (chunked requests have no Content-Length)
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away before its body was whole
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self.refuse(scope, receive, send, 413, self.too_large(), "request_too_large")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal body
            if body is not None:
                message, body = body, None
                return message
            return await receive()  # then what follows: the client's disconnect

        await self.app(scope, replay, send)

    def refusal(self, scope: Scope, headers: Headers) -> tuple[int, str, str] | None:
        """``(status, message, code)`` of the refusal of a request by its headers, or None."""
        if self.local_only:
            host = headers.get("host")
            if host is None or not is_loopback(host):
                shown = "no Host header" if host is None else f"the Host header {host!r}"
                return (
                    421,
                    f"{shown} is not a loopback name: this server listens on a loopback address and answers only "
                    "requests addressed to localhost, 127.0.0.1 or [::1] (a web page of another site cannot drive "
                    "it); to serve other machines, listen on their address with --host and set an API key",
                    "host_not_allowed",
                )
        if self.api_key is not None and scope["path"] not in self.open_paths:
            given = headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
                why = "no API key given" if not given else "the API key is wrong"
                fix = "send the header 'Authorization: Bearer <key>' with the server's key"
                fix += " (--api-key or $ATTNKIT_API_KEY)"
                return 401, f"{why}: {fix}", "invalid_api_key"
        if scope["method"] in BODY_METHODS:
            kind = headers.get("content-type")
            if kind is None or kind.partition(";")[0].strip().lower() != "application/json":
                shown = "no Content-Type" if kind is None else f"Content-Type {kind!r}"
                return (
                    415,
                    f"request bodies must be JSON sent with 'Content-Type: application/json', got {shown}",
                    "unsupported_media_type",
                )
        length = headers.get("content-length")
        if length is not None:
            if not length.strip().isdigit():
                return 400, f"the Content-Length header {length!r} is not a number of bytes", "invalid_content_length"
            if int(length) > self.max_body_bytes:
                return 413, self.too_large(), "request_too_large"
        return None

    def too_large(self) -> str:
        return (
            f"the request body is larger than this server's limit of {self.max_body_bytes} bytes{self.limit_hint}: "
            "send less text"
        )

    async def refuse(self, scope: Scope, receive: Receive, send: Send, status: int, message: str, code: str) -> None:
        headers = {"Connection": "close"} if status == 413 else None  # the rest of the body is never read
        await JSONResponse(self.error(message, code), status_code=status, headers=headers)(scope, receive, send)
