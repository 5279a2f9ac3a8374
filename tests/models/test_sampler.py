"""The one batched next-token choice, :class:`attnkit.models.generation.Sampler`: every row of a batch with its
own :class:`SamplingParams` gets exactly what it gets alone, step after step; neutral values change nothing;
its rows keep their history as the batch changes; log-probabilities are the model's own; edge inputs.

(transformers' processors on the same logits: tests/models/test_sampler_hf.py.)"""

from __future__ import annotations

import pytest
import torch

from attnkit.models.generation import PROCESSORS, Sampler, SamplingError, SamplingParams
from attnkit.models.generation.options import MIN_TEMPERATURE

VOCAB = 40
STEPS = 6

# Every option, sampled and greedy, the history-dependent ones included; one row each.
OPTIONS: list[dict] = [
    {},
    {"temperature": 0},
    {"temperature": 0.6, "top_k": 4},
    {"top_k": VOCAB + 3},
    {"top_p": 0.7},
    {"min_p": 0.2},
    {"typical_p": 0.5},
    {"temperature": 1.7, "top_k": 12, "top_p": 0.9, "min_p": 0.05, "typical_p": 0.95},
    {"temperature": 0, "repetition_penalty": 1.6},
    {"repetition_penalty": 0.7},
    {"temperature": 0, "presence_penalty": 1.5, "frequency_penalty": 0.5},
    {"frequency_penalty": 2.0},
    {"presence_penalty": -2.0},
    {"logit_bias": {1: 4.0, VOCAB - 1: -3.0}},
    {"temperature": 0, "logit_bias": {VOCAB - 1: 6.0}, "repetition_penalty": 1.2},
    {"logprobs": 3},
    {"temperature": 0, "logprobs": 0},
    {"temperature": 0, "top_p": 0.5, "top_k": 2},  # greedy: the warpers do not apply
]


def _logits(steps: int, rows: int, seed: int = 0, scale: float = 2.0) -> torch.Tensor:
    """``[steps, rows, V]``: what a model would give, one row per request, step after step."""
    return torch.randn(steps, rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def _prompt(row: int) -> list[int]:
    """A prompt of its own length per row, with repeats (what a repetition penalty reads)."""
    g = torch.Generator().manual_seed(100 + row)
    return torch.randint(0, VOCAB, (3 + row % 5,), generator=g).tolist()


def _run(sampler: Sampler, logits: torch.Tensor) -> list:
    """Each step's choice, as plain lists."""
    out = []
    for step in range(logits.shape[0]):
        c = sampler.choose(logits[step])
        out.append(
            [
                c.tokens.tolist(),
                None if c.logprobs is None else c.logprobs.tolist(),
                None if c.top_ids is None else c.top_ids.tolist(),
                None if c.top_logprobs is None else c.top_logprobs.tolist(),
            ]
        )
    return out


def _alone(params: SamplingParams, prompt: list[int], seed: int, logits: torch.Tensor) -> list:
    sampler = Sampler(VOCAB)
    sampler.add(params, [prompt], generator=torch.Generator().manual_seed(seed))
    return _run(sampler, logits)


def _row(result: list, row: int, k: int | None) -> list:
    """Row ``row`` of a batched run: its token, its log-probability, its own first ``k`` alternatives."""
    out = []
    for tokens, lps, ids, tops in result:
        out.append(
            [
                [tokens[row]],
                None if k is None else [lps[row]],
                None if k is None else [ids[row][:k]],
                None if k is None else [tops[row][:k]],
            ]
        )
    return out


def test_each_row_of_a_mixed_batch_gets_what_it_gets_alone() -> None:
    params = [SamplingParams(**o) for o in OPTIONS]
    logits = _logits(STEPS, len(params))
    sampler = Sampler(VOCAB)
    for row, p in enumerate(params):
        sampler.add(p, [_prompt(row)], generator=torch.Generator().manual_seed(row))
    batched = _run(sampler, logits)
    changed = 0
    for row, p in enumerate(params):
        alone = _alone(p, _prompt(row), row, logits[:, row : row + 1])
        k = p.logprobs
        got = _row(batched, row, k)
        if k is not None:  # alone: the row's own k columns (none at all for k = 0)
            alone = [[t, lp, [(ids or [[]])[0][:k]], [(tp or [[]])[0][:k]]] for t, lp, ids, tp in alone]
        assert got == alone, OPTIONS[row]
        plain = _alone(
            SamplingParams(**({"temperature": 0} if p.greedy else {})), _prompt(row), row, logits[:, row : row + 1]
        )
        changed += [s[0] for s in plain] != [s[0] for s in alone]
    assert changed >= len(OPTIONS) // 2  # most options changed the tokens (the logits are not degenerate)


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]])
def test_history_dependent_rows_in_any_order(order: list[int]) -> None:
    """The penalties read each row's own history, whatever its place in the batch (prompts of different
    lengths, greedy and sampled rows)."""
    options = [OPTIONS[8], OPTIONS[9], OPTIONS[10], OPTIONS[11]]
    logits = _logits(STEPS, 4, seed=3, scale=0.7)
    sampler = Sampler(VOCAB)
    for i in order:
        sampler.add(SamplingParams(**options[i]), [_prompt(i)], generator=torch.Generator().manual_seed(i))
    batched = _run(sampler, logits[:, order])
    for place, i in enumerate(order):
        alone = _alone(SamplingParams(**options[i]), _prompt(i), i, logits[:, [i]])
        assert [s[0][place] for s in batched] == [s[0][0] for s in alone]


