"""The engine's failure paths and bookkeeping that ``test_engine.py`` leaves unchecked (found by mutation
testing, ``tools/mutation.py --module engine``): what a failing request logs and is told, a merge into the
batch that fails (every request of that admission fails, the engine keeps serving), and more."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from test_engine import GREEDY, PROMPTS, Collector, failure, run, wait_until

from attnkit.models.generation import SamplingError
from attnkit.nn import DecoderCache
from attnkit.serve import Engine, Failed, Finished, Piece, Prompt, SamplingParams
from sampling_faults import BAD_SEED, failing_draws

PROBLEM = "probability tensor contains either inf, nan or element < 0"  # what failing_draws raises


@pytest.mark.parametrize("at_call", [1, 3])  # in the prefill, mid-decode
def test_a_failing_request_is_logged_with_its_traceback_and_told_why(
    pretrained: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, at_call: int
) -> None:
    failing_draws(monkeypatch, at_call)
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        victim = Collector()
        engine.submit(pretrained.encode_prompt("The old owl"), SamplingParams(seed=BAD_SEED), victim)
        assert failure(victim) == f"the request failed in the engine: RuntimeError: {PROBLEM}"
        assert wait_until(lambda: engine.stats()["live_rows"] == 0)  # its row left the batch at once
        assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    assert victim.events.empty()  # nothing after the Failed event: the failed row was not decoded on
    records = [r for r in caplog.records if r.name == "attnkit.serve.engine" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in records] == [f"request failed: RuntimeError: {PROBLEM}"]
    assert records[0].exc_info is not None and isinstance(records[0].exc_info[1], RuntimeError)


def test_a_merge_into_the_batch_that_fails_fails_that_admission_and_the_engine_goes_on(
    pretrained: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Three requests prefilled one by one (their shared prefill fails because of a marker id the first
    holds): the first starts the batch, merging the second's prefill raises. Then the batch may be broken:
    every request of that admission fails, the one not merged yet as well, each told "the engine failed";
    the engine then serves the next request."""
    marker = pretrained.tokenizer.vocab_size - 1
    model = pretrained.model

    def refuse_marker_in_a_batch(module: Any, args: Any) -> None:
        if args[0].shape[0] > 1 and bool((args[0] == marker).any()):
            raise RuntimeError("a batch the model cannot take")

    def broken_merge(self: DecoderCache, other: DecoderCache) -> None:
        raise RuntimeError("merge failed")

    long = SamplingParams(max_tokens=40, temperature=0.0)
    handle = model.register_forward_pre_hook(refuse_marker_in_a_batch)
    try:
        engine = Engine(model, pretrained.tokenizer, max_batch=8, stop_ids=[])
        sinks = [Collector() for _ in range(3)]
        engine.submit([*pretrained.encode_prompt(PROMPTS[0]), marker], long, sinks[0])
        for text, sink in zip(PROMPTS[1:3], sinks[1:]):
            engine.submit(pretrained.encode_prompt(text), long, sink)
        with monkeypatch.context() as patch:
            patch.setattr(DecoderCache, "merge", broken_merge)
            with engine:
                messages = [failure(sink) for sink in sinks]
                assert messages == ["the engine failed: RuntimeError: merge failed"] * 3
                assert wait_until(lambda: engine.stats()["live_rows"] == 0)
                patch.undo()
                assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    finally:
        handle.remove()
    for sink in sinks:  # one Failed event each, nothing after it
        assert sink.events.empty()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["the prefill of 3 requests failed (a batch the model cannot take); prefilling each alone"]


def test_a_failing_decoding_step_fails_every_live_request(pretrained: Any) -> None:
    """The shared step's forward pass raises while two requests decode together: both get one Failed event
    naming the error (no more events after it), and the engine serves the next request."""
    model = pretrained.model
    armed = {"on": False}

    def fail_a_step_of_two(module: Any, args: Any) -> None:
        if armed["on"] and tuple(args[0].shape) == (2, 1):
            armed["on"] = False
            raise RuntimeError("boom")

    handle = model.register_forward_pre_hook(fail_a_step_of_two)
    try:
        engine = Engine(model, pretrained.tokenizer, max_batch=8, stop_ids=[])
        sinks = [Collector(), Collector()]
        for text, sink in zip(PROMPTS[:2], sinks):
            engine.submit(pretrained.encode_prompt(text), SamplingParams(max_tokens=30, temperature=0.0), sink)
        armed["on"] = True
        with engine:
            assert [failure(sink) for sink in sinks] == ["the engine failed: RuntimeError: boom"] * 2
            assert wait_until(lambda: engine.stats()["live_rows"] == 0)
            assert engine.stats()["width"] == 0  # the batch is emptied
            assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    finally:
        handle.remove()
    assert all(sink.events.empty() for sink in sinks)


