"""Bad requests sent as raw HTTP get a 4xx with OpenAI's error body, and the server keeps answering."""

from __future__ import annotations

from typing import Any

import pytest
from serve_helpers import Server

OK = {"model": "tiny-chat", "prompt": "The old owl", "max_tokens": 2, "temperature": 0}


def error(
    server: Server, body: bytes | dict[str, object], status: int, path: str = "/v1/completions", **kw: Any
) -> Any:
    got, data = server.request("POST", path, body, **kw)
    assert got == status, data
    assert set(data["error"]) == {"message", "type", "param", "code"}, data
    return data["error"]


def test_invalid_json_is_400(server: Server) -> None:
    err = error(server, b'{"model": "tiny-chat", "prompt": ', 400)
    assert "not valid JSON" in err["message"]
    assert "JSON object" in error(server, b"[1, 2]", 400)["message"]


def test_unknown_model_is_404(server: Server) -> None:
    err = error(server, {**OK, "model": "gpt-4"}, 404)
    assert err["code"] == "model_not_found" and err["param"] == "model" and "tiny-chat" in err["message"]


def test_prompt_longer_than_the_context_is_400(server: Server) -> None:
    err = error(server, {**OK, "prompt": "The old owl sat on the mat. " * 200}, 400)
    assert err["code"] == "context_length_exceeded" and "context is 128" in err["message"]
    long_chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "moon river " * 300}]}
    assert error(server, long_chat, 400, "/v1/chat/completions")["code"] == "context_length_exceeded"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("temperature", -1),
        ("top_p", 0),
        ("top_p", 1.5),
        ("n", 0),
        ("n", 17),
        ("max_tokens", 0),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop", [""]),
        ("prompt", []),
        ("seed", "x"),
    ],
)
def test_out_of_range_parameters_are_400_naming_the_parameter(server: Server, field: str, value: object) -> None:
    err = error(server, {**OK, field: value}, 400)
    assert err["param"] == field and field in err["message"]


def test_missing_fields_and_bad_messages_are_400(server: Server) -> None:
    assert error(server, {"model": "tiny-chat"}, 400)["param"] == "prompt"
    chat = "/v1/chat/completions"
    assert error(server, {"model": "tiny-chat", "messages": []}, 400, chat)["param"] == "messages"
    bad_role = {"model": "tiny-chat", "messages": [{"role": "wizard", "content": "hi"}]}
    assert error(server, bad_role, 400, chat)["param"].startswith("messages")


def test_unknown_openai_fields_are_ignored(server: Server) -> None:
    status, data = server.request("POST", "/v1/completions", {**OK, "user": "me", "logprobs": None})
    assert status == 200 and data["choices"][0]["index"] == 0


def test_missing_or_wrong_api_key_is_401(server: Server) -> None:
    for key in (None, "wrong"):
        err = error(server, OK, 401, key=key)
        assert err["code"] == "invalid_api_key"
        status, data = server.request("GET", "/v1/models", key=key)
        assert status == 401 and data["error"]["code"] == "invalid_api_key"


def test_unknown_path_is_404_and_the_server_still_answers(server: Server) -> None:
    assert error(server, OK, 404, "/v1/nothing")["message"]
    status, data = server.request("POST", "/v1/completions", OK)
    assert status == 200 and data["object"] == "text_completion"
    status, health = server.request("GET", "/health")
    assert status == 200 and health["status"] == "ok"
