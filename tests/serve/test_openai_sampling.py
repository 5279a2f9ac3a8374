"""Every sampling option and log-probabilities on the real server (raw HTTP): each option changes the output as
it should (greedy ones equal a reference written here from the model's logits), each wrong value is a 400 naming
it in the words of ``SamplingParams``' own check, log-probabilities equal the model's log-softmax (OpenAI's chat
and legacy formats, streamed or not), ``echo`` with ``max_tokens: 0`` scores a prompt, and prompts may be token ids."""

from __future__ import annotations

import json
import math
import urllib.request
from collections import Counter
from typing import Any

import pytest
import torch
from serve_helpers import API_KEY, Server

from attnkit.models.generation import FIELDS, SamplingError, SamplingParams, field_doc
from attnkit.serve.schemas import OPTIONS, ChatRequest, CompletionRequest

TOL = 1e-5
PROMPT = "The old owl"
BASE = {"model": "tiny-chat", "prompt": PROMPT, "temperature": 0}
CHAT = {"model": "tiny-chat", "messages": [{"role": "user", "content": "Where did the owl sit?"}], "temperature": 0}


def post(server: Server, body: dict[str, Any], path: str = "/v1/completions") -> Any:
    status, data = server.request("POST", path, body)
    assert status == 200, data
    return data


def error(server: Server, body: dict[str, Any], path: str = "/v1/completions") -> dict[str, Any]:
    status, data = server.request("POST", path, body)
    assert status == 400, data
    return dict(data["error"])


def stream(server: Server, body: dict[str, Any], path: str = "/v1/completions") -> list[dict[str, Any]]:
    """The chunks of a streamed request (``data: [DONE]`` last)."""
    req = urllib.request.Request(server.url + path, data=json.dumps({**body, "stream": True}).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {API_KEY}")
    with urllib.request.urlopen(req, timeout=60) as resp:
        lines = [line.decode().strip() for line in resp]
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    assert data[-1] == "[DONE]", data
    return [json.loads(d) for d in data[:-1]]


def token_text(pretrained: Any, token: int) -> str:
    """A log-probability's token: its text, special tokens shown."""
    return str(pretrained.tokenizer.decode([token], skip_special=False))


def scores(pretrained: Any, ids: list[int]) -> torch.Tensor:
    """The model's log-softmax ``[len(ids), V]`` over ``ids`` (one full forward pass, no cache)."""
    model = pretrained.model.eval()
    with torch.no_grad():
        return model(torch.tensor([ids]))[0].float().log_softmax(-1)


def greedy(pretrained: Any, ids: list[int], steps: int, *, stop_ids: Any = None, **options: Any) -> list[int]:
    """Greedy new ids after ``ids`` from the model's last logits, with one option applied by its definition:
    ``repetition_penalty`` (transformers': over the prompt and the new tokens, a positive logit divided, a
    negative one multiplied), ``presence_penalty`` / ``frequency_penalty`` (OpenAI's: over the new tokens) or
    ``logit_bias`` ({id: bias})."""
    stop = set(pretrained.eos_ids if stop_ids is None else stop_ids)
    ids, new = list(ids), []
    for _ in range(steps):
        model = pretrained.model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0, -1].float()
        if "repetition_penalty" in options:
            seen = torch.tensor(sorted(set(ids)))
            v, p = logits[seen], options["repetition_penalty"]
            logits[seen] = torch.where(v > 0, v / p, v * p)
        for token, count in Counter(new).items():
            logits[token] -= options.get("presence_penalty", 0.0) + options.get("frequency_penalty", 0.0) * count
        for token, bias in options.get("logit_bias", {}).items():
            logits[token] += bias
        token = int(logits.argmax())
        if token in stop:
            break
        new.append(token)
        ids.append(token)
    return new


