"""Bad requests sent as raw HTTP get a 4xx with OpenAI's error body, and the server keeps answering."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from serve_helpers import Server

OK = {"model": "tiny-chat", "prompt": "The old owl", "max_tokens": 2, "temperature": 0}
TEXTS = ["The old owl", "It was late.", "The big dog sat", "A"]


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
        ("n", 33),  # past the server's --max-batch 32
        ("n", 1.5),
        ("max_tokens", 0),
        ("stop", ["a", "b", "c", "d", "e"]),
        ("stop", [""]),
        ("prompt", []),
        ("seed", "x"),
        ("seed", 2**64),  # past a torch.Generator's seeds: it used to raise in the shared prefill
        ("seed", -1),
        ("seed", True),
        ("seed", 1.5),
        ("temperature", 1.7e-39),  # logits / temperature would overflow float32
        ("temperature", 1e-300),
        ("temperature", float("nan")),  # json.dumps writes NaN, which the server's JSON parser reads
        ("temperature", float("inf")),
        ("temperature", "0.5"),
        ("top_p", float("nan")),
        ("max_tokens", 2**64),
    ],
)
def test_out_of_range_parameters_are_400_naming_the_parameter(server: Server, field: str, value: object) -> None:
    err = error(server, {**OK, field: value}, 400)
    assert err["param"] == field and field in err["message"]


def test_sampling_errors_say_what_was_wrong_in_the_shared_words(server: Server) -> None:
    """The server's message is the check every entry point shares (attnkit generate, chat, explore)."""
    err = error(server, {**OK, "seed": 2**64}, 400)
    assert err == {
        "message": "seed must be an integer in [0, 2**64) (or None: unseeded), got 18446744073709551616",
        "type": "invalid_request_error",
        "param": "seed",
        "code": None,
    }
    chat = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}
    err = error(server, {**chat, "max_completion_tokens": 0}, 400, "/v1/chat/completions")
    assert err["param"] == "max_completion_tokens" and err["message"].startswith("max_completion_tokens must be")
    err = error(server, {**chat, "temperature": 1e-300}, 400, "/v1/chat/completions")
    assert err["param"] == "temperature" and ">= 0.01" in err["message"]


def test_a_bad_request_among_good_ones_fails_alone(server: Server) -> None:
    """Requests sent together with one whose seed is out of range: the bad one is a 400, every other gets
    the answer it gets alone (the bad seed used to fail the shared prefill, and with it the others)."""
    bodies = [{**OK, "prompt": text, "max_tokens": 12, "temperature": 0.9, "seed": k} for k, text in enumerate(TEXTS)]
    alone = [server.request("POST", "/v1/completions", body) for body in bodies]
    assert all(status == 200 for status, _ in alone), alone
    bad = {**OK, "max_tokens": 12, "temperature": 0.9, "seed": 2**64}
    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        futures = [pool.submit(server.request, "POST", "/v1/completions", body) for body in [*bodies, bad]]
        got = [f.result() for f in futures]
    assert got[-1][0] == 400 and got[-1][1]["error"]["param"] == "seed"
    assert [(status, data["choices"][0]["text"]) for status, data in got[:-1]] == [
        (200, data["choices"][0]["text"]) for _, data in alone
    ]


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