NEUTRAL = {
    "temperature": 1.0,
    "top_k": None,
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logit_bias": {},
}
ACTIVE = {
    "temperature": 0.5,
    "top_k": 3,
    "top_p": 0.3,
    "min_p": 0.4,
    "typical_p": 0.3,
    "repetition_penalty": 1.8,
    "presence_penalty": 1.0,
    "frequency_penalty": 1.0,
    "logit_bias": {0: 5.0},
}


def _scores(sampler: Sampler, logits: torch.Tensor) -> torch.Tensor:
    """The logits after every active processor (registration order; a greedy row skips the warpers)."""
    scores = logits.float()
    for name, cls in PROCESSORS.items():
        values = [None if cls.stage == "warp" and p.greedy else getattr(p, name) for p in sampler.params]
        if any(cls.active(v) for v in values):
            scores = cls(values, logits.device)(scores, sampler.history)
    return scores


def test_every_option_is_registered_with_a_neutral_value() -> None:
    assert set(NEUTRAL) == set(ACTIVE) == set(PROCESSORS)


@pytest.mark.parametrize("name", sorted(NEUTRAL))
def test_a_neutral_value_changes_nothing_bit_for_bit(name: str) -> None:
    """A row with the option's neutral value, beside a row where it is active, keeps its logits exactly and
    draws what a row without the option draws."""
    logits = _logits(STEPS, 2, seed=5)
    neutral, active = SamplingParams(**{name: NEUTRAL[name]}), SamplingParams(**{name: ACTIVE[name]})
    sampler = Sampler(VOCAB)
    sampler.add(neutral, [_prompt(0)], generator=torch.Generator().manual_seed(0))
    sampler.add(active, [_prompt(0)], generator=torch.Generator().manual_seed(0))
    plain = Sampler(VOCAB)
    plain.add(SamplingParams(), [_prompt(0)], generator=torch.Generator().manual_seed(0))
    changed = 0
    for step in range(STEPS):
        scores = _scores(sampler, logits[step])
        assert torch.equal(scores[0], logits[step, 0])  # bit for bit
        changed += not torch.equal(scores[1], logits[step, 1])
        assert sampler.choose(logits[step]).tokens[0] == plain.choose(logits[step, :1]).tokens[0]
    assert changed >= STEPS - 1  # the active row did change (the penalties from the first token on)


def _penalised(prompts: list[list[int]], seeds: list[int]) -> Sampler:
    sampler = Sampler(VOCAB)
    options = [OPTIONS[8], OPTIONS[11], OPTIONS[10]]
    for i, prompt in enumerate(prompts):
        sampler.add(SamplingParams(**options[i % 3]), [prompt], generator=torch.Generator().manual_seed(seeds[i]))
    return sampler