# ---------------------------------------------------------------------------------------------- the schema
def test_the_request_options_are_the_parameters_types_fields() -> None:
    """Every field of SamplingParams but the server's own is a request option on both endpoints, described by
    field_doc: an option added to the parameters type is on the server with no change to it."""
    assert set(OPTIONS) == set(FIELDS) - {"stop_ids", "max_tokens", "logprobs"}
    assert {"top_k", "min_p", "repetition_penalty", "logit_bias", "presence_penalty", "frequency_penalty"} <= set(
        OPTIONS
    )
    for kind in (CompletionRequest, ChatRequest):
        properties = kind.model_json_schema()["properties"]
        for name in OPTIONS:
            assert properties[name]["description"].startswith(field_doc(name)), (kind, name)
        assert properties["max_tokens"]["description"] == field_doc("max_tokens")


@pytest.mark.parametrize("field", [name for name in OPTIONS if name not in ("stop", "logit_bias")])
def test_every_option_takes_the_parameters_types_check(server: Server, field: str) -> None:
    """A text where a number belongs: the 400's message is SamplingParams' own (one set of rules)."""
    with pytest.raises(SamplingError) as expected:
        SamplingParams(**{field: "x"})
    for path, body in (("/v1/completions", BASE), ("/v1/chat/completions", CHAT)):
        err = error(server, {**body, field: "x"}, path)
        assert (err["param"], err["message"]) == (field, str(expected.value)), path


# ---------------------------------------------------------------------------------------------- each option
def test_greedy_penalties_and_bias_equal_their_definition(server: Server, pretrained: Any) -> None:
    ids = pretrained.encode_prompt(PROMPT)
    plain = post(server, {**BASE, "max_tokens": 24})["choices"][0]["text"]
    assert plain == pretrained.decode(greedy(pretrained, ids, 24))
    token = pretrained.encode_prompt("moon")[-1]
    cases = [
        {"repetition_penalty": 1.8},
        {"presence_penalty": 2.0},
        {"frequency_penalty": 1.5},
        {"frequency_penalty": -2.0},
        {"logit_bias": {token: 100.0}},
        {"logit_bias": {t: -100.0 for t in greedy(pretrained, ids, 2)}},
    ]
    for options in cases:
        sent = {k: ({str(t): b for t, b in v.items()} if k == "logit_bias" else v) for k, v in options.items()}
        got = post(server, {**BASE, "max_tokens": 24, **sent})["choices"][0]["text"]
        assert got == pretrained.decode(greedy(pretrained, ids, 24, **options)), options
        assert got != plain, options  # the option changed the text
    forced = post(server, {**BASE, "max_tokens": 4, "logit_bias": {str(token): 100}})["choices"][0]["text"]
    assert forced == pretrained.decode([token] * 4)


def test_greedy_chat_takes_the_options_too(server: Server, pretrained: Any) -> None:
    ids = pretrained.encode_chat(CHAT["messages"])
    got = post(server, {**CHAT, "max_tokens": 20, "frequency_penalty": 2.0}, "/v1/chat/completions")
    expected = greedy(pretrained, ids, 20, stop_ids=pretrained.stop_ids, frequency_penalty=2.0)
    assert got["choices"][0]["message"]["content"] == pretrained.decode(expected)


def test_top_k_and_min_p_keep_the_draws_among_the_likely_tokens(server: Server) -> None:
    """Seeded draws at temperature 1 with log-probabilities: without a filter some drawn tokens are outside the
    2 most likely; with ``top_k: 2`` none is, and with ``min_p: 0.3`` none is less likely than 0.3 x the best."""
    body = {**CHAT, "temperature": 1.0, "seed": 7, "n": 4, "max_tokens": 16, "logprobs": True, "top_logprobs": 2}

    def draws(**options: Any) -> list[tuple[float, list[float]]]:
        data = post(server, {**body, **options}, "/v1/chat/completions")
        return [
            (e["logprob"], [t["logprob"] for t in e["top_logprobs"]])
            for choice in data["choices"]
            for e in choice["logprobs"]["content"]
        ]

    def outside_top_2(pairs: list[tuple[float, list[float]]]) -> int:
        return sum(lp < top[1] - TOL for lp, top in pairs)

    assert outside_top_2(draws()) > 0
    assert outside_top_2(draws(top_k=2)) == 0
    assert all(lp >= top[0] + math.log(0.3) - TOL for lp, top in draws(min_p=0.3))
    assert any(lp < top[0] + math.log(0.3) for lp, top in draws())
    one = post(server, {**BASE, "temperature": 1.0, "seed": 3, "max_tokens": 12, "top_k": 1})["choices"][0]["text"]
    assert one == post(server, {**BASE, "max_tokens": 12})["choices"][0]["text"]  # top_k 1 is greedy


