"""The continuous batch (``models/generation/batch.py``), driven directly: every row decoded in a batch that others
join and leave gets the tokens, log-probabilities and ends it gets alone (greedy, seeded, every row its own
options, a stop id, the context's limit); a request whose choice or prefill raises fails alone; a request cancelled
or ended by its caller leaves; a failing lone prefill never loses the prefix-cache hits admitted with it."""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from attnkit.models.generation import ContinuousBatch, PrefixCache, SamplingParams, Update
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from sampling_faults import BAD_SEED, failing_draws

V = 40
CONTEXT = 24


@dataclass(eq=False)
class Req:
    prompt: list[int]
    params: SamplingParams
    prompt_logprobs: bool = False
    cancelled: bool = False


@pytest.fixture(scope="module")
def model() -> LanguageModel:
    torch.manual_seed(0)
    config = LanguageModelConfig(
        vocab_size=V, d_model=32, num_heads=4, num_kv_heads=2, num_layers=2, dim_feedforward=64, dropout=0.0,
        positional="rotary", max_len=64,
    )  # fmt: skip
    model = LanguageModel(config).eval()
    with torch.no_grad():  # larger logits than the N(0, 0.02) init: distinct greedy tokens, no near-ties
        model.token_embedding.weight.mul_(10)
    return model


def new_batch(model: LanguageModel, **kw: Any) -> ContinuousBatch[Req]:
    return ContinuousBatch(model, V, context=CONTEXT, **kw)


class Record:
    """Every row's tokens, log-probabilities and end, and the failed requests, from a batch's updates."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.logprobs: dict[tuple[int, int], list[float]] = defaultdict(list)
        self.ends: dict[tuple[int, int], str] = {}
        self.failed: dict[int, str] = {}

    def add(self, update: Update[Req]) -> None:
        assert update.broken is None
        for request, err in update.failed:
            assert id(request) not in self.failed  # one failure per request
            self.failed[id(request)] = str(err)
        for new in update.tokens:
            key = (id(new.row.request), new.row.index)
            assert key not in self.ends and id(new.row.request) not in self.failed
            self.tokens[key].append(new.id)
            if new.logprob is not None:
                assert new.logprob.id == new.id
                self.logprobs[key].append(new.logprob.logprob)
            if new.end is not None:
                self.ends[key] = new.end


def run(batch: ContinuousBatch[Req], schedule: list[list[Req]]) -> Record:
    """``schedule[k]``: the requests admitted before step ``k`` (as the server's engine does: admit, drop, step,
    drop); steps go on until every row left."""
    record = Record()
    k = 0
    while k < len(schedule) or batch.rows:
        if k < len(schedule) and schedule[k]:
            record.add(batch.admit(schedule[k]))
            batch.drop()
        if batch.rows:
            record.add(batch.step())
            batch.drop()
        k += 1
    assert batch.width == 0 and not batch.rows
    return record


def alone(model: LanguageModel, requests: list[Req]) -> Record:
    record = Record()
    for request in requests:
        one = run(new_batch(model), [[request]])
        for attr in ("tokens", "logprobs", "ends", "failed"):
            getattr(record, attr).update(getattr(one, attr))
    return record


def requests() -> list[Req]:
    return [
        Req([1, 5, 9], SamplingParams(max_tokens=8, temperature=0.0, logprobs=2)),
        Req([1, 7, 3, 22, 8, 30, 4], SamplingParams(max_tokens=10, temperature=1.0, top_k=10, seed=3, n=2, logprobs=0)),
        Req([1, 12], SamplingParams(max_tokens=9, temperature=0.0, repetition_penalty=1.3)),
        Req([1], SamplingParams(max_tokens=7, temperature=0.8, min_p=0.05, seed=5)),
        Req([2] * 18, SamplingParams(temperature=0.0)),  # no max_tokens: ends at the context (24 - 18 = 6 tokens)
    ]


def test_rows_joining_and_leaving_a_running_batch_get_their_alone_tokens(model: LanguageModel) -> None:
    reqs = requests()
    want = alone(model, reqs)
    assert want.tokens[(id(reqs[1]), 0)] != want.tokens[(id(reqs[1]), 1)]  # two choices, two draws
    assert len(want.tokens[(id(reqs[4]), 0)]) == CONTEXT - 18 and want.ends[(id(reqs[4]), 0)] == "length"
    # a stop id: the third token of the greedy row ends it there ("stop"), alone and batched
    stop = want.tokens[(id(reqs[0]), 0)][2]
    first = want.tokens[(id(reqs[0]), 0)].index(stop)
    stopped = Req([1, 5, 9], SamplingParams(max_tokens=8, temperature=0.0, stop_ids=(stop,)))
    want.tokens[(id(stopped), 0)] = want.tokens[(id(reqs[0]), 0)][: first + 1]
    want.ends[(id(stopped), 0)] = "stop"
    batch = new_batch(model)
    got = run(batch, [[reqs[0], reqs[1]], [], [reqs[2], stopped, reqs[3]], [reqs[4]]])  # joining mid-decode
    assert got.tokens == want.tokens and got.ends == want.ends and not got.failed
    assert got.logprobs.keys() == want.logprobs.keys() == {(id(reqs[0]), 0), (id(reqs[1]), 0), (id(reqs[1]), 1)}
    for key, lps in want.logprobs.items():
        assert got.logprobs[key] == pytest.approx(lps, abs=1e-5)
    assert batch.peak_rows == 7 and batch.cancelled_rows == 0
    joined = {id(reqs[0]): 0, id(reqs[1]): 0, id(reqs[2]): 2, id(stopped): 2, id(reqs[3]): 2, id(reqs[4]): 3}
    # a row's first token comes from its prefill, each later one from a step
    assert batch.steps == max(joined[key[0]] + len(ids) - 1 for key, ids in want.tokens.items())


def test_the_batched_first_and_later_tokens_are_the_models_own(model: LanguageModel) -> None:
    """Greedy rows batched with others equal the model's own ``generate`` of each prompt."""
    prompts = [[1, 5, 9], [1, 7, 3, 22, 8, 30, 4], [3]]
    reqs = [Req(p, SamplingParams(max_tokens=6, temperature=0.0)) for p in prompts]
    got = run(new_batch(model), [reqs[:2], [reqs[2]]])
    for request in reqs:
        ids = model.generate(torch.tensor([request.prompt]), 6, temperature=0.0, stop_at_eos=False)
        assert got.tokens[(id(request), 0)] == ids[0, len(request.prompt) :].tolist()


