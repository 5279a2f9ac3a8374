"""The engine on the one Sampler: every sampling option batched with rows of other options gets the tokens it
gets alone (greedy and seeded), log-probabilities equal a full forward pass's log-softmax, the prompt's
log-probabilities (``echo``, ``max_tokens`` 0), and a bad request among good ones fails alone."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from test_engine import Collector, failure, run, wait_until

from attnkit.serve import Engine, Failed, Finished, Piece, Prompt, SamplingParams, TokenLogprob
from sampling_faults import BAD_SEED, failing_draws

TOL = 1e-5


class Events(Collector):
    """A :class:`Collector` that keeps every event too, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.all: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.all.append(event)
        super().__call__(event)

    def of(self, kind: type, index: int | None = None) -> list[Any]:
        return [e for e in self.all if isinstance(e, kind) and (index is None or e.index == index)]


def options(pretrained: Any) -> dict[str, SamplingParams]:
    """One request per option (its non-neutral value), each greedy and seeded, plus plain ones."""
    words = pretrained.tokenizer.encode(" the and of a")
    per_option: dict[str, dict[str, Any]] = {
        "plain": {},
        "top_k": {"top_k": 5},
        "min_p": {"min_p": 0.05},
        "top_p": {"top_p": 0.8},
        "repetition_penalty": {"repetition_penalty": 1.5},
        "presence_penalty": {"presence_penalty": 2.0},
        "frequency_penalty": {"frequency_penalty": 1.5},
        "logit_bias": {"logit_bias": {t: 4.0 for t in words}},
        "stop_ids": {"stop_ids": tuple(words)},
    }
    made = {}
    for name, values in per_option.items():
        made[f"{name}/greedy"] = SamplingParams(max_tokens=20, temperature=0.0, **values)
        made[f"{name}/seeded"] = SamplingParams(max_tokens=14, temperature=1.0, seed=11, n=2, **values)
    return made


PROMPT = "The big dog sat on the roof and looked at"


def test_every_option_batched_with_rows_of_other_options_gets_its_alone_tokens(pretrained: Any) -> None:
    """Each option's request, run alone, then all of them together: half prefilled together while a long request
    decodes, the other half joining the batch as the first half finishes (rows leave at different steps), every
    one with the same text, token count and finish reason as alone. Each option changes what its greedy or its
    seeded request gets (else this could not fail)."""
    ids = pretrained.encode_prompt(PROMPT)
    made = options(pretrained)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=64, stop_ids=[]) as engine:
        alone = {name: run(engine, ids, params) for name, params in made.items()}
        long = SamplingParams(max_tokens=60, temperature=0.0)
        alone_long = run(engine, pretrained.encode_prompt("The quiet fox"), long).texts
        for option in {name.split("/")[0] for name in made} - {"plain"}:
            changed = [alone[f"{option}/{kind}"].texts != alone[f"plain/{kind}"].texts for kind in ("greedy", "seeded")]
            assert any(changed), f"{option} changes nothing here"

        gate = threading.Event()
        started = Collector()

        def first_piece(event: Any) -> None:
            started(event)
            gate.set()

        engine.submit(pretrained.encode_prompt("The quiet fox"), long, first_piece)
        assert gate.wait(60)
        names = list(made)
        sinks = {name: Collector() for name in names}
        for name in names[::2]:
            engine.submit(ids, made[name], sinks[name])
        for name in names[::2]:
            sinks[name].wait(made[name].n)
        for name in names[1::2]:
            engine.submit(ids, made[name], sinks[name])
        for name in names:
            got = sinks[name].wait(made[name].n)
            assert (got.texts, got.tokens, got.reasons) == (
                alone[name].texts,
                alone[name].tokens,
                alone[name].reasons,
            ), name
        assert started.wait().texts == alone_long


def full_pass(pretrained: Any, ids: list[int]) -> torch.Tensor:
    """The log-softmax ``[len(ids), V]`` of the model's logits over the whole text, no cache."""
    with torch.inference_mode():
        return pretrained.model(torch.tensor([ids]))[0].float().log_softmax(dim=-1)


def check_entry(entry: TokenLogprob, scores: torch.Tensor, token: int, k: int) -> None:
    """``entry`` is ``token``'s log-probability at a position whose log-softmax is ``scores [V]``, with the
    ``k`` most likely tokens, sorted, the first the argmax."""
    assert entry.id == token
    assert abs(entry.logprob - float(scores[token])) < TOL
    assert len(entry.top) == k
    if k:
        values = [lp for _, lp in entry.top]
        assert values == sorted(values, reverse=True)
        assert entry.top[0][0] == int(scores.argmax())
        for token_id, lp in entry.top:
            assert abs(lp - float(scores[token_id])) < TOL
        assert abs(values[-1] - float(scores.topk(k).values[-1])) < TOL