def prefill_shapes(model: Any) -> tuple[list[tuple[int, int]], Any]:
    """The ``[B, T]`` shapes of ``model``'s prefill passes (more than one position), and the hook's handle."""
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_hook(
        lambda module, args, output: shapes.append(tuple(args[0].shape)) if args[0].shape[1] > 1 else None
    )
    return shapes, hook


def test_requests_are_admitted_up_to_exactly_max_batch_rows_and_a_cancelled_waiting_one_never(
    pretrained: Any,
) -> None:
    """max_batch 3: a request of one choice and one of two, waiting together, fill the batch exactly and are
    prefilled in one pass; the next waits until they are done; one cancelled while it waited is never prefilled
    and gets no event."""
    ids = [pretrained.encode_prompt(text) for text in PROMPTS[:3]]
    shapes, hook = prefill_shapes(pretrained.model)
    try:
        engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=3, stop_ids=[])
        sinks = [Collector() for _ in range(4)]
        params = [GREEDY, SamplingParams(max_tokens=24, seed=5, n=2), GREEDY]
        gone = engine.submit(pretrained.encode_prompt(PROMPTS[3]), GREEDY, sinks[3])
        gone.cancel()
        for prompt, param, sink in zip(ids, params, sinks):
            engine.submit(prompt, param, sink)
        assert engine.stats()["waiting"] == 4
        with engine:
            sinks[2].wait()
            sinks[1].wait(2)
            sinks[0].wait()
    finally:
        hook.remove()
    assert shapes == [(2, max(len(ids[0]), len(ids[1]))), (1, len(ids[2]))]
    assert engine.stats()["peak_rows"] == 3 and engine.stats()["cancelled_rows"] == 0
    assert sinks[3].events.empty()


def test_a_lone_request_whose_prefill_fails_is_failed_without_a_retry(
    pretrained: Any, caplog: pytest.LogCaptureFixture
) -> None:
    marker = pretrained.tokenizer.vocab_size - 1
    calls = {"n": 0}

    def refuse_marker(module: Any, args: Any) -> None:
        if bool((args[0] == marker).any()):
            calls["n"] += 1
            raise RuntimeError("a prompt the model cannot take")

    handle = pretrained.model.register_forward_pre_hook(refuse_marker)
    try:
        with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
            victim = Collector()
            engine.submit([*pretrained.encode_prompt("A"), marker], GREEDY, victim)
            assert failure(victim) == "the request failed in the engine: RuntimeError: a prompt the model cannot take"
            assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
    finally:
        handle.remove()
    assert calls["n"] == 1
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # no "prefilling each alone"
    assert victim.events.empty()


def test_a_sink_that_raises_does_not_stop_the_engine_and_is_logged_at_debug(
    pretrained: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="attnkit.serve.engine")
    seen: list[Any] = []

    def broken_sink(event: Any) -> None:
        seen.append(event)
        raise RuntimeError("the event loop is closed")

    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        engine.submit(
            pretrained.encode_prompt("The old owl"), SamplingParams(max_tokens=5, temperature=0.0), broken_sink
        )
        assert run(engine, pretrained.encode_prompt("A"), GREEDY).reasons[0] in ("stop", "length")
        assert wait_until(lambda: engine.stats()["live_rows"] == 0)
    assert isinstance(seen[-1], Finished) and seen[-1].tokens == 5
    records = [r for r in caplog.records if r.name == "attnkit.serve.engine" and r.levelno == logging.DEBUG]
    assert [r.getMessage() for r in records] == [f"could not deliver {event!r}" for event in seen]
    assert all(r.exc_info is not None and str(r.exc_info[1]) == "the event loop is closed" for r in records)


def test_a_request_done_at_its_first_token_leaves_before_any_decoding_step_and_steps_are_counted(
    pretrained: Any,
) -> None:
    """max_tokens 1: the prefill's token is the whole answer, the row leaves at once, no step is decoded;
    max_tokens 5: four steps."""
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        got = run(engine, pretrained.encode_prompt("The old owl"), SamplingParams(max_tokens=1, temperature=0.0))
        assert got.reasons[0] == "length" and got.tokens[0] == 1
        assert wait_until(lambda: engine.stats()["live_rows"] == 0)
        assert engine.stats()["steps"] == 0 and engine.stats()["width"] == 0
        got = run(engine, pretrained.encode_prompt("The old owl"), SamplingParams(max_tokens=5, temperature=0.0))
        assert got.tokens[0] == 5
        assert engine.stats()["steps"] == 4  # the first token is the prefill's, then one step per token


