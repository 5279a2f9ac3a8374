"""The continuous-batching engine in-process (no HTTP): a request that joins a running batch gets the
tokens it gets alone (greedy and seeded sampling), stop strings and ids, limits, cancelling, failures."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
import torch

from attnkit.serve import Engine, Failed, Finished, Piece, SamplingParams

GREEDY = SamplingParams(max_tokens=24, temperature=0.0)


class Collector:
    """The events of one request, by choice."""

    def __init__(self) -> None:
        self.events: queue.Queue[Any] = queue.Queue()
        self.texts: dict[int, str] = {}
        self.reasons: dict[int, str] = {}
        self.tokens: dict[int, int] = {}

    def __call__(self, event: Any) -> None:
        self.events.put(event)

    def wait(self, n: int = 1, timeout: float = 60) -> Collector:
        while len(self.reasons) < n:
            event = self.events.get(timeout=timeout)
            if isinstance(event, Failed):
                raise AssertionError(event.message)
            if isinstance(event, Piece):
                self.texts[event.index] = self.texts.get(event.index, "") + event.text
            elif isinstance(event, Finished):
                self.reasons[event.index] = event.reason
                self.tokens[event.index] = event.tokens
        return self


@pytest.fixture
def engine(pretrained: Any) -> Any:
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=pretrained.eos_ids) as eng:
        yield eng


def run(engine: Engine, prompt: list[int], params: SamplingParams) -> Collector:
    done = Collector()
    engine.submit(prompt, params, done)
    return done.wait(params.n)


PROMPTS = ["The old owl", "It was late.", "The big dog sat on the roof and looked at", "A"]


def test_greedy_alone_equals_pretrained_generate(engine: Engine, pretrained: Any) -> None:
    for text in PROMPTS:
        got = run(engine, pretrained.encode_prompt(text), GREEDY)
        assert got.texts.get(0, "") == pretrained.generate(text, 24)


def test_requests_joining_a_running_batch_get_their_alone_tokens(engine: Engine, pretrained: Any) -> None:
    long = SamplingParams(max_tokens=60, temperature=0.0)
    seeded = SamplingParams(max_tokens=30, temperature=1.0, top_p=0.9, seed=7, n=2)
    alone = {text: run(engine, pretrained.encode_prompt(text), GREEDY).texts for text in PROMPTS}
    alone_long = run(engine, pretrained.encode_prompt("The quiet fox"), long).texts
    alone_seeded = run(engine, pretrained.encode_prompt("The old owl"), seeded).texts
    assert alone_seeded[0] != alone_seeded[1]  # two choices, two draws

    gate = threading.Event()
    started = Collector()

    def first_piece(event: Any) -> None:
        started(event)
        gate.set()

    engine.submit(pretrained.encode_prompt("The quiet fox"), long, first_piece)
    assert gate.wait(60)  # the long request is decoding: the others join it mid-batch
    joined = {text: Collector() for text in PROMPTS}
    for text, sink in joined.items():
        engine.submit(pretrained.encode_prompt(text), GREEDY, sink)
    sampled = Collector()
    engine.submit(pretrained.encode_prompt("The old owl"), seeded, sampled)
    for text, sink in joined.items():
        assert sink.wait().texts == alone[text]
    assert sampled.wait(2).texts == alone_seeded
    assert started.wait().texts == alone_long
    assert engine.stats()["steps"] > 0


def test_stop_string_cuts_the_text_and_nothing_past_it_is_sent(engine: Engine, pretrained: Any) -> None:
    ids = pretrained.encode_prompt("The old owl")
    full = run(engine, ids, SamplingParams(max_tokens=40, temperature=0.0)).texts[0]
    stop = full[5:8]
    assert stop and full.find(stop) >= 0
    got = run(engine, ids, SamplingParams(max_tokens=40, temperature=0.0, stop=(stop,)))
    assert got.texts.get(0, "") == full[: full.find(stop)]
    assert got.reasons[0] == "stop"


def test_stop_id_ends_a_choice_and_is_not_text(engine: Engine, pretrained: Any) -> None:
    ids = pretrained.encode_prompt("It was")
    tokens: list[int] = []
    out = pretrained.model.generate(torch.tensor([ids]), 10, temperature=0.0, stop_at_eos=False)
    tokens = out[0, len(ids) :].tolist()
    third = tokens[2]
    first_at = tokens.index(third)
    got = run(engine, ids, SamplingParams(max_tokens=10, temperature=0.0, stop_ids=(third,)))
    assert got.reasons[0] == "stop" and got.tokens[0] == first_at + 1
    assert got.texts.get(0, "") == pretrained.tokenizer.decode(tokens[:first_at])


def test_max_tokens_and_context_end_with_length(engine: Engine, pretrained: Any) -> None:
    ids = pretrained.encode_prompt("The old owl")
    got = run(engine, ids, SamplingParams(max_tokens=3, temperature=0.0, stop_ids=()))
    if got.reasons[0] == "length":
        assert got.tokens[0] == 3
    context = engine.context
    long = (ids * context)[: context - 2]
    big = Engine(pretrained.model, pretrained.tokenizer, stop_ids=[])
    with big:
        got = run(big, long, SamplingParams(max_tokens=None, temperature=0.0))
    assert got.reasons[0] == "length" and got.tokens[0] == 2
    with pytest.raises(ValueError, match="context"):
        engine.check(ids * context, GREEDY)


def test_cancelled_request_leaves_the_batch(engine: Engine, pretrained: Any) -> None:
    got = Collector()
    request = engine.submit(pretrained.encode_prompt("The old owl"), SamplingParams(max_tokens=100, temperature=0), got)
    request.cancel()
    run(engine, pretrained.encode_prompt("A"), GREEDY)  # the engine went on and is idle again
    for _ in range(100):
        if engine.stats()["live_rows"] == 0:
            break
        threading.Event().wait(0.05)
    assert engine.stats() == {**engine.stats(), "live_rows": 0, "waiting": 0}
    assert not any(isinstance(e, Finished) for e in list(got.events.queue))


def test_a_failing_step_fails_its_requests_and_the_engine_keeps_serving(pretrained: Any) -> None:
    calls = {"n": 0}
    model = pretrained.model

    def fail_once(module: Any, args: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")

    handle = model.register_forward_pre_hook(fail_once)
    try:
        with Engine(model, pretrained.tokenizer, stop_ids=[]) as eng:
            failed = Collector()
            eng.submit(pretrained.encode_prompt("The old owl"), GREEDY, failed)
            event = failed.events.get(timeout=60)
            while isinstance(event, Piece):
                event = failed.events.get(timeout=60)
            assert isinstance(event, Failed) and "boom" in event.message
            assert run(eng, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    finally:
        handle.remove()


def test_bad_arguments_are_refused(pretrained: Any) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Engine(pretrained.model, pretrained.tokenizer, max_batch=0)
    eng = Engine(pretrained.model, pretrained.tokenizer, max_batch=2)
    with pytest.raises(ValueError, match="n must be"):
        eng.check([1, 2], SamplingParams(n=3))
    with pytest.raises(ValueError, match="no tokens"):
        eng.check([], SamplingParams())


def test_requests_waiting_together_are_prefilled_in_one_pass_and_get_their_alone_tokens(pretrained: Any) -> None:
    """Requests queued before a step are prefilled as one left-padded batch (one forward pass over all
    prompts); each still gets the tokens it gets alone, a seeded request of n=2 included."""
    seeded = SamplingParams(max_tokens=20, temperature=1.0, top_p=0.9, seed=3, n=2)
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=pretrained.eos_ids) as alone_engine:
        alone = [run(alone_engine, pretrained.encode_prompt(text), GREEDY).texts for text in PROMPTS]
        alone_seeded = run(alone_engine, pretrained.encode_prompt("It was late."), seeded).texts
    prefills: list[tuple[int, int]] = []
    hook = pretrained.model.register_forward_hook(
        lambda module, args, output: prefills.append(tuple(args[0].shape)) if args[0].shape[1] > 1 else None
    )
    try:
        engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=pretrained.eos_ids)
        sinks = [Collector() for _ in PROMPTS]
        for text, sink in zip(PROMPTS, sinks):
            engine.submit(pretrained.encode_prompt(text), GREEDY, sink)
        sampled = Collector()
        engine.submit(pretrained.encode_prompt("It was late."), seeded, sampled)
        with engine:  # started only now: all five requests are waiting together
            assert [sink.wait().texts for sink in sinks] == alone
            assert sampled.wait(2).texts == alone_seeded
    finally:
        hook.remove()
    longest = max(len(pretrained.encode_prompt(text)) for text in PROMPTS)
    assert prefills == [(5, longest)]
    assert engine.stats()["peak_rows"] == 6