def test_log_probabilities_equal_a_full_forward_pass(pretrained: Any) -> None:
    """A greedy request (3 alternatives, and its prompt's log-probabilities) and a seeded sampled one of two
    choices with a repetition penalty (5 alternatives), batched with requests that ask none: each generated
    token's entry is the full text's log-softmax at its position (the raw one: the penalty and temperature
    change what is drawn, not the reported values), alternatives sorted and first the argmax, a greedy row's
    token its first alternative; a choice's Pieces carry its entries in order (together its Finished's, one per
    id); a request that asks none gets none."""
    greedy = SamplingParams(max_tokens=20, temperature=0.0, logprobs=3)
    sampled = SamplingParams(
        max_tokens=16, temperature=0.9, top_p=0.95, repetition_penalty=1.3, seed=5, n=2, logprobs=5
    )
    plain = SamplingParams(max_tokens=12, temperature=0.0)
    prompts = [pretrained.encode_prompt(t) for t in ("The old owl", "It was late.", "A", "The quiet fox")]
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=16, stop_ids=pretrained.eos_ids)
    sinks = [Events() for _ in range(4)]
    engine.submit(prompts[0], greedy, sinks[0], prompt_logprobs=True)
    engine.submit(prompts[1], sampled, sinks[1])
    engine.submit(prompts[2], plain, sinks[2])
    with engine:  # all prefilled together and decoded as one batch
        for sink, n in zip(sinks[:3], (1, 2, 1)):
            sink.wait(n)
        late = engine.submit(prompts[3], greedy, sinks[3])  # joins the batch later, alone
        sinks[3].wait()
    assert late.prompt_logprobs is False
    for sink, params, prompt in zip(
        [sinks[0], sinks[1], sinks[3]], [greedy, sampled, greedy], prompts[:2] + prompts[3:]
    ):
        for index in range(params.n):
            (finished,) = sink.of(Finished, index)
            ends = finished.logprobs[len(finished.ids) :]  # a stop id's entry comes last (OpenAI's, vLLM's)
            assert len(finished.ids) > 0 and [e.id for e in finished.logprobs[: len(finished.ids)]] == list(
                finished.ids
            )
            assert len(ends) <= 1 and all(e.id in engine.stop_ids | set(params.stop_ids) for e in ends)
            pieces = sink.of(Piece, index)
            assert [e for piece in pieces for e in piece.logprobs] == list(finished.logprobs)
            scores = full_pass(pretrained, prompt + list(finished.ids))
            for at, (token, entry) in enumerate(zip(finished.ids, finished.logprobs)):
                check_entry(entry, scores[len(prompt) + at - 1], token, params.logprobs or 0)
                if params.greedy:
                    assert entry.top[0][0] == token
    assert not sinks[1].of(Prompt) and not sinks[3].of(Prompt)
    (echo,) = sinks[0].of(Prompt)
    assert sinks[0].all[0] == echo  # before any Piece
    assert echo.logprobs[0] is None and len(echo.logprobs) == len(prompts[0])
    scores = full_pass(pretrained, prompts[0])
    for at in range(1, len(prompts[0])):
        check_entry(echo.logprobs[at], scores[at - 1], prompts[0][at], 3)
    assert all(e.logprobs == () for e in sinks[2].all if isinstance(e, Piece | Finished))
    assert sinks[2].texts == run_alone(pretrained, prompts[2], plain)


def run_alone(pretrained: Any, prompt: list[int], params: SamplingParams) -> dict[int, str]:
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=pretrained.eos_ids) as engine:
        return run(engine, prompt, params).texts


def test_echo_with_max_tokens_0_gives_the_prompt_log_probabilities_and_ends_without_sampling(pretrained: Any) -> None:
    """max_tokens 0 with prompt_logprobs (OpenAI's echo + logprobs, lm-eval's loglikelihood): one Prompt event
    (entries of the full pass; none for the first token; no alternatives when logprobs is None), then one
    Finished("length", 0 tokens) per choice; its rows never join the batch (no step is decoded for it), and a
    request prefilled with it gets its alone text."""
    prompt = pretrained.encode_prompt("The big dog sat on the roof")
    other = pretrained.encode_prompt("It was late.")
    greedy = SamplingParams(max_tokens=10, temperature=0.0)
    alone = run_alone(pretrained, other, greedy)
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=pretrained.eos_ids)
    echo, bare, decoded = Events(), Events(), Collector()
    engine.submit(prompt, SamplingParams(max_tokens=0, logprobs=2, n=2), echo, prompt_logprobs=True)
    engine.submit(prompt[:3], SamplingParams(max_tokens=0), bare, prompt_logprobs=True)
    engine.submit(other, greedy, decoded)
    with engine:
        assert decoded.wait().texts == alone
        echo.wait(2)
        bare.wait()
        assert wait_until(lambda: engine.stats()["live_rows"] == 0)
        assert engine.stats()["peak_rows"] == 1
    assert [type(e) for e in echo.all] == [Prompt, Finished, Finished]
    assert echo.all[1:] == [Finished(0, "length", 0, ()), Finished(1, "length", 0, ())]
    entries = echo.all[0].logprobs
    assert entries[0] is None and len(entries) == len(prompt)
    scores = full_pass(pretrained, prompt)
    for at in range(1, len(prompt)):
        check_entry(entries[at], scores[at - 1], prompt[at], 2)
    (bare_echo, bare_end) = bare.all
    assert bare_end == Finished(0, "length", 0, ())
    assert bare_echo.logprobs[0] is None and [e.top for e in bare_echo.logprobs[1:]] == [(), ()]
    assert abs(bare_echo.logprobs[2].logprob - float(full_pass(pretrained, prompt[:3])[1, prompt[2]])) < TOL