def test_keep_extend_and_subset_keep_each_rows_history() -> None:
    logits = _logits(2 * STEPS, 3, seed=7, scale=0.6)
    prompts = [_prompt(i) for i in range(3)]
    sampler = _penalised(prompts, [0, 1, 2])
    alone = [_penalised([prompts[i]] * 3, [i] * 3) for i in range(3)]  # row i's options are at index i % 3
    for a in alone:
        a.keep([alone.index(a)])
    for step in range(STEPS):
        tokens = sampler.choose(logits[step]).tokens.tolist()
        assert tokens == [int(alone[i].choose(logits[step, [i]]).tokens) for i in range(3)]
    # subset: a copy of rows 2 and 0 (their history), choosing does not touch the original
    seen, counts = sampler.history.seen.clone(), sampler.history.counts.clone()
    part = sampler.subset([2, 0])
    assert torch.equal(part.history.seen, seen[[2, 0]]) and torch.equal(part.history.counts, counts[[2, 0]])
    part.choose(logits[STEPS, [2, 0]])
    assert torch.equal(sampler.history.seen, seen) and torch.equal(sampler.history.counts, counts)
    assert not torch.equal(part.history.counts, counts[[2, 0]])
    # keep: rows 2 and 0 go on as they would alone (row 1 finished)
    sampler.keep([2, 0])
    assert sampler.params == [alone[2].params[0], alone[0].params[0]]
    for step in range(STEPS, STEPS + 3):
        tokens = sampler.choose(logits[step, [2, 0]]).tokens.tolist()
        assert tokens == [int(alone[i].choose(logits[step, [i]]).tokens) for i in (2, 0)]
    # extend: a sampler without history (no penalties) joins, then one with: every row keeps its own
    fresh = Sampler(VOCAB)
    fresh.add(SamplingParams(temperature=0), [[1, 2]])
    sampler.extend(fresh)
    late = _penalised([prompts[1]], [1])
    late_alone = _penalised([prompts[1]], [1])
    sampler.extend(late)
    assert len(sampler) == 4 and torch.equal(sampler.history.seen[2], torch.zeros(VOCAB, dtype=torch.bool))
    for step in range(STEPS + 3, 2 * STEPS):
        rows = [2, 0, 1, 1]
        tokens = sampler.choose(logits[step, rows]).tokens.tolist()
        assert tokens[:2] == [int(alone[i].choose(logits[step, [i]]).tokens) for i in (2, 0)]
        assert tokens[2] == int(logits[step, 1].argmax())
        assert tokens[3] == int(late_alone.choose(logits[step, [1]]).tokens)
    with pytest.raises(ValueError, match="cannot join samplers of 41 and 40 tokens"):
        sampler.extend(Sampler(VOCAB + 1))


def test_logprobs_are_the_log_softmax_of_the_raw_logits() -> None:
    """Whatever the options, a row's log-probabilities are the model's own; the top ones sorted, each row
    reading its own first ``logprobs`` columns of ``K`` (the most any row asked for)."""
    logits = _logits(1, 4, seed=9, scale=4.0)[0]
    logits[3, 4:] = float("-inf")  # 4 finite tokens, 5 asked
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(logprobs=2, temperature=0, repetition_penalty=2.0, logit_bias={7: 50.0}), [[3, 4]])
    sampler.add(SamplingParams(logprobs=5, top_k=2), [[1]], generator=torch.Generator().manual_seed(0))
    sampler.add(SamplingParams(), [[1]], generator=torch.Generator().manual_seed(1))  # asks for none
    sampler.add(SamplingParams(logprobs=0, temperature=0), [[1]])
    choice = sampler.choose(logits)
    exact = logits.double().log_softmax(-1)
    assert choice.tokens[0] == 7  # the bias chose it, its log-probability is the raw one
    torch.testing.assert_close(
        choice.logprobs.double(), exact.gather(-1, choice.tokens[:, None])[:, 0], atol=1e-5, rtol=0
    )
    assert choice.top_ids.shape == choice.top_logprobs.shape == (4, 5)
    torch.testing.assert_close(choice.top_logprobs.double(), exact.topk(5).values, atol=1e-5, rtol=0)
    assert torch.equal(logits.gather(-1, choice.top_ids), logits.topk(5).values)
    assert (choice.top_logprobs[:, :-1] >= choice.top_logprobs[:, 1:]).all()
    assert choice.top_logprobs[3, 4] == float("-inf") and choice.logprobs[3] > float("-inf")


def test_logprobs_without_any_row_asking() -> None:
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(temperature=0), [[1]])
    choice = sampler.choose(_logits(1, 1)[0])
    assert choice.logprobs is None and choice.top_ids is None and choice.top_logprobs is None
    only_chosen = Sampler(VOCAB)
    only_chosen.add(SamplingParams(temperature=0, logprobs=0), [[1]])
    choice = only_chosen.choose(_logits(1, 1)[0])
    assert choice.logprobs is not None and choice.top_ids is None


