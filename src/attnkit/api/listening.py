"""One way to run a local web app (FastAPI on uvicorn): ``attnkit serve`` and ``attnkit explore`` use it."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

__all__ = ["listen_and_run"]


def listen_and_run(
    app: Any, host: str, port: int, *, path: str = "/", on_ready: Callable[[str], None] | None = None
) -> None:
    """Bind ``host:port`` (port 0 picks a free one), tell ``on_ready`` the URL of ``path`` with the real
    port, then run ``app`` on uvicorn until interrupted. A port that cannot be bound is a ``ValueError``
    saying so (choose another, or 0)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {err.strerror} (choose another --port, or 0)") from None
    sock.listen(128)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    if on_ready is not None:
        on_ready(f"http://{shown}:{sock.getsockname()[1]}{path}")
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