@pytest.mark.parametrize("at_call", [1, 3])
def test_a_request_whose_choice_raises_fails_alone(
    model: LanguageModel, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, at_call: int
) -> None:
    """Its rows end at once (never another token) and leave the batch; every other row, greedy or seeded (drawn
    before the bad one in the same call: its generator is set back), gets its alone tokens."""
    reqs = requests()[:3]
    bad = Req([1, 4, 4], SamplingParams(max_tokens=8, temperature=0.8, seed=BAD_SEED, n=2))
    want = alone(model, reqs)
    failing_draws(monkeypatch, at_call)
    batch = new_batch(model)
    got = run(batch, [[reqs[0], reqs[1], bad, reqs[2]]])
    assert got.failed == {id(bad): "probability tensor contains either inf, nan or element < 0"}
    assert {key: ids for key, ids in got.tokens.items() if key[0] != id(bad)} == want.tokens
    assert [len(got.tokens.get((id(bad), i), [])) for i in range(2)] == [at_call - 1] * 2  # none after the failure
    assert got.ends == want.ends
    assert [r for r in caplog.records if r.levelno == logging.WARNING] and batch.peak_rows == 6


def test_a_prefill_that_raises_for_one_request_is_retried_alone_and_fails_only_it(
    model: LanguageModel, caplog: pytest.LogCaptureFixture
) -> None:
    marker = V - 1
    reqs = requests()[:3]
    want = alone(model, reqs)

    def refuse_marker(module: Any, args: Any) -> None:
        if bool((args[0] == marker).any()):
            raise RuntimeError("a prompt the model cannot take")

    handle = model.register_forward_pre_hook(refuse_marker)
    try:
        victim = Req([1, marker], SamplingParams(max_tokens=4))
        got = run(new_batch(model), [[reqs[0], victim, *reqs[1:]]])
    finally:
        handle.remove()
    assert got.failed == {id(victim): "a prompt the model cannot take"}
    assert got.tokens == want.tokens and got.ends == want.ends
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["the prefill of 4 requests failed (a prompt the model cannot take); prefilling each alone"]


def test_a_lone_prefill_that_fails_keeps_the_prefix_cache_hits_admitted_with_it(model: LanguageModel) -> None:
    """A prompt that starts with a cached prefix is prefilled alone, from it; the one request left, whose prefill
    raises, fails alone (no retry: it was alone) and the hit still joins and decodes."""
    marker = V - 1
    prefix = [1, 5, 9, 13, 17, 21, 25, 29]
    cache = PrefixCache(2**20, block=4)
    batch = new_batch(model, prefix_cache=cache)
    hit = Req([*prefix, 3, 3], SamplingParams(max_tokens=4, temperature=0.0))
    want = alone(model, [hit])
    run(batch, [[Req([*prefix, 2], SamplingParams(max_tokens=1))]])  # fills the cache
    handle = model.register_forward_pre_hook(
        lambda module, args: (_ for _ in ()).throw(RuntimeError("no")) if bool((args[0] == marker).any()) else None
    )
    try:
        victim = Req([1, marker], SamplingParams(max_tokens=4))
        got = run(batch, [[hit, victim]])
    finally:
        handle.remove()
    assert cache.hits == 1 and got.failed == {id(victim): "no"}
    assert got.tokens == want.tokens and got.ends == want.ends


