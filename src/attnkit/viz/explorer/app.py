"""The local web app of ``attnkit explore`` (FastAPI): the page, its files, and the view of an input.

- ``GET /``: the page; ``GET /static/{index.html,explore.js,interpret.js,explore.css}``: its files (from the package).
- ``GET /api/info``: what the model is and what to type.
- ``POST /api/view`` ``{"text", "steps", "temperature", "seed", "layer", "position", "snapshot"}``:
  :meth:`Explorer.view`'s payload (``"layer"``: a layer, or ``"all"``, the default; ``"position"``: a position of
  the next-token table, or null for all, the default; ``"snapshot"``: a training step of a run's weight snapshots,
  listed by ``/api/info``, or null for the trained weights, the default); a bad input is a 400 whose ``detail``
  says what was wrong (the server keeps serving). Its ``Server-Timing`` header says how long the view took here
  (``view;dur=`` milliseconds).
- A decoder's interpretability views (:mod:`attnkit.viz.explorer.interpret`), with the same rules and header:
  ``POST /api/lens`` ``{"text"}`` (the logit lens), ``POST /api/attribution`` ``{"text", "target", "position"}``
  (direct logit attribution per head and MLP; ``target`` null: the top next token), ``POST /api/patching``
  ``{"clean", "corrupted"}`` (residual patching by layer x position; texts of one token length) and ``POST
  /api/ablation`` ``{"text", "heads", "position"}`` (the next-token distribution with ``heads``, ``[[layer,
  head], ...]``, switched off); each takes ``"snapshot"`` too. Of any other model they are a 400 saying so.

The rules of :class:`attnkit.serve.guard.Guard` hold in front of it (a refusal's body is ``{"detail", "code"}``):
a ``Host`` that is not a loopback name is refused (421) while the server listens on loopback, a request body
must be ``application/json`` (415) and at most ``max_body_bytes`` (413, before it is read whole). A view's
``text`` of more than ``max_chars`` characters is a 400 before it is tokenized; views are computed one at a
time on a worker thread (the page, its files and ``/api/info`` keep answering meanwhile), and a view that
finds ``max_waiting`` others waiting is a 429 with ``Retry-After``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from attnkit.io import json_body
from attnkit.serve.guard import Guard
from attnkit.viz.explorer.interpret import ablation_view, attribution_view, lens_view, patching_view
from attnkit.viz.explorer.page import ASSETS, asset
from attnkit.viz.explorer.views import Explorer

__all__ = ["create_explore_app"]

log = logging.getLogger(__name__)
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
FIELDS = {"text", "steps", "temperature", "seed", "layer", "position", "snapshot"}
MAX_BODY_BYTES = 1024 * 1024
MAX_CHARS = 100_000
MAX_WAITING = 8


def create_explore_app(
    explorer: Explorer,
    *,
    local_only: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_chars: int = MAX_CHARS,
    max_waiting: int = MAX_WAITING,
) -> FastAPI:
    """The app serving ``explorer``'s page and views (one view at a time: the model is shared).

    ``local_only``: refuse requests whose ``Host`` is not a loopback name (leave it True when listening on a
    loopback address). ``max_body_bytes``: the most bytes of a request body; ``max_chars``: the most
    characters of a view's text; ``max_waiting``: the most views waiting for the one being computed."""
    for label, value in (("max_chars", max_chars), ("max_waiting", max_waiting)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {value!r}")
    app = FastAPI(title="attnkit explore", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(Guard, local_only=local_only, max_body_bytes=max_body_bytes)
    files = {name: asset(name) for name in ASSETS}
    viewing = CapacityLimiter(1)
    in_flight = 0  # views being computed or waiting for it

    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(files["index.html"])

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in files:
            raise HTTPException(404, f"no file {name!r}: the page's files are {', '.join(ASSETS)}")
        return Response(files[name], media_type=TYPES["." + name.rsplit(".", 1)[-1]])

    @app.get("/api/info")
    def info() -> dict[str, Any]:
        return explorer.info()

    def check_body(body: Any, fields: set[str], texts: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise HTTPException(400, f'the request body must be a JSON object: {{"{texts[0]}": "...", ...}}')
        unknown = sorted(set(body) - fields)
        if unknown:
            raise HTTPException(400, f"unknown field(s) {unknown}; this request takes {sorted(fields)}")
        for field in texts:
            if field not in body:
                raise HTTPException(
                    400, f'no "{field}": the {"input to look at" if field == "text" else field + " text"}'
                )
            value = body[field]
            try:  # a lone surrogate ("\ud800" in the JSON) is no text a tokenizer can read
                if isinstance(value, str):
                    value.encode("utf-8")
            except UnicodeEncodeError as err:
                raise HTTPException(
                    400,
                    f"the {field}: a lone surrogate ({err.object[err.start]!r}) is not a character; send valid Unicode",
                ) from None
            if isinstance(value, str) and len(value) > max_chars:
                raise HTTPException(
                    400,
                    f"the {field} has {len(value)} characters, more than the explorer's limit of {max_chars}: "
                    "shorten it",
                )
        return body

    async def answer(
        request: Request, fields: set[str], texts: tuple[str, ...], work: Callable[[dict[str, Any]], Any]
    ) -> Response:
        """The request's JSON body checked, then ``work(body)`` on the worker (one at a time), as JSON."""
        try:
            raw = json_body(await request.body())
        except ValueError as err:
            raise HTTPException(400, str(err)) from None
        body = check_body(raw, fields, texts)
        nonlocal in_flight
        if in_flight > max_waiting:
            raise HTTPException(
                429, f"{in_flight - 1} views are waiting for the one being computed: retry in a moment",
                {"Retry-After": "1"},
            )  # fmt: skip

        def compute() -> tuple[str, str]:
            start = time.perf_counter()
            try:
                payload = work(body)
            except (ValueError, TypeError) as err:
                raise HTTPException(400, str(err)) from None
            text = json.dumps(payload, separators=(",", ":"))
            return text, f"view;dur={(time.perf_counter() - start) * 1000:.1f}"

        in_flight += 1
        try:
            text, took = await to_thread.run_sync(compute, limiter=viewing)
        finally:
            in_flight -= 1
        return Response(text, media_type="application/json", headers={"Server-Timing": took})

    @app.post("/api/view")
    async def view(request: Request) -> Response:
        def work(body: dict[str, Any]) -> Any:
            layer = body.get("layer", "all")
            return explorer.view(
                body["text"],
                steps=body.get("steps", 0),
                temperature=body.get("temperature", 0.0),
                seed=body.get("seed", 0),
                layer=None if layer == "all" else layer,
                position=body.get("position"),
                snapshot=body.get("snapshot"),
            )

        return await answer(request, FIELDS, ("text",), work)

    @app.post("/api/lens")
    async def lens(request: Request) -> Response:
        def work(body: dict[str, Any]) -> Any:
            explorer.use_snapshot(body.get("snapshot"))
            return lens_view(explorer, body["text"])

        return await answer(request, {"text", "snapshot"}, ("text",), work)

    @app.post("/api/attribution")
    async def attribution(request: Request) -> Response:
        def work(body: dict[str, Any]) -> Any:
            explorer.use_snapshot(body.get("snapshot"))
            return attribution_view(explorer, body["text"], body.get("target"), body.get("position", -1))

        return await answer(request, {"text", "target", "position", "snapshot"}, ("text",), work)

    @app.post("/api/patching")
    async def patching(request: Request) -> Response:
        def work(body: dict[str, Any]) -> Any:
            explorer.use_snapshot(body.get("snapshot"))
            return patching_view(explorer, body["clean"], body["corrupted"])

        return await answer(request, {"clean", "corrupted", "snapshot"}, ("clean", "corrupted"), work)

    @app.post("/api/ablation")
    async def ablation(request: Request) -> Response:
        def work(body: dict[str, Any]) -> Any:
            explorer.use_snapshot(body.get("snapshot"))
            return ablation_view(explorer, body["text"], body.get("heads", []), body.get("position", -1))

        return await answer(request, {"text", "heads", "position", "snapshot"}, ("text",), work)

    return app
