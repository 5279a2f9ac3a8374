"""A sampling failure of one request, planted: the tests of the continuous batch (tests/models) and of the
serving engine (tests/serve) check that it fails that request alone."""

from __future__ import annotations

from typing import Any

import pytest
import torch

BAD_SEED = 666


def failing_draws(monkeypatch: pytest.MonkeyPatch, at_call: int) -> None:
    """Make the draws of the request seeded ``BAD_SEED`` raise from its ``at_call``-th draw on (1: its first
    token, chosen in the prefill with the others of its admission), as a bad value of that one request would (a
    NaN probability: every later try raises too).

    The draw is ``torch.multinomial`` inside the batched :meth:`Sampler.choose`, one per generator: the rows of
    requests drawn before the bad one have drawn already when it raises, so the batch must set their generators
    back before choosing each request alone."""
    real, drawn = torch.multinomial, {"n": 0}

    def multinomial(probs: torch.Tensor, num_samples: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        generator = kwargs.get("generator")
        if generator is not None and generator.initial_seed() == BAD_SEED:
            if drawn["n"] == at_call - 1:
                raise RuntimeError("probability tensor contains either inf, nan or element < 0")
            drawn["n"] += 1
        return real(probs, num_samples, *args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", multinomial)