# ---------------------------------------------------------------------------------------------- wrong values
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", 0),
        ("top_k", 1.5),
        ("top_k", True),
        ("min_p", 1.5),
        ("min_p", -0.1),
        ("min_p", "0.1"),
        ("repetition_penalty", 0),
        ("repetition_penalty", float("inf")),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("frequency_penalty", "1"),
        ("logit_bias", {"5": 101}),
        ("logit_bias", {"5": "1"}),
        ("n", 200),
    ],
)
def test_a_wrong_option_is_400_in_the_parameters_types_words(server: Server, field: str, value: Any) -> None:
    """The message is SamplingParams' own for the value as sent: one set of rules."""
    with pytest.raises(SamplingError) as expected:
        SamplingParams(**{field: {int(k): v for k, v in value.items()} if field == "logit_bias" else value})
    for path, body in (("/v1/completions", BASE), ("/v1/chat/completions", CHAT)):
        err = error(server, {**body, field: value}, path)
        assert (err["param"], err["message"]) == (field, str(expected.value)), path


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"logit_bias": {"x": 1}}, "logit_bias", "token ids written as strings"),
        ({"logit_bias": [[5, 1]]}, "logit_bias", "JSON object"),
        ({"logit_bias": {"100000": 1}}, "logit_bias", "past the vocabulary"),
        ({"logprobs": 6}, "logprobs", "[0, 5]"),
        ({"logprobs": -1}, "logprobs", "[0, 5]"),
        ({"logprobs": True}, "logprobs", "[0, 5]"),
        ({"max_tokens": 0}, "max_tokens", "[1, "),
        ({"max_tokens": -1, "echo": True}, "max_tokens", "[0, "),
        ({"prompt": [100000]}, "prompt", "vocabulary"),
        ({"prompt": [[1, 2], [-1]]}, "prompt", "vocabulary"),
        ({"prompt": [[1, 2], []]}, "prompt", "token ids"),
        ({"prompt": [1, "a"]}, "prompt", "token ids"),
        ({"prompt": [True]}, "prompt", "token ids"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4"),
        ({"temperature": 2.5}, "temperature", "<= 2"),
    ],
)
def test_wrong_completion_values_are_400_naming_them(
    server: Server, body: dict[str, Any], param: str, words: str
) -> None:
    err = error(server, {**BASE, **body})
    assert err["param"] == param and words in err["message"], err


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (
            {"logprobs": True, "top_logprobs": 21},
            "top_logprobs",
            "top_logprobs must be None (none) or an int in [0, 20]",
        ),
        ({"logprobs": True, "top_logprobs": -1}, "top_logprobs", "[0, 20]"),
        ({"top_logprobs": 3}, "top_logprobs", "needs logprobs: true"),
        ({"logprobs": [1]}, "logprobs", "valid boolean"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "max_completion_tokens must be an int in [1, "),
    ],
)
def test_wrong_chat_values_are_400_naming_them(server: Server, body: dict[str, Any], param: str, words: str) -> None:
    err = error(server, {**CHAT, **body}, "/v1/chat/completions")
    assert err["param"] == param and words in err["message"], err


# ---------------------------------------------------------------------------------------------- log-probabilities
def test_completion_logprobs_equal_the_models_log_softmax(server: Server, pretrained: Any) -> None:
    ids = pretrained.encode_prompt(PROMPT)
    new = greedy(pretrained, ids, 10)
    data = post(server, {**BASE, "max_tokens": 10, "logprobs": 3})
    choice = data["choices"][0]
    assert choice["text"] == pretrained.decode(new)
    lps = choice["logprobs"]
    assert set(lps) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    full = scores(pretrained, ids + new)
    assert lps["tokens"] == [token_text(pretrained, t) for t in new]
    for j, token in enumerate(new):
        row = full[len(ids) + j - 1]
        assert lps["token_logprobs"][j] == pytest.approx(float(row[token]), abs=TOL)
        # {text: logprob} of the 3 most likely and the chosen, the likelier first where two texts are one
        expected: dict[str, float] = {}
        for i in [*row.topk(3).indices.tolist(), token]:
            expected.setdefault(token_text(pretrained, i), float(row[i]))
        assert lps["top_logprobs"][j] == pytest.approx(expected, abs=TOL)
    offsets = [sum(len(t) for t in lps["tokens"][:j]) for j in range(len(new))]
    assert lps["text_offset"] == offsets
    assert post(server, {**BASE, "max_tokens": 3})["choices"][0]["logprobs"] is None


