"""The local web app of ``attnkit explore`` (FastAPI): the page, its files, and the view of an input.

- ``GET /``: the page; ``GET /static/{index.html,explore.js,explore.css}``: its files (from the package).
- ``GET /api/info``: what the model is and what to type.
- ``POST /api/view`` ``{"text", "steps", "temperature", "seed", "layer", "position"}``: :meth:`Explorer.view`'s
  payload (``"layer"``: a layer, or ``"all"``, the default; ``"position"``: a position of the next-token table,
  or null for all, the default); a bad input is a 400 whose ``detail`` says what was wrong (the server keeps
  serving). Its ``Server-Timing`` header says how long the view took here (``view;dur=`` milliseconds).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, Response

from attnkit.viz.explorer.page import ASSETS, asset
from attnkit.viz.explorer.views import Explorer

__all__ = ["create_explore_app"]

log = logging.getLogger(__name__)
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
FIELDS = {"text", "steps", "temperature", "seed", "layer", "position"}


def create_explore_app(explorer: Explorer) -> FastAPI:
    """The app serving ``explorer``'s page and views (one request at a time: the model is shared)."""
    app = FastAPI(title="attnkit explore", docs_url=None, redoc_url=None, openapi_url=None)
    files = {name: asset(name) for name in ASSETS}

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

    @app.post("/api/view")
    async def view(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise HTTPException(400, f"the request body must be JSON ({err})") from None
        if not isinstance(body, dict):
            raise HTTPException(400, 'the request body must be a JSON object: {"text": "...", "steps": 0}')
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            raise HTTPException(400, f"unknown field(s) {unknown}; a view takes {sorted(FIELDS)}")
        if "text" not in body:
            raise HTTPException(400, 'no "text": the input to look at')
        layer = body.get("layer", "all")
        start = time.perf_counter()
        try:
            payload = explorer.view(
                body["text"],
                steps=body.get("steps", 0),
                temperature=body.get("temperature", 0.0),
                seed=body.get("seed", 0),
                layer=None if layer == "all" else layer,
                position=body.get("position"),
            )
        except (ValueError, TypeError) as err:
            raise HTTPException(400, str(err)) from None
        text = json.dumps(payload, separators=(",", ":"))
        took = f"view;dur={(time.perf_counter() - start) * 1000:.1f}"
        return Response(text, media_type="application/json", headers={"Server-Timing": took})

    return app