def test_a_bad_request_among_requests_of_every_option_fails_alone(
    pretrained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose draws raise (from its third on), decoding next to requests of other options that ask
    log-probabilities: it gets one Failed event; every other request finishes with its alone text and
    log-probabilities."""
    ids = pretrained.encode_prompt(PROMPT)
    good = {
        "penalties": SamplingParams(
            max_tokens=16, temperature=0.0, presence_penalty=1.0, frequency_penalty=0.5, logprobs=2
        ),
        "top_k": SamplingParams(max_tokens=16, temperature=1.0, top_k=8, seed=3, n=2, logprobs=1),
        "bias": SamplingParams(max_tokens=16, temperature=0.7, min_p=0.05, logit_bias={5: 3.0}, seed=4),
    }
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=16, stop_ids=[]) as engine:
        alone = {name: Events() for name in good}
        for name, params in good.items():
            engine.submit(ids, params, alone[name])
            alone[name].wait(params.n)
    failing_draws(monkeypatch, 3)
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=16, stop_ids=[])
    sinks = {name: Events() for name in good}
    victim = Events()
    for name, params in good.items():
        engine.submit(ids, params, sinks[name])
    engine.submit(ids, SamplingParams(max_tokens=16, temperature=0.8, seed=BAD_SEED, logprobs=2), victim)
    with engine:
        assert "probability tensor" in failure(victim)
        for name, params in good.items():
            sinks[name].wait(params.n)
    assert [type(e) for e in victim.all if not isinstance(e, Piece)] == [Failed]
    for name, params in good.items():
        assert sinks[name].texts == alone[name].texts, name
        for index in range(params.n):
            (got,) = sinks[name].of(Finished, index)
            (want,) = alone[name].of(Finished, index)
            assert got.ids == want.ids and len(got.logprobs) == len(want.logprobs)
            assert (len(got.logprobs) >= len(got.ids)) if params.logprobs is not None else not got.logprobs
            for a, b in zip(got.logprobs, want.logprobs):
                assert a.id == b.id and abs(a.logprob - b.logprob) < TOL
                assert [t for t, _ in a.top] == [t for t, _ in b.top]


def test_the_entries_of_a_token_cut_by_a_stop_string_ride_on_a_last_piece_without_text(pretrained: Any) -> None:
    """A stop string that is exactly the text of a generated token (nothing held back before it): the choice
    ends with no more text, and that token's entry still comes in a last Piece (of empty text), so a choice's
    Pieces carry every entry of its Finished."""
    ids = pretrained.encode_prompt("A")
    params = SamplingParams(max_tokens=24, temperature=0.0, logprobs=1)
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        full = Events()
        engine.submit(ids, params, full)
        tokens = list(full.wait().all[-1].ids)
        decode = pretrained.tokenizer.decode
        at = next(  # whole characters, not held back by the stream decoder, nor the stop's start by StopText
            k
            for k in range(len(tokens))
            if (piece := decode(tokens[k : k + 1]))
            and "\ufffd" not in piece
            and not (prefix := decode(tokens[:k])).endswith("\ufffd")
            and decode(tokens[: k + 1]) == prefix + piece
            and piece not in prefix
            and not any(prefix.endswith(piece[:j]) for j in range(1, len(piece)))
        )
        stop = decode(tokens[at : at + 1])
        cut = Events()
        engine.submit(ids, params.replace(stop=(stop,)), cut)
        cut.wait()
    (finished,) = cut.of(Finished)
    assert finished.reason == "stop" and finished.ids == tuple(tokens[: at + 1])
    assert cut.texts.get(0, "") == decode(tokens[:at])
    pieces = cut.of(Piece)
    assert pieces and pieces[-1].text == "" and [e.id for e in pieces[-1].logprobs] == [tokens[at]]
    assert [e for piece in pieces for e in piece.logprobs] == list(finished.logprobs)