@pytest.mark.parametrize("options", [o for o in OPTIONS if "logit_bias" not in o])
def test_a_vocabulary_of_one_token(options: dict) -> None:
    sampler = Sampler(1)
    sampler.add(SamplingParams(**options), [[0, 0]], generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        choice = sampler.choose(torch.randn(1, 1))
        assert choice.tokens.tolist() == [0]
        if options.get("logprobs"):
            assert choice.top_ids.tolist() == [[0]] and choice.top_logprobs.tolist() == [[0.0]]


def test_all_equal_logits() -> None:
    """Greedy takes the lowest id; top-k keeps every tied token; top-p the fewest reaching it (lowest ids)."""
    logits = torch.zeros(4, VOCAB)
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(temperature=0), [[5]])
    sampler.add(SamplingParams(top_k=3), [[5]], generator=torch.Generator().manual_seed(0))
    sampler.add(SamplingParams(top_p=0.1), [[5]], generator=torch.Generator().manual_seed(0))
    sampler.add(SamplingParams(typical_p=0.5, min_p=1.0), [[5]], generator=torch.Generator().manual_seed(0))
    scores = _scores(sampler, logits)
    kept = (scores > float("-inf")).sum(-1).tolist()
    assert kept == [VOCAB, VOCAB, 4, VOCAB]  # 0.1 of 40 equal tokens: 4
    assert (scores[2] > float("-inf")).nonzero().flatten().tolist() == [0, 1, 2, 3]
    tokens = torch.stack([sampler.choose(logits).tokens for _ in range(20)])
    assert (tokens[:, 0] == 0).all() and (tokens[:, 2] < 4).all()
    assert len(set(tokens[:, 1].tolist())) > 3  # every tied token stays drawable


def test_minus_infinity_logits_are_never_drawn() -> None:
    """Rows with -inf logits (a model's masked vocabulary): every option keeps a finite token, and a row with
    one finite token always draws it."""
    logits = torch.full((6, VOCAB), float("-inf"))
    logits[:, 7], logits[:, 9] = 1.0, 0.5
    logits[5] = float("-inf")
    logits[5, 3] = -2.0  # one finite token
    options = [
        {"temperature": 0, "logprobs": 3},
        {"top_p": 0.5},
        {"min_p": 0.7},  # p(9) / p(7) = e**-0.5 = 0.61 < 0.7
        {"typical_p": 0.4},
        {"top_k": 5, "frequency_penalty": 0.1},
        {"top_p": 0.3, "typical_p": 0.3, "min_p": 0.5, "presence_penalty": 1.0},
    ]
    sampler = Sampler(VOCAB)
    for o in options:
        sampler.add(SamplingParams(**o), [[1]], generator=torch.Generator().manual_seed(0))
    drawn = set()
    for _ in range(20):
        choice = sampler.choose(logits)
        assert choice.tokens[:4].tolist() == [7, 7, 7, 7] and choice.tokens[5] == 3
        drawn.add(int(choice.tokens[4]))
        assert choice.top_logprobs[0, 2] == float("-inf")
    assert drawn == {7, 9}


def test_logit_bias_on_the_last_id_and_past_the_vocabulary() -> None:
    logits = torch.zeros(1, VOCAB)
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(temperature=0, logit_bias={VOCAB - 1: 1.0}), [[1]])
    assert sampler.choose(logits).tokens.tolist() == [VOCAB - 1]
    with pytest.raises(SamplingError, match=f"logit_bias: token id {VOCAB} is past the vocabulary \\({VOCAB} tokens"):
        sampler.add(SamplingParams(logit_bias={VOCAB: 1.0}), [[1]])
    with pytest.raises(SamplingError, match="stop_ids: token id 99 is past the vocabulary"):
        sampler.add(SamplingParams(stop_ids=[3, 99]), [[1]])
    assert len(sampler) == 1  # the refused rows were not added


def test_every_token_banned_still_chooses() -> None:
    """A row where logit_bias gives every token -100 still chooses one: the most likely, as without the bias."""
    logits = _logits(1, 2, seed=11)[0]
    ban = {i: -100.0 for i in range(VOCAB)}
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(temperature=0, logit_bias=ban), [[1]])
    sampler.add(SamplingParams(logit_bias=ban), [[1]], generator=torch.Generator().manual_seed(3))
    plain = Sampler(VOCAB)
    plain.add(SamplingParams(), [[1]], generator=torch.Generator().manual_seed(3))
    tokens = sampler.choose(logits).tokens.tolist()
    assert tokens[0] == int(logits[0].argmax())
    assert 0 <= tokens[1] < VOCAB and tokens[1] == int(plain.choose(logits[1:]).tokens)