def test_check_takes_each_edge_and_refuses_past_it_saying_what_was_wrong(pretrained: Any) -> None:
    """Engine.check at the edges of what depends on the engine (the options themselves are checked when the
    SamplingParams is made): n up to max_batch, token ids of logit_bias and stop_ids in the vocabulary,
    max_tokens 0 only with the prompt's log-probabilities, a prompt of context - 1 tokens at most, ids in
    [0, vocab) (never bools); each refusal a SamplingError naming its field where it is an option."""
    engine = Engine(pretrained.model, pretrained.tokenizer, max_batch=2, context=8)  # not started: check only
    vocab = pretrained.model.config.vocab_size
    engine.check([0, vocab - 1, 5, 6, 7, 8, 9], SamplingParams(n=2, stop=("a", "bc")))
    with pytest.raises(SamplingError, match=r"^n must be in \[1, 2\] \(the server's --max-batch\), got 3$") as err:
        engine.check([1], SamplingParams(n=3))
    assert err.value.field == "n"
    engine.check([1], SamplingParams(logit_bias={vocab - 1: 5.0}, stop_ids=(vocab - 1,)))
    for name, params in (
        ("logit_bias", SamplingParams(logit_bias={vocab: 5.0})),
        ("stop_ids", SamplingParams(stop_ids=(0, vocab))),
    ):
        with pytest.raises(SamplingError, match=rf"^{name}: token id {vocab} is past the vocabulary") as err:
            engine.check([1], params)
        assert err.value.field == name
    with pytest.raises(SamplingError, match=r"^max_tokens must be an int in \[1, .*0 only with .*got 0$") as err:
        engine.check([1], SamplingParams(max_tokens=0))
    assert err.value.field == "max_tokens"
    engine.check([1], SamplingParams(max_tokens=0), prompt_logprobs=True)
    with pytest.raises(TypeError, match=r"^params must be an attnkit\.models\.generation\.SamplingParams, got dict$"):
        engine.check([1], {"max_tokens": 3})  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(ValueError) as err:
        engine.check([], SamplingParams())
    assert str(err.value) == "the prompt has no tokens"
    with pytest.raises(ValueError) as err:
        engine.check([1] * 8, SamplingParams())
    assert str(err.value) == (
        "the prompt has 8 tokens but the model's context is 8 tokens (prompt and completion together): "
        "shorten the prompt"
    )
    for bad in (True, -1, vocab, "1"):
        with pytest.raises(ValueError) as err:
            engine.check([1, bad], SamplingParams())  # type: ignore[list-item]  # wrong on purpose
        assert str(err.value) == f"prompt token ids must be ints in [0, {vocab}) (the model's vocabulary), got {bad!r}"


def _events(engine: Engine, prompt: list[int], params: SamplingParams, **kwargs: Any) -> list[Any]:
    """Every event of a one-choice request, up to its Finished (or Failed)."""
    events: list[Any] = []
    done = threading.Event()

    def sink(event: Any) -> None:
        events.append(event)
        if isinstance(event, Finished | Failed):
            done.set()

    engine.submit(prompt, params, sink, **kwargs)
    assert done.wait(60)
    return events


def test_a_choice_ended_by_its_length_sends_its_last_entries_on_its_last_piece(pretrained: Any) -> None:
    """``max_tokens`` reached: the entries not sent yet ride on the last Piece, so that a choice's Pieces carry
    every entry of its Finished, in order."""
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        events = _events(
            engine, pretrained.encode_prompt("A"), SamplingParams(max_tokens=3, temperature=0.0, logprobs=1)
        )
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "length" and len(finished.logprobs) == 3
    pieces = [e for e in events if isinstance(e, Piece)]
    assert [entry for piece in pieces for entry in piece.logprobs] == list(finished.logprobs)


def test_the_prompts_log_probabilities_come_first_only_when_asked_for(pretrained: Any) -> None:
    prompt = pretrained.encode_prompt("The old owl")
    with Engine(pretrained.model, pretrained.tokenizer, stop_ids=[]) as engine:
        echoed = _events(engine, prompt, SamplingParams(max_tokens=0), prompt_logprobs=True)
        plain = _events(engine, prompt, SamplingParams(max_tokens=2, temperature=0.0))
    assert [type(e) for e in echoed] == [Prompt, Finished] and len(echoed[0].logprobs) == len(prompt)
    assert echoed[1] == Finished(0, "length", 0, ())
    assert Prompt not in {type(e) for e in plain} and isinstance(plain[-1], Finished)
