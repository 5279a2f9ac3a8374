"""A tiny random Llama chat model (a locally trained byte-level BPE ``tokenizer.json`` and a ChatML
template, saved by ``save_pretrained``; nothing is downloaded) and a real ``attnkit serve`` process on
127.0.0.1 serving it, started with ``--port 0`` (the port is read from its first line of output) and
stopped when the tests are done."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_helpers import API_KEY, Server, start_server, stop_server

from chat_models import build_chat_model


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("serve") / "tiny-chat")


@pytest.fixture(scope="session")
def pretrained(model_dir: Path) -> Any:
    from attnkit.interop import load_pretrained

    return load_pretrained(model_dir)


@pytest.fixture(scope="session")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The model served with an API key and ``--max-batch 32``."""
    log = tmp_path_factory.mktemp("serve-log") / "stderr.txt"
    srv = start_server(model_dir, "--api-key", API_KEY, "--max-batch", "32", "--model-name", "tiny-chat", log=log)
    try:
        yield srv
    finally:
        stop_server(srv.process)