def test_chat_logprobs_are_openais_format_and_the_models_values(server: Server, pretrained: Any) -> None:
    ids = pretrained.encode_chat(CHAT["messages"])
    new = greedy(pretrained, ids, 8, stop_ids=pretrained.stop_ids)
    body = {**CHAT, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}
    choice = post(server, body, "/v1/chat/completions")["choices"][0]
    assert choice["message"]["content"] == pretrained.decode(new)
    content = choice["logprobs"]["content"]
    full = scores(pretrained, ids + new)
    assert len(content) == len(new)
    for j, (entry, token) in enumerate(zip(content, new, strict=True)):
        text = token_text(pretrained, token)
        assert entry["token"] == text and entry["bytes"] == list(text.encode())
        row = full[len(ids) + j - 1]
        assert entry["logprob"] == pytest.approx(float(row[token]), abs=TOL)
        values, index = row.topk(2)
        assert [t["token"] for t in entry["top_logprobs"]] == [token_text(pretrained, int(i)) for i in index]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(values.tolist(), abs=TOL)
    plain = post(server, {**CHAT, "max_tokens": 2}, "/v1/chat/completions")["choices"][0]
    assert plain["logprobs"] is None
    no_top = post(server, {**CHAT, "max_tokens": 2, "logprobs": True}, "/v1/chat/completions")["choices"][0]
    assert all(e["top_logprobs"] == [] for e in no_top["logprobs"]["content"])


def test_streamed_logprobs_equal_the_whole_answers(server: Server) -> None:
    body = {**BASE, "max_tokens": 20, "logprobs": 2, "n": 2, "temperature": 0.9, "seed": 5}
    whole = post(server, body)["choices"]
    got: dict[int, dict[str, list[Any]]] = {}
    for chunk in stream(server, body):
        for c in chunk["choices"]:
            if c["logprobs"] is not None:
                for key, values in c["logprobs"].items():
                    got.setdefault(c["index"], {}).setdefault(key, []).extend(values)
    assert [got[i] for i in range(2)] == [c["logprobs"] for c in whole]
    chat = {**CHAT, "max_tokens": 12, "logprobs": True, "top_logprobs": 3}
    content = post(server, chat, "/v1/chat/completions")["choices"][0]["logprobs"]["content"]
    streamed = [
        e
        for chunk in stream(server, chat, "/v1/chat/completions")
        for c in chunk["choices"]
        if c["logprobs"] is not None
        for e in c["logprobs"]["content"]
    ]
    assert streamed == content


