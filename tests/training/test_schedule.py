import itertools
import math

import pytest
import torch

from attnkit.training.schedule import CosineWarmupScheduler, cosine_warmup_factor


@pytest.mark.parametrize("step", [0, 1, 25, 50, 51, 300, 999, 1000])
def test_factor_matches_formula(step):
    warmup, max_iters = 50, 1000
    expected = 0.5 * (1 + math.cos(math.pi * step / max_iters))
    if step <= warmup:
        expected *= step / warmup
    assert cosine_warmup_factor(step, warmup, max_iters) == pytest.approx(expected)


def test_factor_shape():
    f = [cosine_warmup_factor(s, 100, 2000) for s in range(2001)]
    assert f[0] == 0.0
    assert max(f) == pytest.approx(f[100], rel=1e-3)  # peak right after warm-up
    assert all(a <= b for a, b in itertools.pairwise(f[:101]))  # rises during warm-up
    assert all(a >= b for a, b in itertools.pairwise(f[101:]))  # then decays
    assert f[-1] == pytest.approx(0.0, abs=1e-12)
    assert cosine_warmup_factor(5000, 100, 2000) == pytest.approx(0.0, abs=1e-12)  # stays at 0 past max_iters


def test_scheduler_sets_lr_per_step():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([param], lr=1e-3)
    sched = CosineWarmupScheduler(opt, warmup=10, max_iters=100)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    for step in (0, 5, 10, 50, 99):
        assert lrs[step] == pytest.approx(1e-3 * cosine_warmup_factor(step, 10, 100))
    state = sched.state_dict()
    assert state["warmup"] == 10 and state["max_iters"] == 100


@pytest.mark.parametrize(("warmup", "max_iters"), [(-1, 10), (0, 0)])
def test_scheduler_rejects_bad_arguments(warmup, max_iters):
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    with pytest.raises(ValueError, match=r"warmup|max_iters"):
        CosineWarmupScheduler(opt, warmup=warmup, max_iters=max_iters)