def test_temperatures_at_the_limits() -> None:
    """The smallest temperature draws the most likely token; a huge one draws nearly uniformly; both finite."""
    logits = _logits(1, 2, seed=12, scale=30.0)[0]
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(temperature=MIN_TEMPERATURE), [[1]], generator=torch.Generator().manual_seed(0))
    sampler.add(SamplingParams(temperature=1e30), [[1]], generator=torch.Generator().manual_seed(0))
    draws = torch.stack([sampler.choose(logits).tokens for _ in range(200)])
    assert (draws[:, 0] == logits[0].argmax()).all()
    assert len(set(draws[:, 1].tolist())) > VOCAB // 2


def test_rows_sharing_a_generator_draw_together() -> None:
    """``n`` rows of one request share its generator: one draw over their rows, the same alone or beside
    other requests (whose rows come between)."""
    logits = _logits(STEPS, 5, seed=13)
    params = SamplingParams(top_k=10, frequency_penalty=0.5, n=3)
    together = Sampler(VOCAB)
    together.add(params, [[1, 2]] * 3, generator=torch.Generator().manual_seed(5))
    expected = [together.choose(logits[s, [0, 2, 4]]).tokens.tolist() for s in range(STEPS)]
    mixed = Sampler(VOCAB)
    shared = torch.Generator().manual_seed(5)
    other = torch.Generator().manual_seed(6)
    for row in range(5):
        if row % 2:
            mixed.add(SamplingParams(temperature=0.5), [[3]], generator=other)
        else:
            mixed.add(params, [[1, 2]], generator=shared)
    got = [mixed.choose(logits[s]).tokens[[0, 2, 4]].tolist() for s in range(STEPS)]
    assert got == expected
    assert len({tuple(t) for t in zip(*expected)}) > 1  # the three rows did not all draw the same


def test_wrong_logits_shape() -> None:
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(), [[1], [2]])
    with pytest.raises(ValueError, match=r"logits must be \[2 rows, vocab\], got \(1, 40\)"):
        sampler.choose(torch.zeros(1, VOCAB))
    with pytest.raises(ValueError, match=r"logits must be \[2 rows, vocab\], got \(40,\)"):
        sampler.choose(torch.zeros(VOCAB))


def test_typical_p_is_checked_as_a_sampling_option() -> None:
    assert SamplingParams(typical_p=1).typical_p == 1 and SamplingParams(typical_p=None).typical_p is None
    for bad in (0, 0.0, -0.1, 1.01, True, "0.5", float("nan")):
        with pytest.raises(SamplingError, match="typical_p must be None or a number in \\(0, 1\\]") as err:
            SamplingParams(typical_p=bad)
        assert err.value.field == "typical_p"


@pytest.mark.parametrize("name", ["top_p", "typical_p"])
def test_a_mass_of_one_keeps_tokens_of_vanishing_probability(name: str) -> None:
    """top_p / typical_p 1 (off) beside a row where the option is on: the tokens whose probability rounds the
    cumulative sum to 1 stay (as transformers keeps them: their probability is not 0)."""
    logits = torch.zeros(2, VOCAB)
    logits[:, 0], logits[:, 1:4] = 30.0, -30.0  # p(1..3) ~ 1e-26: the sum reaches 1.0 before them in float32
    sampler = Sampler(VOCAB)
    sampler.add(SamplingParams(**{name: 1.0}), [[1]], generator=torch.Generator().manual_seed(0))
    sampler.add(SamplingParams(**{name: 0.5}), [[1]], generator=torch.Generator().manual_seed(0))
    scores = _scores(sampler, logits)
    assert torch.equal(scores[0], logits[0])
    assert (scores[1] > float("-inf")).sum() == 1


def test_the_seen_tokens_of_a_prompt_exclude_its_padding() -> None:
    """What a repetition penalty starts from: each row's real tokens, one-token prompts, ids 0 and padding
    (lists are left-padded with 0; a tensor's ``padding_mask`` may put padding anywhere)."""
    sampler = Sampler(VOCAB)
    params = SamplingParams(repetition_penalty=1.5)
    sampler.add(params, [[5], [1, 2, 3], [0, 4]])
    mask = torch.tensor([[True, False, False], [False, True, True], [True, True, False]])
    sampler.add(params, torch.tensor([[1, 7, 7], [9, 9, 0], [0, 6, 9]]), padding_mask=mask)
    sampler.add(params, [[8], [0]])  # one token each: a batch one column wide
    seen = sampler.history.seen
    assert [row.nonzero().flatten().tolist() for row in seen] == [[5], [1, 2, 3], [0, 4], [1], [0, 9], [0, 6], [8], [0]]


