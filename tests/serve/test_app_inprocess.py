"""The OpenAI-compatible app (``serve/app.py``) in the test process: ``create_app`` over the tiny chat model,
driven by FastAPI's ``TestClient`` (the app's lifespan runs: the engine thread starts and stops with it).

Each test builds its own app: mutmut (``tools/mutation.py --module app``) gives a mutant of ``create_app`` to the
tests that called it, so an app shared between tests would hide the later ones. A token forced with
``logit_bias`` (+100 on one id, temperature 0) makes every answer known in advance.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

# Imported here, not when the first model is built: mutmut's fork server imports this module once (collection),
# then every mutant's run starts with them loaded (transformers' Llama classes alone take seconds).
import transformers.models.llama.modeling_llama  # noqa: F401
from fastapi.testclient import TestClient

from attnkit.models.generation import SamplingParams
from attnkit.serve import create_app
from attnkit.serve.engine import Engine
from attnkit.serve.limits import ServeLimits
from attnkit.text.chat import ChatTemplate
from chat_models import CHATML

NAME = "tiny"
LOCAL = "http://127.0.0.1"  # the Guard refuses TestClient's default Host ("testserver") on loopback
T = 268  # "The": the token a +100 logit bias forces
FORCE = {"temperature": 0, "logit_bias": {str(T): 100}}
ENDOFTEXT, IM_END = 0, 2  # the pad token, and the EOS (the ChatML end of turn)
OK = {"model": NAME, "prompt": "The old owl", "max_tokens": 3, **FORCE}
USER = [{"role": "user", "content": "hi"}]
CHAT = {"model": NAME, "messages": USER, "max_tokens": 3, **FORCE}
pytestmark = pytest.mark.timeout(60)  # a test takes about a second: a mutant that leaves a request unanswered


@contextmanager
def serving(pretrained: Any, **options: Any) -> Iterator[TestClient]:
    options.setdefault("model_name", NAME)
    app = create_app(pretrained, **options)
    with TestClient(app, base_url=LOCAL) as client:
        yield client


def post(client: TestClient, body: Any, path: str = "/v1/completions", **headers: str) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post(path, content=data, headers={"Content-Type": "application/json", **headers})
    return response.status_code, response.json()


def error(client: TestClient, body: Any, status: int, path: str = "/v1/completions", **headers: str) -> Any:
    got, data = post(client, body, path, **headers)
    assert got == status, data
    assert set(data) == {"error"} and set(data["error"]) == {"message", "type", "param", "code"}, data
    return data["error"]


def events(client: TestClient, body: dict[str, Any], path: str = "/v1/completions") -> list[Any]:
    """A stream's ``data:`` payloads, parsed (``"[DONE]"`` kept as is)."""
    response = client.post(path, json={**body, "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    lines = [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def test_models_health_and_the_default_name(pretrained: Any) -> None:
    before = int(time.time())
    with serving(pretrained, model_name=None) as client:
        cards = client.get("/v1/models").json()
        health = client.get("/health").json()
        assert post(client, {**OK, "model": "tiny-chat"})[0] == 200
    name = pretrained.source.name  # the model folder's: tiny-chat
    assert name == "tiny-chat"
    (card,) = cards["data"]
    assert cards["object"] == "list" and before <= card["created"] <= time.time()
    assert card == {"id": name, "object": "model", "created": card["created"], "owned_by": "attnkit"}
    assert health["status"] == "ok" and health["model"] == name
    assert health["live_rows"] == 0 and health["waiting"] == 0 and health["steps"] == 0
    assert health["prefix_entries"] == 0  # the default prefix cache's counters


def test_what_create_app_refuses(pretrained: Any) -> None:
    tokenizer = type(pretrained.tokenizer).__name__
    for what, wrong in (
        (f"object with a {tokenizer}", dataclasses.replace(pretrained, model=object())),
        ("LanguageModel with a NoneType", dataclasses.replace(pretrained, tokenizer=None)),
    ):
        message = (
            f"{pretrained.source} holds a {what} tokenizer; attnkit serve serves language models (GPT-2, Llama, "
            "Mistral, Qwen2, attnkit lm runs) with their tokenizer"
        )
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            create_app(wrong)
    for mb in (True, 1.5, -1, "1", None):
        with pytest.raises(
            ValueError, match=rf"prefix_cache_mb must be an int >= 0 \(0: no prefix cache\), got {mb!r}"
        ):
            create_app(pretrained, prefix_cache_mb=mb)


def test_the_engine_built_from_the_options(pretrained: Any) -> None:
    with serving(pretrained, max_batch=3, prefix_cache_mb=0) as client:
        engine = client.app.state.engine  # type: ignore[attr-defined]
        assert engine.max_batch == 3 and engine.context == pretrained.context and engine.prefix_cache is None
        assert not any(k.startswith("prefix_") for k in client.get("/health").json())
        assert post(client, {**OK, "n": 3})[0] == 200
        assert error(client, {**OK, "n": 4}, 400)["param"] == "n"
    with serving(pretrained, prefix_cache_mb=1) as client:
        assert client.app.state.engine.prefix_cache.max_bytes == 2**20  # type: ignore[attr-defined]
    with serving(pretrained) as client:
        assert client.app.state.engine.prefix_cache.max_bytes == 256 * 2**20  # type: ignore[attr-defined]
        assert client.app.state.engine.max_batch == 32  # type: ignore[attr-defined]


def test_completions_stop_at_every_eos_of_the_folder(pretrained: Any) -> None:
    """The engine's stop ids are ``Pretrained.eos_ids`` (generation_config's EOS too), not only the config's."""
    extra = dataclasses.replace(pretrained, generation_config={"eos_token_id": [ENDOFTEXT, IM_END]})
    with serving(extra) as client:
        _, data = post(client, {**OK, "logit_bias": {str(ENDOFTEXT): 100}})
    assert data["choices"][0]["finish_reason"] == "stop" and data["choices"][0]["text"] == ""
    assert data["usage"]["completion_tokens"] == 1


def test_a_given_engine_is_the_one_used(pretrained: Any) -> None:
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=2, context=64, stop_ids=pretrained.eos_ids)
    app = create_app(pretrained, model_name=NAME, engine=engine, max_batch=9)
    assert app.state.engine is engine
    with TestClient(app, base_url=LOCAL) as client:
        assert client.get("/health").json() == {"status": "ok", "model": NAME, **engine.stats()}
        assert error(client, {**OK, "n": 3}, 400)["param"] == "n"  # the given engine's max_batch, not 9
        err = error(client, {**OK, "prompt": [T] * 64}, 400)  # its context, 64
        assert err["code"] == "context_length_exceeded" and "context is 64" in err["message"]
        assert post(client, {**OK, "prompt": [T] * 63, "max_tokens": 1})[0] == 200


class Refusing(Engine):
    """An engine whose check raises ``error`` (what the app makes of each kind of refusal)."""

    error: Exception
    asked: list[bool]  # each check's prompt_logprobs

    def check(self, prompt: Any, params: SamplingParams, *, prompt_logprobs: bool = False) -> None:
        self.asked.append(prompt_logprobs)
        raise self.error


def test_the_engines_refusals_are_400s(pretrained: Any) -> None:
    from attnkit.models.generation import SamplingError

    engine = Refusing(pretrained.model, pretrained.tokenizer)
    engine.asked = []
    with serving(pretrained, engine=engine) as client:
        engine.error = SamplingError("top_k", "top_k is wrong here")
        assert error(client, OK, 400) == {
            "message": "top_k is wrong here", "type": "invalid_request_error", "param": "top_k", "code": None,
        }  # fmt: skip
        engine.error = ValueError("no such thing")  # a short prompt: not the context's fault
        assert error(client, CHAT, 400, "/v1/chat/completions") == {
            "message": "no such thing", "type": "invalid_request_error", "param": None, "code": None,
        }  # fmt: skip
        assert post(client, OK)[0] == 400  # the queue's reservation was given back after each refusal
        assert post(client, {**OK, "echo": True})[0] == 400
    assert engine.asked == [False, False, False, True]  # the prompt's log-probabilities with echo only


def test_the_api_key_explicit_or_from_the_environment(pretrained: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNKIT_API_KEY", "from-env")
    with serving(pretrained) as client:
        err = error(client, OK, 401)
        assert err["code"] == "invalid_api_key" and "no API key given" in err["message"]
        assert error(client, OK, 401, authorization="Bearer nope")["message"].startswith("the API key is wrong")
        assert post(client, OK, authorization="Bearer from-env")[0] == 200
        assert client.get("/v1/models").status_code == 401 and client.get("/health").status_code == 200
        assert client.get("/openapi.json").status_code == 401
        schema = client.get("/openapi.json", headers={"Authorization": "Bearer from-env"}).json()
        assert schema["info"]["title"] == "attnkit serve"
    with serving(pretrained, api_key="given") as client:  # the argument wins over the environment
        assert post(client, OK, authorization="Bearer given")[0] == 200
        assert error(client, OK, 401, authorization="Bearer from-env")["code"] == "invalid_api_key"
    monkeypatch.setenv("ATTNKIT_API_KEY", "")  # empty: no key
    with serving(pretrained) as client:
        assert post(client, OK)[0] == 200


def test_foreign_hosts_wrong_types_and_big_bodies(pretrained: Any) -> None:
    with serving(pretrained, limits=ServeLimits(max_body_bytes=500, max_chars=1)) as client:
        err = error(client, OK, 421, host="evil.example")
        assert err["code"] == "host_not_allowed" and "'evil.example'" in err["message"]
        response = client.post("/v1/completions", content=json.dumps(OK), headers={"Content-Type": "text/plain"})
        assert response.status_code == 415 and response.json()["error"]["code"] == "unsupported_media_type"
        big = {**OK, "prompt": "x" * 500}
        err = error(client, big, 413)
        assert err["code"] == "request_too_large" and err["type"] == "invalid_request_error"
        assert "limit of 500 bytes (attnkit serve --max-body-bytes): send less text" in err["message"]
        assert post(client, {**OK, "prompt": [T] * 60})[0] == 200  # 440 bytes; token ids are no characters
    with serving(pretrained, local_only=False) as client:
        assert post(client, OK, host="evil.example")[0] == 200


def test_the_default_limits(pretrained: Any) -> None:
    with serving(pretrained) as client:
        err = error(client, {**OK, "prompt": "x" * (2 * 2**20)}, 413)  # --max-body-bytes 2 MiB
        assert "limit of 2097152 bytes" in err["message"]
        err = error(client, {**OK, "prompt": "x" * 100_001}, 400)  # --max-chars 100000
        assert err["param"] == "prompt" and "limit of 100000" in err["message"]
        err = error(client, {**OK, "prompt": ["a"] * 65}, 400)  # --max-prompts 64
        assert err["param"] == "prompt" and "65 prompts" in err["message"]
        _, data = post(client, {**CHAT, "max_tokens": None}, "/v1/chat/completions")
    assert data["usage"]["completion_tokens"] == 128 - data["usage"]["prompt_tokens"]  # the context ends it
    assert data["choices"][0]["finish_reason"] == "length"


def test_bodies_that_are_not_requests(pretrained: Any) -> None:
    with serving(pretrained) as client:
        for path in ("/v1/completions", "/v1/chat/completions"):
            err = error(client, b'{"model": "tiny", "prompt": ', 400, path)
            assert err["message"].startswith("the request body is not valid JSON: ") and err["param"] is None
            assert "not valid JSON" in error(client, b'"\xff"', 400, path)["message"]
            assert error(client, b"[1, 2]", 400, path)["message"] == "the request body must be a JSON object"
            for deep in (b"[" * 100_000, b'{"model": "tiny", "stop": ' + b"[" * 5000 + b"]" * 5000 + b"}"):
                err = error(client, deep, 400, path)  # was a 500: the parser's RecursionError
                assert err["message"].startswith("the request body's JSON is nested too deeply"), err
            huge = b'{"model": "tiny", "seed": 1' + b"0" * 5000 + b"}"  # was a 500: int()'s 4300-digit limit
            err = error(client, huge, 400, path)
            assert (
                err["message"]
                == "the request body holds an integer of more than 4300 digits: send numbers of ordinary size"
            )
            assert error(client, {"model": NAME, "messages": USER, "prompt": "a", "stream": "x"}, 400, path) == {
                "message": "invalid stream: Input should be a valid boolean, unable to interpret input (got 'x')",
                "type": "invalid_request_error", "param": "stream", "code": None,
            }  # fmt: skip
            assert error(client, {**OK, **CHAT, "model": "gpt-4"}, 404, path) == {
                "message": "the model 'gpt-4' does not exist: this server serves 'tiny' (GET /v1/models)",
                "type": "invalid_request_error", "param": "model", "code": "model_not_found",
            }  # fmt: skip
        err = error(client, {"model": NAME}, 400)
        assert err["message"] == "missing required parameter 'prompt'" and err["param"] == "prompt"
        response = client.get("/v1/nothing")
        assert response.status_code == 404 and response.json() == {
            "error": {"message": "Not Found", "type": "invalid_request_error", "param": None, "code": "not_found"}
        }
        response = client.get("/v1/completions")
        assert response.status_code == 405 and response.json()["error"]["code"] is None
        assert response.json()["error"]["message"] == "Method Not Allowed"


EDGES = [  # (field, a value at its edge that is accepted, one just past it)
    ("temperature", 2.0, 2.0001),
    ("temperature", 0, -0.0001),
    ("top_p", 1.0, 1.0001),
    ("n", 32, 33),  # the server's --max-batch
    ("seed", 2**64 - 1, 2**64),
    ("seed", 0, -1),
    ("max_tokens", 1, 0),
    ("stop", ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]),
    ("logprobs", 5, 6),
    ("logit_bias", {"319": 100}, {"320": 1}),  # the vocabulary's last id, one past it
    ("prompt", [319], [320]),
    ("prompt", [0], [-1]),
]


def test_each_field_at_its_edges(pretrained: Any) -> None:
    with serving(pretrained) as client:
        for field, good, bad in EDGES:
            status, data = post(client, {**OK, field: good, "max_tokens": 1} if field != "max_tokens" else OK)
            assert status == 200, (field, good, data)
            err = error(client, {**OK, field: bad}, 400)
            assert err["param"] == field and field in err["message"], err
        for body, path, param, char in (  # a 500 (completions), a 400 naming the template (chat)
            (b'{"model": "tiny", "prompt": ["a", "b\\ud800"]}', "/v1/completions", "prompt", "ud800"),
            (
                b'{"model": "tiny", "messages": [{"role": "user", "content": "\\udfff"}]}',
                "/v1/chat/completions",
                "messages",
                "udfff",
            ),
        ):
            err = error(client, body, 400, path)
            assert err["param"] == param
            assert err["message"] == (
                f"the request's {param}: a lone surrogate ('\\{char}') is not a character; "
                "send text that is valid Unicode"
            )
        err = error(client, {**OK, "logit_bias": {"1" + "0" * 5000: 1}}, 400)
        assert err["param"] == "logit_bias" and err["message"].startswith("logit_bias keys must be token ids")
        err = error(client, {**OK, "prompt": [[5, 6], [320, 7, 400]]}, 400)
        assert err["message"] == "prompt token ids must be in [0, 320) (the model's vocabulary), got 320"
        assert error(client, {**CHAT, "top_logprobs": 2}, 400, "/v1/chat/completions")["param"] == "top_logprobs"
        err = error(client, {**CHAT, "max_completion_tokens": 0}, 400, "/v1/chat/completions")
        assert err["param"] == "max_completion_tokens"


def test_prompts_that_fill_the_context(pretrained: Any) -> None:
    with serving(pretrained) as client:
        err = error(client, {**OK, "prompt": [T] * 128}, 400)
        assert err["code"] == "context_length_exceeded" and err["param"] == "prompt"
        assert "the prompt has 128 tokens but the model's context is 128 tokens" in err["message"]
        _, data = post(client, {**OK, "prompt": [T] * 127, "max_tokens": 5})
        assert data["choices"][0]["finish_reason"] == "length" and data["usage"]["completion_tokens"] == 1
        long_chat = {**CHAT, "messages": [{"role": "user", "content": "moon river " * 100}]}
        err = error(client, long_chat, 400, "/v1/chat/completions")
        assert err["code"] == "context_length_exceeded" and err["param"] == "messages"


def test_completions_answers_usage_n_and_echo(pretrained: Any) -> None:
    ids = pretrained.encode_prompt("The old owl")
    with serving(pretrained, limits=ServeLimits(max_tokens=4)) as client:
        _, one = post(client, {**OK, "max_tokens": 10})  # capped by --max-tokens 4
        _, many = post(client, {**OK, "prompt": ["The old owl", "A"], "n": 2, "stop": ["TheThe"]})
        _, echo = post(client, {**OK, "echo": True, "max_tokens": 0, "logprobs": 1})
        _, echo_ids = post(client, {**OK, "prompt": ids, "echo": True, "max_tokens": 1})
        _, special = post(client, {**OK, "logit_bias": {str(ENDOFTEXT): 100}, "logprobs": 0, "max_tokens": 2})
    assert [c["text"] for c in one["choices"]] == ["The" * 4] and one["choices"][0]["finish_reason"] == "length"
    assert one["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 4, "total_tokens": len(ids) + 4}
    assert [(c["index"], c["text"], c["finish_reason"]) for c in many["choices"]] == [(i, "", "stop") for i in range(4)]
    assert many["usage"]["prompt_tokens"] == len(ids) + len(pretrained.encode_prompt("A"))
    assert many["usage"]["completion_tokens"] == 8  # the stop string's two tokens, per choice
    assert echo["choices"][0]["text"] == "The old owl" and echo["usage"]["completion_tokens"] == 0
    lps = echo["choices"][0]["logprobs"]
    assert (
        lps["token_logprobs"][0] is None and len(lps["tokens"]) == len(ids) and "".join(lps["tokens"]) == "The old owl"
    )
    assert echo_ids["choices"][0]["text"] == pretrained.decode(ids) + "The"
    assert special["choices"][0]["logprobs"]["tokens"] == ["<|endoftext|>"] * 2  # special tokens shown
    assert special["choices"][0]["text"] == ""


def test_streams_send_chunks_usage_and_done(pretrained: Any) -> None:
    with serving(pretrained) as client:
        plain = events(client, OK)
        with_usage = events(client, {**OK, "n": 2, "stream_options": {"include_usage": True}})
        chat = events(client, {**CHAT, "stream_options": {"include_usage": True}}, "/v1/chat/completions")
        alone = post(client, CHAT, "/v1/chat/completions")[1]
    assert plain[-1] == "[DONE]" and all("usage" not in e for e in plain[:-1])
    assert "".join(c["text"] for e in plain[:-1] for c in e["choices"]) == "The" * 3
    assert plain[-2]["choices"][0]["finish_reason"] == "length"
    *chunks, usage, done = with_usage
    assert done == "[DONE]" and usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}
    assert {c["index"] for e in chunks for c in e["choices"]} == {0, 1}
    assert chat[0]["object"] == "chat.completion.chunk" and chat[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["delta"].get("content", "") for e in chat[:-2] for c in e["choices"])
    assert text == alone["choices"][0]["message"]["content"] == "The" * 3
    assert chat[-2]["usage"] == alone["usage"]


def test_chat_answers_through_the_template(pretrained: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    with serving(pretrained) as client:
        _, data = post(
            client, {**CHAT, "messages": messages, "logprobs": True, "top_logprobs": 2}, "/v1/chat/completions"
        )
    assert data["object"] == "chat.completion" and data["model"] == NAME
    (choice,) = data["choices"]
    assert choice["message"] == {"role": "assistant", "content": "The" * 3} and choice["finish_reason"] == "length"
    content = choice["logprobs"]["content"]
    assert [e["token"] for e in content] == ["The"] * 3 and all(len(e["top_logprobs"]) == 2 for e in content)
    prompt = pretrained.encode_chat(messages, add_generation_prompt=True)
    assert data["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 3, "total_tokens": len(prompt) + 3}


def test_chat_stops_at_the_templates_end_of_turn(pretrained: Any) -> None:
    """Chat adds the template's end of turn (one token: a stop id; more: a stop string); completions do not."""
    one_token = dataclasses.replace(
        pretrained, chat_template=ChatTemplate(CHATML.replace("<|im_end|>", "<|endoftext|>"))
    )
    with serving(one_token) as client:
        bias = {"logit_bias": {str(ENDOFTEXT): 100}}
        _, chat = post(client, {**CHAT, **bias}, "/v1/chat/completions")
        _, completion = post(client, {**OK, **bias})
    assert chat["choices"][0]["finish_reason"] == "stop" and chat["usage"]["completion_tokens"] == 1
    assert completion["choices"][0]["finish_reason"] == "length" and completion["usage"]["completion_tokens"] == 3
    text = dataclasses.replace(pretrained, chat_template=ChatTemplate(CHATML.replace("<|im_end|>", "TheThe")))
    with serving(text) as client:
        _, chat = post(client, CHAT, "/v1/chat/completions")
        _, completion = post(client, OK)
    assert chat["choices"][0] == {
        "index": 0, "message": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": "stop",
    }  # fmt: skip
    assert completion["choices"][0]["text"] == "The" * 3


@pytest.mark.parametrize("source", ["{{ raise_exception('no system messages') }}", "{{ messages + 1 }}"])
def test_a_template_that_refuses_is_a_400(pretrained: Any, source: str) -> None:
    refusing = dataclasses.replace(pretrained, chat_template=ChatTemplate(source))
    with serving(refusing) as client:
        err = error(client, CHAT, 400, "/v1/chat/completions")
        assert err["param"] == "messages" and err["message"].startswith("the chat template refused the messages: ")
        assert post(client, OK)[0] == 200  # the queue's reservation was given back


def test_admission_limits_and_the_queue(pretrained: Any) -> None:
    limits = ServeLimits(max_prompts=2, max_queue=2, max_chars=20)
    with serving(pretrained, limits=limits) as client:
        err = error(client, {**OK, "prompt": [[5], [6], [7]]}, 400)  # token ids count as prompts
        assert err["param"] == "prompt" and "3 prompts" in err["message"] and "--max-prompts" in err["message"]
        err = error(client, {**OK, "prompt": ["x" * 11, "y" * 10]}, 400)
        assert err["param"] == "prompt" and "21 characters" in err["message"]
        assert post(client, {**OK, "prompt": ["x" * 10, "y" * 10]})[0] == 200
        messages = [{"role": "user", "content": "x" * 10}, {"role": "assistant", "content": "y" * 11}, *USER]
        err = error(client, {**CHAT, "messages": messages}, 400, "/v1/chat/completions")
        assert err["param"] == "messages" and "23 characters" in err["message"]
        three = [{"role": "user", "content": "a"}] * 3  # more messages than --max-prompts: one prompt
        assert post(client, {**CHAT, "messages": three}, "/v1/chat/completions")[0] == 200
        for _ in range(3):  # each request's reservation is given back: the queue never fills
            assert post(client, {**OK, "prompt": ["a", "b"]})[0] == 200
            assert error(client, {**OK, "prompt": [[T] * 128, [T]]}, 400)["code"] == "context_length_exceeded"


def test_a_full_queue_is_429_with_retry_after(pretrained: Any) -> None:
    engine = Engine(pretrained.model, pretrained.tokenizer, stop_ids=pretrained.eos_ids)
    app = create_app(pretrained, model_name=NAME, engine=engine, limits=ServeLimits(max_prompts=1, max_queue=2))
    client = TestClient(app, base_url=LOCAL)  # no lifespan: the engine is not started, the queue stays
    try:
        params = SamplingParams(max_tokens=1)
        engine.submit([T], params, lambda event: None)
        # One prompt waits: a request of one prompt is admitted (then refused for its length, never queued).
        long_chat = {**CHAT, "messages": [{"role": "user", "content": "moon river " * 100}]}
        assert error(client, long_chat, 400, "/v1/chat/completions")["code"] == "context_length_exceeded"
        assert error(client, {**OK, "prompt": "moon river " * 100}, 400)["code"] == "context_length_exceeded"
        engine.submit([T], params, lambda event: None)
        response = client.post("/v1/completions", json=OK)
        assert response.status_code == 429 and response.headers["retry-after"] == "1"
        assert response.json()["error"] == {
            "message": "the server is busy: 2 prompts are waiting and this request has 1, over the queue's limit of 2 "
            "(attnkit serve --max-queue): retry after the Retry-After seconds",
            "type": "server_busy", "param": None, "code": "queue_full",
        }  # fmt: skip
        assert client.get("/health").json()["waiting"] == 2
    finally:
        engine.shutdown()


def test_tokenizing_runs_one_request_at_a_time_off_the_event_loop(
    pretrained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    running, most, on_loop = 0, 0, []
    lock = threading.Lock()
    encode = pretrained.encode_prompt

    def slow(text: str) -> list[int]:
        nonlocal running, most
        try:
            asyncio.get_running_loop()
            on_loop.append(text)
        except RuntimeError:
            pass
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return encode(text)

    slowed = dataclasses.replace(pretrained)
    monkeypatch.setattr(slowed, "encode_prompt", slow)  # this copy's only
    with serving(slowed) as client, ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda k: post(client, {**OK, "prompt": [f"p{k}", "q"]})[0], range(3)))
    assert answers == [200] * 3 and most == 1 and on_loop == []


def test_one_bad_request_does_not_fail_another(pretrained: Any) -> None:
    good = {**OK, "max_tokens": 8, "temperature": 1.0, "seed": 7, "logit_bias": {}}
    bad = [
        {**OK, "seed": 2**64},
        {**OK, "temperature": 1.7e-39},
        {**OK, "prompt": [T] * 200},
        {**OK, "prompt": [999]},
        {**OK, "model": "other"},
        b"{",
    ]
    with serving(pretrained) as client:
        alone = post(client, good)[1]["choices"]
        with ThreadPoolExecutor(4) as pool:
            goods = [pool.submit(post, client, good) for _ in range(3)]
            stream = pool.submit(events, client, good)
            bads = [pool.submit(post, client, b) for b in bad]
            assert all(400 <= f.result()[0] < 500 for f in bads)
            assert all(f.result() == (200, f.result()[1]) and f.result()[1]["choices"] == alone for f in goods)
            assert "".join(c["text"] for e in stream.result()[:-1] for c in e["choices"]) == alone[0]["text"]
