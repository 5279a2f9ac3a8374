"""Look inside, live: ``attnkit explore`` serves the attention explorer of a model on 127.0.0.1."""

from __future__ import annotations

import webbrowser
from collections.abc import Callable
from pathlib import Path

from attnkit.api.listening import listen_and_run

__all__ = ["explore"]


def explore(
    run: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the attention explorer of ``run`` (any run folder or checkpoint, attnkit model folder or Hugging Face
    folder that attnkit loads) until interrupted: a page where you type an input and see every layer's
    and head's attention (head view, matrix, model view), a decoder's next-token distribution with a
    temperature slider, and its generation step by step; for decoders the logit lens, attribution per head with
    heads switched off by a click, activation patching, and a slider over a run's weight snapshots
    (:mod:`attnkit.viz.explorer`). Everything the page uses is served from the package: it works offline.

    ``host`` / ``port``: where to listen (127.0.0.1; port 0 picks a free one); on a loopback address, requests
    whose ``Host`` header is not a loopback name are refused (421), so that web pages of other sites cannot
    drive it. ``on_ready`` receives the page's URL once the socket listens; ``open_browser`` opens it in the
    default browser, where one exists."""
    try:
        import uvicorn  # noqa: F401 -- needed by listen_and_run; checked before the model loads

        from attnkit.serve.guard import is_loopback
        from attnkit.viz.explorer.app import create_explore_app
    except ImportError as err:
        raise ImportError(f"{err}: attnkit explore needs FastAPI and uvicorn: pip install 'attnkit[serve]'") from None
    from attnkit.viz.explorer import load_explorer

    app = create_explore_app(load_explorer(run), local_only=is_loopback(host))

    def ready(url: str) -> None:
        if on_ready is not None:
            on_ready(url)
        if open_browser:
            webbrowser.open(url)

    listen_and_run(app, host, port, on_ready=ready)