# ---------------------------------------------------------------------------------------------- echo, token ids
def test_echo_with_max_tokens_0_scores_the_prompt(server: Server, pretrained: Any) -> None:
    """What lm-eval's local-completions sends to score a text: the prompt's tokens, the first one's
    log-probability null, the others the model's."""
    text = "The quiet fox sat on the hill"
    ids = pretrained.encode_prompt(text)
    data = post(server, {**BASE, "prompt": text, "echo": True, "max_tokens": 0, "logprobs": 1})
    choice = data["choices"][0]
    assert choice["text"] == text and choice["finish_reason"] == "length"
    assert data["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}
    lps = choice["logprobs"]
    assert lps["tokens"] == [token_text(pretrained, t) for t in ids]
    assert lps["token_logprobs"][0] is None and lps["top_logprobs"][0] is None
    full = scores(pretrained, ids)
    for p in range(1, len(ids)):
        assert lps["token_logprobs"][p] == pytest.approx(float(full[p - 1, ids[p]]), abs=TOL)
        best = int(full[p - 1].argmax())
        expected = {token_text(pretrained, best): float(full[p - 1, best])}
        expected.setdefault(token_text(pretrained, ids[p]), float(full[p - 1, ids[p]]))
        assert lps["top_logprobs"][p] == pytest.approx(expected, abs=TOL)
    assert lps["text_offset"] == [sum(len(t) for t in lps["tokens"][:p]) for p in range(len(ids))]


def test_echo_puts_the_prompt_first(server: Server, pretrained: Any) -> None:
    ids = pretrained.encode_prompt(PROMPT)
    plain = post(server, {**BASE, "max_tokens": 5})["choices"][0]
    echoed = post(server, {**BASE, "max_tokens": 5, "echo": True, "logprobs": 1})["choices"][0]
    assert echoed["text"] == PROMPT + plain["text"]
    lps = echoed["logprobs"]
    new = greedy(pretrained, ids, 5)
    assert len(lps["tokens"]) == len(ids) + len(new)
    full = scores(pretrained, ids + new)
    sequence = ids + new
    for p in range(1, len(sequence)):
        assert lps["token_logprobs"][p] == pytest.approx(float(full[p - 1, sequence[p]]), abs=TOL)
    # the new tokens' offsets index the echoed text
    assert lps["text_offset"][len(ids)] == len(PROMPT)
    chunks = stream(server, {**BASE, "max_tokens": 5, "echo": True})
    assert "".join(c["text"] for chunk in chunks for c in chunk["choices"]) == echoed["text"]


def test_lm_evals_loglikelihood_request(server: Server, pretrained: Any) -> None:
    """local-completions' payload: token ids, ``echo``, ``max_tokens: 1``, ``logprobs: 1``; it reads
    ``token_logprobs[ctxlen:-1]`` and the ``top_logprobs`` beside them."""
    context, continuation = pretrained.encode_prompt("The big dog sat on the"), [pretrained.encode_prompt(" mat")[-1]]
    tokens = context + continuation
    body = {"model": "tiny-chat", "prompt": [tokens], "temperature": 0, "max_tokens": 1, "logprobs": 1}
    choice = post(server, {**body, "echo": True, "seed": 1234})["choices"][0]
    full = scores(pretrained, tokens)
    assert len(choice["logprobs"]["token_logprobs"]) == len(tokens) + 1
    got = sum(choice["logprobs"]["token_logprobs"][len(context) : -1])
    assert got == pytest.approx(sum(float(full[p - 1, tokens[p]]) for p in range(len(context), len(tokens))), abs=1e-4)


def test_token_id_prompts_equal_text_prompts(server: Server, pretrained: Any) -> None:
    texts = ["The old owl", "It was late"]
    ids = [pretrained.encode_prompt(t) for t in texts]
    by_text = post(server, {**BASE, "prompt": texts, "max_tokens": 8})
    one = post(server, {**BASE, "prompt": ids[0], "max_tokens": 8})
    several = post(server, {**BASE, "prompt": ids, "max_tokens": 8, "echo": True})
    assert one["choices"][0]["text"] == by_text["choices"][0]["text"]
    assert [c["text"] for c in several["choices"]] == [
        pretrained.decode(i) + c["text"] for i, c in zip(ids, by_text["choices"], strict=True)
    ]
    assert several["usage"]["prompt_tokens"] == by_text["usage"]["prompt_tokens"] == sum(map(len, ids))


def test_a_stop_tokens_logprob_is_reported(server: Server, pretrained: Any) -> None:
    """lm-eval's request when the model's next token is its EOS (forced here with logit_bias): the answer still
    holds one entry per generated token, so ``token_logprobs[ctxlen:-1]`` is the continuation's."""
    tokens = pretrained.encode_prompt("The big dog sat on the mat")
    eos = pretrained.eos_ids[0]
    body = {"model": "tiny-chat", "prompt": [tokens], "temperature": 0, "max_tokens": 1, "logprobs": 1, "echo": True}
    choice = post(server, {**body, "logit_bias": {str(eos): 100}})["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"] == pretrained.decode(tokens)
    assert len(choice["logprobs"]["token_logprobs"]) == len(tokens) + 1
    assert choice["logprobs"]["tokens"][-1] == token_text(pretrained, eos)
