"""``trainer.compile=true``: the model trains compiled (torch.compile, inductor on this CPU) and its
checkpoints are those of the plain model, so that they load, test and export without it."""

from __future__ import annotations

from pathlib import Path

import torch
from cli_helpers import QUIET_TRAINING

from attnkit.api import train
from attnkit.tasks import load_run
from attnkit.training.checkpoint import load_checkpoint_file

TINY = {
    "data.train_size": 256, "data.val_size": 64, "data.test_size": 64, "data.seq_len": 8,
    "model.d_model": 32, "model.num_heads": 2, "model.num_layers": 1, "model.dim_feedforward": 64,
    "trainer.max_epochs": 1, "trainer.deterministic": True, "seed": 3, **QUIET_TRAINING,
}  # fmt: skip


def test_compiled_training_matches_eager_and_saves_plain_checkpoints(tmp_path: Path, monkeypatch) -> None:
    eager = train("reverse", output_dir=str(tmp_path), name="eager", **TINY)
    compiled_calls = []
    real_compile = torch.compile

    def spy(model, *args, **kwargs):
        compiled_calls.append(model)
        return real_compile(model, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", spy)  # nn.Module.compile goes through torch.compile
    compiled = train("reverse", output_dir=str(tmp_path), name="compiled", **TINY, **{"trainer.compile": True})
    assert len(compiled_calls) == 1  # the model, compiled once (Lightning sees the same module)
    plain = load_checkpoint_file(eager.best_checkpoint)["state_dict"]
    ckpt = load_checkpoint_file(compiled.best_checkpoint)["state_dict"]
    assert sorted(ckpt) == sorted(plain)  # no `_orig_mod.` prefixes
    # Same initial weights, data and steps: inductor's fused kernels only reorder float sums
    # (measured: every weight within 1e-7). Except the key biases: softmax ignores a constant added
    # to every score, so their gradient is zero but for rounding noise, which Adam scales up to
    # steps of about the learning rate (4e-4 measured); they change no output.
    d = TINY["model.d_model"]
    for name in plain:
        a, b = ckpt[name], plain[name]
        if name.endswith("self_attn.in_proj.bias"):
            a, b = torch.cat([a[:d], a[2 * d :]]), torch.cat([b[:d], b[2 * d :]])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
    for key, value in eager.metrics.items():
        assert abs(compiled.metrics[key] - value) < 1e-5, (key, compiled.metrics[key], value)

    # The checkpoint loads into a plain (uncompiled) model that gives the same outputs.
    loaded = load_run(compiled.run_dir).module.model.eval()
    x = torch.nn.functional.one_hot(torch.randint(0, 10, (4, 8)), 10).float()  # reverse: one-hot digits
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), compiled.module.model.eval()(x), rtol=1e-4, atol=1e-4)