def test_rows_added_after_others_decoded_keep_every_history() -> None:
    """Continuous batching: a row joins a sampler whose rows have decoded; theirs and its own history hold."""
    logits = _logits(2 * STEPS, 3, seed=21, scale=0.6)
    first = [SamplingParams(temperature=0, frequency_penalty=1.0), SamplingParams(temperature=0)]
    late = SamplingParams(temperature=0, repetition_penalty=1.8, presence_penalty=1.0)
    sampler, alone = Sampler(VOCAB), [Sampler(VOCAB) for _ in range(3)]
    for i, p in enumerate(first):
        sampler.add(p, [_prompt(i)])
        alone[i].add(p, [_prompt(i)])
    alone[2].add(late, [_prompt(2)])
    for step in range(STEPS):
        assert sampler.choose(logits[step, :2]).tokens.tolist() == [
            int(alone[i].choose(logits[step, [i]]).tokens) for i in range(2)
        ]
    sampler.add(late, [_prompt(2)])
    for step in range(STEPS):
        assert sampler.choose(logits[STEPS + step]).tokens.tolist() == [
            int(alone[i].choose(logits[STEPS + step, [i]]).tokens) for i in range(3)
        ]


def test_extend_joins_whichever_history_each_side_has() -> None:
    counted = Sampler(VOCAB)
    counted.add(SamplingParams(frequency_penalty=1.0), [[1, 2]])
    counted.record(torch.tensor([4]))
    plain = Sampler(VOCAB)
    plain.add(SamplingParams(), [[3]])
    plain.extend(counted)  # no history on this side, counts only on the other
    assert plain.history.seen is None and plain.history.counts.tolist() == [
        [0.0] * VOCAB,
        counted.history.counts[0].tolist(),
    ]
    other = Sampler(VOCAB)
    other.add(SamplingParams(frequency_penalty=0.5), [[1]])
    other.record(torch.tensor([6]))
    counted.extend(other)
    assert counted.history.counts.nonzero().tolist() == [[0, 4], [1, 6]]


def test_no_rows() -> None:
    sampler = Sampler(VOCAB)
    assert sampler.choose(torch.zeros(0, VOCAB)).tokens.shape == (0,)  # nothing added yet
    sampler.add(SamplingParams(), [])
    assert len(sampler) == 0 and sampler.params == []
    assert sampler.choose(torch.zeros(0, VOCAB)).tokens.shape == (0,)
    penalised = Sampler(VOCAB)
    penalised.add(SamplingParams(repetition_penalty=1.5, frequency_penalty=1.0), [[1], [2]])
    penalised.keep([])  # every row finished
    assert len(penalised) == 0 and penalised.history.seen.shape == penalised.history.counts.shape == (0, VOCAB)


def test_every_tensor_the_sampler_makes_is_on_its_device() -> None:
    """Under another default device (``meta``), a CPU sampler still works and gives the same tokens: no tensor
    is made on the default device instead of the sampler's (on an accelerator that would be a device mismatch)."""
    torch.manual_seed(3)
    logits = torch.randn(4, 30)
    params = [
        SamplingParams(temperature=0.0, repetition_penalty=1.3, logit_bias={2: 3.0}, logprobs=2),
        SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05, seed=1, presence_penalty=0.5),
        SamplingParams(temperature=1.2, typical_p=0.9, frequency_penalty=0.4, seed=2, logprobs=0),
        SamplingParams(temperature=0.0),
    ]

    def run() -> list[list[int]]:
        sampler = Sampler(30, "cpu")
        for i, p in enumerate(params):
            g = None if p.seed is None else torch.Generator().manual_seed(p.seed)
            sampler.add(p, [[1, 2, 3 + i]], generator=g)
        steps = [sampler.choose(logits).tokens.tolist() for _ in range(3)]
        sampler.keep([2, 0])
        other = Sampler(30, "cpu")
        other.add(
            params[1],
            torch.tensor([[4, 5]], device="cpu"),
            padding_mask=torch.tensor([[False, True]], device="cpu"),
            generator=torch.Generator().manual_seed(9),
        )
        sampler.extend(other)
        steps.append(sampler.subset([0, 2]).choose(logits[:2]).tokens.tolist())
        return steps

    want = run()
    with torch.device("meta"):
        assert run() == want
