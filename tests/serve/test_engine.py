"""The continuous-batching engine in-process (no HTTP): a request that joins a running batch gets the
tokens it gets alone (greedy and seeded sampling), stop strings and ids, limits, cancelling, failures."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
import torch

from attnkit.models.generation import SamplingError
from attnkit.serve import Engine, Failed, Finished, Piece, SamplingParams
from sampling_faults import BAD_SEED, failing_draws

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


def failure(sink: Collector, timeout: float = 60) -> str:
    """The message of ``sink``'s :class:`Failed` event (the pieces before it skipped)."""
    while True:
        event = sink.events.get(timeout=timeout)
        if isinstance(event, Failed):
            return event.message
        assert not isinstance(event, Finished), f"the request finished instead of failing: {event}"


def wait_until(check: Any, timeout: float = 60) -> bool:
    deadline = threading.Event()
    for _ in range(int(timeout / 0.02)):
        if check():
            return True
        deadline.wait(0.02)
    return bool(check())


def test_trimming_keeps_continuous_traffic_within_the_context(pretrained: Any) -> None:
    """A chain of requests where each joins while the one before is still decoding, so the batch is never
    empty: without trimming its leading all-padding columns, the batch would grow one column per step,
    past the model's context of 128 positions, and the requests would fail. With it, the batch is never
    wider than its longest live row, and each request gets its alone text."""
    params = SamplingParams(max_tokens=40, temperature=0.0)
    prompts = [pretrained.encode_prompt(text) for text in PROMPTS * 2]  # 8 requests x 40 tokens, 20 overlapping
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=4, stop_ids=[]) as engine:
        alone = [run(engine, ids, params).texts for ids in prompts]
        widths: list[int] = []
        sinks = [Collector() for _ in prompts]

        def chained(k: int) -> Any:
            events = {"n": 0}

            def sink(event: Any) -> None:
                sinks[k](event)
                widths.append(engine.stats()["width"])
                events["n"] += 1
                due = events["n"] == 20 or (isinstance(event, Finished) and events["n"] < 20)  # never a hang
                if due and k + 1 < len(prompts):
                    engine.submit(prompts[k + 1], params, chained(k + 1))  # the next one joins mid-decode

            return sink

        engine.submit(prompts[0], params, chained(0))
        got = [sink.wait().texts for sink in sinks]
    assert got == alone
    longest = max(map(len, prompts)) + params.max_tokens  # type: ignore[operator]  # max_tokens is set
    assert max(widths) <= longest < engine.context < 20 * len(prompts)


def test_a_request_cancelled_mid_decode_leaves_the_batch_and_the_others_go_on(engine: Engine, pretrained: Any) -> None:
    """Cancelled after admission, while it decodes next to another request: its row leaves the batch at
    the next step (the batch shrinks to the other row, which finishes with its alone text), and it gets
    no more events."""
    long = SamplingParams(max_tokens=80, temperature=0.0)
    other_ids = pretrained.encode_prompt("The quiet fox")
    alone = run(engine, other_ids, long).texts
    rows_after_cancel: list[int] = []
    cancelled = threading.Event()
    other = Collector()

    def watch(event: Any) -> None:  # the other request's events (engine thread)
        other(event)
        if cancelled.is_set():
            rows_after_cancel.append(engine.stats()["live_rows"])

    holder: dict[str, Any] = {}
    ready = threading.Event()
    victim = Collector()

    def cancel_at_first_piece(event: Any) -> None:  # runs on the engine thread, mid-decode
        victim(event)
        if isinstance(event, Piece) and not cancelled.is_set():
            assert ready.wait(60)
            holder["request"].cancel()
            cancelled.set()

    engine.submit(other_ids, long, watch)
    holder["request"] = engine.submit(pretrained.encode_prompt("The old owl"), long, cancel_at_first_piece)
    ready.set()
    assert other.wait().texts == alone
    assert cancelled.is_set()
    assert rows_after_cancel and rows_after_cancel[-1] == 1  # the cancelled row left while the other decoded
    assert wait_until(lambda: engine.stats()["live_rows"] == 0)
    assert engine.stats()["cancelled_rows"] == 1
    events = list(victim.events.queue)
    assert not any(isinstance(e, Finished | Failed) for e in events)
    assert sum(isinstance(e, Piece) for e in events) == 1  # nothing after the cancel


