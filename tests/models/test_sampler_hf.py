"""The sampling options of :class:`attnkit.models.generation.Sampler` compute what transformers' logits
processors compute, on the same logits and the same token history, and ``generate`` picks transformers' tokens
on the same weights.

Where the two differ by design (each checked below):

- transformers' top-p sorts ascending and drops the tokens whose cumulative probability is ``<= 1 - top_p``;
  attnkit sorts descending and drops a token once the tokens ranked above it reach ``top_p``. That is the same
  set (a token's ascending cumulative sum is 1 minus the probability ranked above it); the two can differ only
  in which of several *equally* likely tokens straddling the boundary are kept (torch's ascending sort orders
  ties as it likes, attnkit keeps the lowest ids), never in how many.
- transformers' repetition penalty counts padding ids of a left-padded batch as seen tokens; attnkit counts a
  row's real tokens only (a row decodes the same alone or batched). The ``generate`` comparisons therefore use
  prompts of one length.
- presence and frequency penalties (OpenAI's) have no transformers processor: they are checked against their
  definition, ``logit - count * frequency - (count > 0) * presence``, counting the generated tokens only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from attnkit.interop import load_pretrained
from attnkit.models.generation import PROCESSORS, Sampler, SamplingParams, sample

INTEROP = Path(__file__).resolve().parents[1] / "interop"
VOCAB = 50


def _interop_helpers():
    """tests/interop/conftest.py as a module of its own (its small random Llama builder)."""
    sys.path.insert(0, str(INTEROP))  # its `interop_parity` import
    spec = importlib.util.spec_from_file_location("interop_conftest", INTEROP / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    """A small random Llama (tests/interop's ``llama`` variant): transformers' model and attnkit's import of it."""
    folder = _interop_helpers().build_llama_family("llama", tmp_path_factory.mktemp("llama"))
    ref = AutoModelForCausalLM.from_pretrained(str(folder), attn_implementation="eager").eval()
    return ref, load_pretrained(folder).model


def _logits(rows: int, seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * scale


def _history(rows: int, length: int = 12, seed: int = 1) -> torch.Tensor:
    """``[rows, length]`` token ids (repeats included): a prompt and what was generated after it."""
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


def _sampler(params: SamplingParams | list[SamplingParams], ids: torch.Tensor) -> Sampler:
    """A sampler whose rows have seen ``ids`` (as their prompt)."""
    sampler = Sampler(VOCAB)
    for row, p in enumerate(params if isinstance(params, list) else [params] * ids.shape[0]):
        sampler.add(p, ids[row : row + 1])
    return sampler


def _scores(sampler: Sampler, logits: torch.Tensor) -> torch.Tensor:
    """The logits after every active processor of ``PROCESSORS`` (both stages, registration order; a greedy
    row skips the warpers)."""
    scores = logits.float()
    for name, cls in PROCESSORS.items():
        values = [None if cls.stage == "warp" and p.greedy else getattr(p, name) for p in sampler.params]
        if any(cls.active(v) for v in values):
            scores = cls(values, logits.device)(scores, sampler.history)
    return scores


def _hf(processors: list, ids: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    return LogitsProcessorList(processors)(ids, logits.clone())


# One case per option: attnkit's parameters and transformers' processor of the same meaning.
CASES = [
    ({"temperature": 0.7}, TemperatureLogitsWarper(0.7)),
    ({"temperature": 2.5}, TemperatureLogitsWarper(2.5)),
    ({"top_k": 1}, TopKLogitsWarper(1)),
    ({"top_k": 7}, TopKLogitsWarper(7)),
    ({"top_k": VOCAB + 5}, TopKLogitsWarper(VOCAB + 5)),  # more than the vocabulary: everything kept
    ({"top_p": 0.05}, TopPLogitsWarper(0.05)),
    ({"top_p": 0.5}, TopPLogitsWarper(0.5)),
    ({"top_p": 0.9}, TopPLogitsWarper(0.9)),
    ({"top_p": 1.0}, TopPLogitsWarper(1.0)),
    ({"min_p": 0.05}, MinPLogitsWarper(0.05)),
    ({"min_p": 0.3}, MinPLogitsWarper(0.3)),
    ({"min_p": 1.0}, MinPLogitsWarper(1.0)),
    ({"typical_p": 0.2}, TypicalLogitsWarper(0.2)),
    ({"typical_p": 0.9}, TypicalLogitsWarper(0.9)),
    ({"repetition_penalty": 1.3}, RepetitionPenaltyLogitsProcessor(1.3)),
    ({"repetition_penalty": 0.7}, RepetitionPenaltyLogitsProcessor(0.7)),
    ({"repetition_penalty": 2.0}, RepetitionPenaltyLogitsProcessor(2.0)),
    ({"logit_bias": {3: 5.0, 0: -100.0, VOCAB - 1: 2.5}}, SequenceBiasLogitsProcessor({(3,): 5.0, (0,): -100.0})),
]
CASES[-1][1].sequence_bias[(VOCAB - 1,)] = 2.5  # the last id too (a dict key of transformers' own)


@pytest.mark.parametrize(("options", "processor"), CASES, ids=[str(o) for o, _ in CASES])
def test_each_option_filters_the_scores_as_transformers_does(options: dict, processor: object) -> None:
    rows = 16
    ids, logits = _history(rows), _logits(rows)
    ours = _scores(_sampler(SamplingParams(**options), ids), logits)
    expected = _hf([processor], ids, logits)
    assert torch.equal(torch.isinf(ours), torch.isinf(expected))
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)
    # a greedy row (temperature 0): the logits-stage options, then argmax (the warpers are for draws only)
    greedy = {k: v for k, v in options.items() if k != "temperature"}
    logits_stage = PROCESSORS[next(iter(options))].stage == "logits"
    base = expected if logits_stage else logits
    chosen = _sampler(SamplingParams(temperature=0, **greedy), ids).choose(logits).tokens
    assert chosen.tolist() == base.argmax(-1).tolist()


COMBINED = dict(logit_bias={2: 3.0, 9: -4.0}, repetition_penalty=1.2, temperature=0.8, top_k=20, top_p=0.9, min_p=0.02)


def _combined_hf() -> list:
    """transformers' order: sequence bias, repetition penalty, then temperature, top-k, top-p, min-p."""
    return [
        SequenceBiasLogitsProcessor({(2,): 3.0, (9,): -4.0}),
        RepetitionPenaltyLogitsProcessor(1.2),
        TemperatureLogitsWarper(0.8),
        TopKLogitsWarper(20),
        TopPLogitsWarper(0.9),
        MinPLogitsWarper(0.02),
    ]


def test_every_option_together_in_transformers_order() -> None:
    """The processors run in transformers' order (a bias before the repetition penalty: they do not commute),
    and a seeded draw is the draw from transformers' distribution with the same generator."""
    rows = 64
    ids, logits = _history(rows, seed=4), _logits(rows, seed=5)
    # Token 2 seen with a negative logit: bias first then penalty is (x + 3) * or / 1.2, not x * 1.2 + 3.
    ids[:, 0], logits[:, 2] = 2, -1.0
    expected = _hf(_combined_hf(), ids, logits)
    params = SamplingParams(**COMBINED)
    torch.testing.assert_close(_scores(_sampler(params, ids), logits), expected, rtol=0, atol=1e-6)
    generator = torch.Generator().manual_seed(7)
    sampler = Sampler(VOCAB)
    sampler.add(params, ids, generator=generator)
    tokens = sampler.choose(logits).tokens
    reference = torch.multinomial(expected.softmax(-1), 1, generator=torch.Generator().manual_seed(7)).squeeze(-1)
    assert tokens.tolist() == reference.tolist()
    # greedy: the logits-stage processors only, then argmax (transformers' do_sample=False)
    greedy = Sampler(VOCAB)
    greedy.add(params.replace(temperature=0), ids)
    assert greedy.choose(logits).tokens.tolist() == _hf(_combined_hf()[:2], ids, logits).argmax(-1).tolist()


def test_typical_p_where_the_mass_is_reached_exactly() -> None:
    """Probabilities 1/2, 1/4, 1/8, 1/8 (exact in float32): ranked by typicality 1/4 then 1/2 reach 0.75 exactly;
    transformers' warper stops there (``cumulative < mass``), keeping those two."""
    logits = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()
    ours = _scores(_sampler(SamplingParams(typical_p=0.75), torch.zeros(1, 1, dtype=torch.long)), logits)
    expected = _hf([TypicalLogitsWarper(0.75)], torch.zeros(1, 1, dtype=torch.long), logits)
    assert torch.equal(ours, expected) and (ours > float("-inf")).tolist() == [[True, True, False, False]]


def test_top_p_at_ties_keeps_as_many_tokens_as_transformers() -> None:
    """All-equal probabilities (the one case the two sort orders may split differently): the same number kept,
    attnkit's the lowest ids."""
    logits = torch.zeros(3, 8)
    for p, kept in ((0.25, 2), (0.26, 3), (0.5, 4), (0.01, 1), (1.0, 8)):
        ours = _scores(_sampler(SamplingParams(top_p=p), torch.zeros(3, 1, dtype=torch.long)), logits)
        expected = _hf([TopPLogitsWarper(p)], torch.zeros(3, 1, dtype=torch.long), logits)
        assert (ours > float("-inf")).sum(-1).tolist() == (expected > float("-inf")).sum(-1).tolist() == [kept] * 3
        assert (ours[0] > float("-inf")).nonzero().flatten().tolist() == list(range(kept))


def test_presence_and_frequency_penalties_follow_their_definition() -> None:
    """OpenAI's: ``logit - count * frequency - (count > 0) * presence``, ``count`` the times a token was
    generated in the row (the prompt's tokens do not count), over several steps."""
    rows, steps = 4, 6
    prompt = _history(rows, length=10, seed=8)
    params = [
        SamplingParams(temperature=0, frequency_penalty=0.5),
        SamplingParams(temperature=0, presence_penalty=1.5),
        SamplingParams(temperature=0, frequency_penalty=-0.7, presence_penalty=0.3),
        SamplingParams(temperature=0),
    ]
    frequency = torch.tensor([0.5, 0.0, -0.7, 0.0])[:, None]
    presence = torch.tensor([0.0, 1.5, 0.3, 0.0])[:, None]
    sampler = _sampler(params, prompt)
    counts = torch.zeros(rows, VOCAB)
    for step in range(steps):
        logits = _logits(rows, seed=20 + step, scale=0.5)  # small logits: the penalties change the argmax
        expected = logits - counts * frequency - (counts > 0).float() * presence
        torch.testing.assert_close(_scores(sampler, logits), expected, rtol=0, atol=1e-6)
        tokens = sampler.choose(logits).tokens
        assert tokens.tolist() == expected.argmax(-1).tolist()
        counts[torch.arange(rows), tokens] += 1
    assert counts[:2].max() >= 1 and int((counts > 0).sum()) > rows  # tokens were generated, some repeated


def test_generate_greedy_with_repetition_penalty_equals_transformers(llama) -> None:
    ref, model = llama
    prompts = torch.randint(3, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    for penalty in (1.5, 0.8):
        expected = ref.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=20,
            do_sample=False,
            repetition_penalty=penalty,
            pad_token_id=model.config.pad_id,
            eos_token_id=model.config.eos_id,
        )
        ours = model.generate(prompts, 20, temperature=0.0, repetition_penalty=penalty)
        assert ours.tolist() == expected.tolist()
    plain = model.generate(prompts, 20, temperature=0.0)
    assert plain.tolist() != ours.tolist()  # the penalty changed the text


def test_generate_greedy_with_logit_bias_equals_transformers_sequence_bias(llama) -> None:
    ref, model = llama
    c = model.config
    prompts = torch.randint(3, c.vocab_size, (2, 6), generator=torch.Generator().manual_seed(2))
    plain = model.generate(prompts, 12, temperature=0.0)
    first = int(plain[0, 6])  # banned: the text changes from the first new token
    bias = {first: -100.0, 5: 8.0, c.vocab_size - 1: 3.0}
    expected = ref.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=12,
        do_sample=False,
        sequence_bias={(k,): v for k, v in bias.items()},
        repetition_penalty=1.3,
        pad_token_id=c.pad_id,
        eos_token_id=c.eos_id,
    )
    params = SamplingParams(temperature=0, logit_bias=bias, repetition_penalty=1.3)
    with torch.no_grad():
        ours = sample(model.eval().decoding(prompts, max_len=12), 12, params)
    assert torch.cat([prompts, ours], 1).tolist() == expected.tolist()
    assert first not in ours[0].tolist() and ours.tolist() != plain[:, 6:].tolist()


def test_generate_seeded_sampling_equals_transformers_with_the_same_seed(llama) -> None:
    """Sampling with every warp option: the same generator state gives transformers' tokens (one draw per step
    over the batch's rows, as ``generate`` does)."""
    ref, model = llama
    c = model.config
    prompts = torch.randint(3, c.vocab_size, (3, 5), generator=torch.Generator().manual_seed(3))
    options = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01, repetition_penalty=1.1)
    torch.manual_seed(11)
    expected = ref.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=16,
        do_sample=True,
        pad_token_id=c.pad_id,
        eos_token_id=c.eos_id,
        **options,
    )
    ours = model.generate(prompts, 16, generator=torch.Generator().manual_seed(11), **options)
    assert ours.tolist() == expected.tolist()
