"""attnkit.nn.dropout.Dropout: nothing done (nor dispatched) when it does nothing; torch's dropout otherwise."""

import torch
from torch import nn

from attnkit.nn.dropout import Dropout


def test_eval_or_zero_returns_the_input_itself_without_calling_the_module():
    x = torch.randn(4, 8)
    calls = []
    for drop in (Dropout(0.5).eval(), Dropout(0.0).train()):
        drop.register_forward_hook(lambda *a: calls.append(a))
        assert drop(x) is x
    assert calls == []  # the module's call machinery was not entered


def test_training_drops_as_torch_dropout_with_its_hooks():
    x = torch.ones(1000)
    drop, calls = Dropout(0.5).train(), []
    drop.register_forward_hook(lambda *a: calls.append(a))
    torch.manual_seed(0)
    ours = drop(x)
    torch.manual_seed(0)
    assert torch.equal(ours, nn.Dropout(0.5).train()(x))
    assert len(calls) == 1 and 300 < int((ours == 0).sum()) < 700
    assert isinstance(drop, nn.Dropout) and drop.state_dict() == {}