@pytest.mark.parametrize("at_call", [1, 4])  # in the shared prefill, and mid-decode
def test_a_request_whose_row_fails_fails_alone(pretrained: Any, monkeypatch: pytest.MonkeyPatch, at_call: int) -> None:
    """One request's sampling raises (in the prefill it shares with others, or mid-decode next to a
    stream already in progress): that request gets a Failed event, and every other request, greedy or
    seeded, finishes with the text it gets alone."""
    greedy = SamplingParams(max_tokens=40, temperature=0.0)
    seeded = SamplingParams(max_tokens=30, temperature=1.0, top_p=0.9, seed=7, n=2)
    bad = SamplingParams(max_tokens=30, temperature=0.8, seed=BAD_SEED, n=2)
    texts = ["The quiet fox", "It was late."]
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as alone_engine:
        alone_greedy = run(alone_engine, pretrained.encode_prompt(texts[0]), greedy).texts
        alone_seeded = run(alone_engine, pretrained.encode_prompt(texts[1]), seeded).texts
    failing_draws(monkeypatch, at_call)
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[])
    streams, victim = [Collector(), Collector()], Collector()
    engine.submit(pretrained.encode_prompt(texts[0]), greedy, streams[0])
    engine.submit(pretrained.encode_prompt(texts[1]), seeded, streams[1])
    engine.submit(pretrained.encode_prompt("The old owl"), bad, victim)
    with engine:  # started now: the three requests are prefilled together, then decoded as one batch
        assert "probability tensor" in failure(victim)
        assert streams[0].wait().texts == alone_greedy
        assert streams[1].wait(2).texts == alone_seeded
        assert wait_until(lambda: engine.stats()["live_rows"] == 0)
        assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    assert not any(isinstance(e, Failed) for e in list(victim.events.queue))  # one Failed event, no more


def test_a_prefill_that_fails_because_of_one_request_fails_only_that_request(pretrained: Any) -> None:
    """The shared prefill's forward pass raises because of one prompt: the engine prefills each request
    alone, so only that request fails and the others get their alone texts."""
    marker = pretrained.tokenizer.vocab_size - 1  # an id none of the other prompts holds
    good = [pretrained.encode_prompt(text) for text in PROMPTS[:3]]
    assert not any(marker in ids for ids in good)
    model = pretrained.model

    def refuse_marker(module: Any, args: Any) -> None:
        if bool((args[0] == marker).any()):
            raise RuntimeError("a prompt the model cannot take")

    with Engine(model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as alone_engine:
        alone = [run(alone_engine, ids, GREEDY).texts for ids in good]
    handle = model.register_forward_pre_hook(refuse_marker)
    try:
        engine = Engine(model, pretrained.tokenizer, max_batch=8, stop_ids=[])
        sinks, victim = [Collector() for _ in good], Collector()
        for ids, sink in zip(good[:2], sinks):
            engine.submit(ids, GREEDY, sink)
        engine.submit([*good[0], marker], GREEDY, victim)
        engine.submit(good[2], GREEDY, sinks[2])
        with engine:
            assert "cannot take" in failure(victim)
            assert [sink.wait().texts for sink in sinks] == alone
    finally:
        handle.remove()


def test_sampling_options_are_refused_naming_the_field(engine: Engine) -> None:
    """The engine's parameters are the one SamplingParams, checked when made: a seed past 2**64 or a temperature
    that would overflow the logits never reach the engine; what depends on the engine (max_tokens 0 without the
    prompt's log-probabilities, a prompt id outside the vocabulary) is refused by submit before it is queued."""
    with pytest.raises(SamplingError, match=r"^seed must be an integer in \[0, 2\*\*64\).*got 18446744073709551616"):
        SamplingParams(seed=2**64)
    with pytest.raises(SamplingError, match=r"^temperature must be .*>= 0.01.*got 1.7e-39"):
        SamplingParams(temperature=1.7e-39)
    with pytest.raises(SamplingError, match=r"^max_tokens must be an int in \[1, "):
        engine.submit([1, 2], SamplingParams(max_tokens=0), Collector())
    with pytest.raises(ValueError, match="prompt token ids must be ints in"):
        engine.submit([1, 10**6], SamplingParams(), Collector())
    assert engine.stats()["waiting"] == 0


def test_a_request_whose_stop_handling_fails_fails_alone(pretrained: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error while one request's text is decoded or checked for stop strings (here: its StopText raises
    at its third token) ends that request only; a stream decoding next to it gets its alone text."""
    import attnkit.serve.engine as engine_module

    class Fragile(engine_module.StopText):
        def add(self, piece: str) -> tuple[str, bool]:
            self.calls = getattr(self, "calls", 0) + 1
            if "@@" in self.stops and self.calls == 3:
                raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
            return super().add(piece)

    long = SamplingParams(max_tokens=40, temperature=0.0)
    ids = pretrained.encode_prompt("The quiet fox")
    with Engine(pretrained.model, pretrained.tokenizer, max_batch=8, stop_ids=[]) as engine:
        alone = run(engine, ids, long).texts
        monkeypatch.setattr(engine_module, "StopText", Fragile)
        stream, victim = Collector(), Collector()
        engine.submit(ids, long, stream)
        engine.submit(pretrained.encode_prompt("The old owl"), SamplingParams(max_tokens=40, stop=("@@",)), victim)
        assert "UnicodeDecodeError" in failure(victim)
        assert stream.wait().texts == alone