def test_cancelled_requests_and_rows_their_caller_ended_leave_and_clear_names_the_unfinished(
    model: LanguageModel,
) -> None:
    batch = new_batch(model)
    a, b, c = (Req([1, i], SamplingParams(max_tokens=20, temperature=0.0, n=2)) for i in (3, 4, 5))
    batch.admit([a, b, c])
    batch.step()
    b.cancelled = True
    batch.end(c, 1)  # choice 1 of c ended by its caller (a stop string)
    tokens = batch.step().tokens  # neither b's rows nor c's second get a token
    assert [(new.row.request, new.row.index) for new in tokens] == [(a, 0), (a, 1), (c, 0)]
    batch.drop()
    assert [(row.request, row.index) for row in batch.rows] == [(a, 0), (a, 1), (c, 0)]
    assert batch.cancelled_rows == 2  # b's two rows; c's ended one is not counted
    batch.end(a)
    assert batch.clear() == [c] and not batch.rows and batch.width == 0


def test_step_on_an_empty_batch_and_a_bad_context_or_vocabulary_are_refused(model: LanguageModel) -> None:
    with pytest.raises(RuntimeError, match="the batch has no rows to decode: admit requests first"):
        new_batch(model).step()
    for bad in (0, True, 2.5):
        with pytest.raises(ValueError, match=rf"^context must be an int >= 1 \(tokens a row may hold\), got {bad!r}$"):
            ContinuousBatch(model, V, context=bad)  # type: ignore[arg-type]  # wrong on purpose
        with pytest.raises(
            ValueError, match=rf"^vocab_size must be an int >= 1 \(the model's vocabulary\), got {bad!r}$"
        ):
            ContinuousBatch(model, bad, context=8)  # type: ignore[arg-type]  # wrong on purpose


def test_a_request_the_batch_cannot_take_fails_alone_saying_why(model: LanguageModel) -> None:
    good = requests()[0]
    want = alone(model, [good])
    bad = {
        "the prompt has no tokens": Req([], SamplingParams()),
        f"the prompt has {CONTEXT} tokens but the context is {CONTEXT} tokens (prompt and completion together): "
        "shorten the prompt": Req([1] * CONTEXT, SamplingParams()),
        f"prompt token ids must be ints in [0, {V}) (the model's vocabulary), got {V}": Req([1, V], SamplingParams()),
        "prompt token ids must be ints in [0, 40) (the model's vocabulary), got True": Req([1, True], SamplingParams()),
        "logit_bias: token id 40 is past the vocabulary": Req([1], SamplingParams(logit_bias={V: 1.0})),
        "params must be an attnkit.models.generation.SamplingParams, got dict": Req([1], {}),  # type: ignore[arg-type]
    }
    got = run(new_batch(model), [[*bad.values(), good]])
    assert got.tokens == want.tokens and got.ends == want.ends
    assert len(got.failed) == len(bad)
    for message, request in bad.items():
        assert got.failed[id(request)].startswith(message)


def test_rows_left_after_a_request_leaves_its_prefill_join_reordered_and_trimmed(model: LanguageModel) -> None:
    """A prefill whose longest prompt is a ``max_tokens=0`` request (its prompt's log-probabilities only): that
    row leaves the prefill, the others' keys and values are reordered, the padding columns now common to them
    trimmed, and they join a running batch; each row still gets its alone tokens and ends."""
    running = Req([1, 5, 9, 11], SamplingParams(max_tokens=8, temperature=0.0))
    short = Req([1, 12], SamplingParams(max_tokens=6, temperature=0.0, repetition_penalty=1.3))
    echo_only = Req([3] * 14, SamplingParams(max_tokens=0, temperature=0.0), prompt_logprobs=True)
    seeded = Req([1, 7, 3], SamplingParams(max_tokens=6, temperature=1.0, top_k=10, seed=4))
    want = alone(model, [running, short, seeded])
    batch = new_batch(model)
    record = Record()
    record.add(batch.admit([running]))
    record.add(batch.step())
    update = batch.admit([short, echo_only, seeded])  # echo_only's 14-token row leaves this prefill
    assert [r for r in update.ended] == [echo_only] and [r for r, _ in update.prompts] == [echo_only]
    assert [(row.request, row.index) for row in batch.rows] == [(running, 0), (short, 0), (seeded, 0)]
    assert batch.width == 5  # the running row's 4 + 1 columns: the 14-token row's padding was trimmed
    record.add(update)
    while batch.rows:
        record.add(batch.step())
        batch.drop()
    assert record.tokens == want.tokens and record.ends == want.ends and not record.failed
