"""``attnkit.models.diff``: what tuning changed. A LoRA trained to change one head's attention pattern (and
nothing else) is found first among the heads, its module the only weight updated; a model against itself
changes nothing; the last row of the lens KL is the KL of the models' outputs; wrong pairs are clear errors."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from attnkit.models.diff import model_diff, weight_updates
from attnkit.models.lm import LanguageModel, LanguageModelConfig
from attnkit.models.lora import LoraConfig, apply_lora, merge_lora
from attnkit.nn.hooks import run_with_cache

LAYER, HEAD = 1, 0


def _lm(layers: int = 2, d_model: int = 16) -> LanguageModel:
    torch.manual_seed(0)
    cfg = LanguageModelConfig(vocab_size=20, d_model=d_model, num_heads=2, num_layers=layers, dim_feedforward=32,
                              max_len=32)  # fmt: skip
    return LanguageModel(cfg).eval()


def _sequences(n: int = 6, length: int = 12) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 20, (length - i % 3,), generator=g) for i in range(n)]


def _planted(base: LanguageModel) -> LanguageModel:
    """A LoRA on the query/key/value projections, trained so that head HEAD of layer LAYER attends to the first
    token (only layer LAYER's adapters train: the loss reads that one head), then merged."""
    tuned = apply_lora(copy.deepcopy(base), LoraConfig(rank=4, alpha=8.0, targets=["qkv"]))
    for name, p in tuned.named_parameters():
        if p.requires_grad and f"layers.{LAYER}." not in name:
            p.requires_grad_(False)
    params = [p for p in tuned.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=5e-2)
    ids = torch.stack([s[:9] for s in _sequences()])
    name = f"blocks.{LAYER}.attn.hook_pattern"
    for _ in range(60):
        pattern = run_with_cache(tuned, ids, names=[name], grad=True)[name][:, HEAD]  # [B, T, T]
        loss = -pattern[:, 1:, 0].clamp_min(1e-6).log().mean()  # attend to token 0
        opt.zero_grad()
        loss.backward()
        opt.step()
    return merge_lora(tuned).eval()


@pytest.fixture(scope="module")
def pair() -> tuple[LanguageModel, LanguageModel]:
    base = _lm()
    return base, _planted(base)


def test_a_lora_trained_to_change_one_head_ranks_that_head_first(pair: tuple[LanguageModel, LanguageModel]) -> None:
    base, tuned = pair
    diff = model_diff(base, tuned, _sequences())
    top = diff.top_heads(4)
    assert (top[0][0], top[0][1]) == (LAYER, HEAD), top
    assert top[0][2] > 3 * top[1][2] and top[0][2] > 0.2  # far ahead of every other head
    assert float(diff.pattern_change[:LAYER].abs().max()) == 0.0  # the layers below: untouched
    assert list(diff.weight_updates) == [f"decoder.layers.{LAYER}.self_attn.in_proj.weight"]
    norm, relative = diff.weight_updates[f"decoder.layers.{LAYER}.self_attn.in_proj.weight"]
    assert norm > 0 and 0 < relative < 10
    assert diff.attribution_change is not None and diff.attribution_change.shape == (2, 2)
    # the heads below write what they wrote; their attribution moves only by the final norm's new scale
    assert diff.top_heads(1, by="attribution")[0][:2] == (LAYER, HEAD)
    assert float(diff.attribution_change[:LAYER].max()) < 0.5 * float(diff.attribution_change[LAYER, HEAD])
    assert diff.layer_kl.shape == (3,) and float(diff.layer_kl[: LAYER + 1].abs().max()) < 1e-6
    assert float(diff.layer_kl[-1]) > 0  # the outputs changed
    assert diff.positions == sum(len(s) for s in _sequences())


def test_a_model_against_itself_changes_nothing() -> None:
    base = _lm(layers=3)
    diff = model_diff(base, copy.deepcopy(base), _sequences(3))
    top = diff.top_heads()
    assert len(top) == 5 and all(isinstance(layer, int) and isinstance(head, int) for layer, head, _ in top)
    assert {(layer, head) for layer, head, _ in diff.top_heads(6)} == {(i, j) for i in range(3) for j in range(2)}
    assert float(diff.layer_kl.abs().max()) < 1e-6
    assert float(diff.pattern_change.max()) == 0.0 and diff.attribution_change is not None
    assert float(diff.attribution_change.max()) == 0.0
    assert diff.weight_updates == {}


def test_the_last_lens_row_is_the_kl_of_the_outputs_and_patterns_are_tv_distances(
    pair: tuple[LanguageModel, LanguageModel],
) -> None:
    base, tuned = pair
    seqs = _sequences(2)
    diff = model_diff(base, tuned, seqs)
    total, positions = 0.0, 0
    with torch.no_grad():
        for s in seqs:
            p, q = tuned(s[None]).log_softmax(-1), base(s[None]).log_softmax(-1)
            total += float(F.kl_div(q, p, log_target=True, reduction="sum"))  # KL(tuned || base)
            positions += len(s)
    assert float(diff.layer_kl[-1]) == pytest.approx(total / positions, rel=1e-4)
    assert float(diff.pattern_change.min()) >= 0 and float(diff.pattern_change.max()) <= 1.0 + 1e-6
    with pytest.raises(ValueError, match="by must be 'pattern' or 'attribution'"):
        diff.top_heads(1, by="loss")


def test_wrong_pairs_and_sequences_are_clear_errors() -> None:
    base = _lm()
    deeper = _lm(layers=3)
    names = sorted(set(deeper.state_dict()) - set(base.state_dict()))[:4]
    with pytest.raises(ValueError) as err:
        model_diff(base, deeper, _sequences(1))
    assert str(err.value) == (
        f"the two models are not of one architecture: their weights differ in names (e.g. {names}); diff compares "
        "a model with its own tuned version (merge a LoRA run's adapters first) or two models of one shape"
    )
    with pytest.raises(
        ValueError, match=r"not of one architecture: token_embedding.weight is \[20, 16\] in the base and \[20, 24\]"
    ):
        model_diff(base, _lm(d_model=24), _sequences(1))
    with pytest.raises(TypeError, match="the tuned model is a Linear"):
        model_diff(base, torch.nn.Linear(2, 2), _sequences(1))
    with pytest.raises(TypeError, match="diff reads decoder-only LanguageModels; the base model is a Linear"):
        model_diff(torch.nn.Linear(2, 2), base, _sequences(1))
    with pytest.raises(ValueError, match=r"^diff needs at least one sequence of token ids \(a prompt\)$"):
        model_diff(base, base, [])
    with pytest.raises(ValueError, match=r"^each sequence must have at least 2 tokens \(a next token to read at one"):
        model_diff(base, base, [torch.tensor([3])])


def test_weight_updates_are_largest_first_and_relative_to_the_base() -> None:
    base = _lm()
    tuned = copy.deepcopy(base)
    with torch.no_grad():
        tuned.lm_head.weight.add_(1.0)
        tuned.decoder.layers[0].ff.linear2.bias.add_(0.01)
    updates = weight_updates(base, tuned)
    names = list(updates)
    assert names[-1] == "decoder.layers.0.ff.linear2.bias"
    first = base.state_dict()[names[0]]
    assert updates[names[0]][0] == pytest.approx(first.numel() ** 0.5, rel=1e-5)  # ‖1‖_F = sqrt(n)
    assert updates[names[0]][1] == pytest.approx(first.numel() ** 0.5 / float(first.norm()), rel=1e-5)


def test_every_score_is_its_definition_computed_by_hand(pair: tuple[LanguageModel, LanguageModel]) -> None:
    """Two sequences of different lengths (3 and 9 tokens): the lens KL, the patterns' TV distance and the
    attribution change, each summed over the sequences' positions and divided by their number, as defined."""
    from attnkit.models.lens import logit_attribution, logit_lens

    base, tuned = pair
    seqs = [torch.tensor([3, 7, 5]), _sequences(1)[0][:9]]
    assert model_diff(base, tuned, [torch.tensor([3, 7])]).positions == 2  # 2 tokens: the shortest read
    diff = model_diff(base, tuned, seqs)
    kl, tv, att = torch.zeros(3), torch.zeros(2, 2), torch.zeros(2, 2)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(2)]
    with torch.no_grad():
        for s in seqs:
            ids = s[None]
            p = logit_lens(tuned, ids).logits[:, 0].log_softmax(-1)
            q = logit_lens(base, ids).logits[:, 0].log_softmax(-1)
            kl += (p.exp() * (p - q)).sum(-1).sum(-1)
            ca, cb = run_with_cache(base, ids), run_with_cache(tuned, ids)
            for layer, name in enumerate(names):
                tv[layer] += 0.5 * (ca[name][0] - cb[name][0]).abs().sum(-1).sum(-1)
            target = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)
            da = logit_attribution(base, ids, target).heads[0, :-1]
            db = logit_attribution(tuned, ids, target).heads[0, :-1]
            att += (db - da).abs().sum(0)
    positions = 3 + 9
    assert diff.positions == positions and diff.layers == logit_lens(base, seqs[0][None]).names
    torch.testing.assert_close(diff.layer_kl, kl / positions, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(diff.pattern_change, tv / positions, rtol=1e-5, atol=1e-7)
    assert diff.attribution_change is not None
    torch.testing.assert_close(diff.attribution_change, att / (positions - 2), rtol=1e-5, atol=1e-7)


def test_a_post_norm_model_has_no_attribution_change() -> None:
    torch.manual_seed(0)
    cfg = LanguageModelConfig(vocab_size=20, d_model=16, num_heads=2, num_layers=2, dim_feedforward=32, max_len=32,
                              norm_first=False)  # fmt: skip
    base = LanguageModel(cfg).eval()
    diff = model_diff(base, copy.deepcopy(base), _sequences(2))
    assert diff.attribution_change is None and diff.pattern_change.shape == (2, 2)
    with pytest.raises(ValueError, match="by must be 'pattern' or 'attribution'"):
        diff.top_heads(1, by="attribution")


def test_weight_updates_skip_integer_buffers_and_weights_the_tuned_model_lacks() -> None:
    class Net(torch.nn.Module):
        def __init__(self, extra: bool) -> None:
            super().__init__()
            if extra:
                self.first = torch.nn.Linear(2, 2)  # only in the base: skipped, and the rest still read
            self.big = torch.nn.Linear(100, 100, bias=False)
            self.small = torch.nn.Linear(1, 1, bias=False)
            self.register_buffer("steps", torch.zeros(3, dtype=torch.long))

    base, tuned = Net(extra=True), Net(extra=False)
    with torch.no_grad():
        base.small.weight.fill_(0.1)
    tuned.load_state_dict({k: v for k, v in base.state_dict().items() if not k.startswith("first.")})
    with torch.no_grad():
        tuned.big.weight.add_(0.01)  # norm 1.0, small relative to the base weight's
        tuned.small.weight.fill_(0.4)  # a smaller norm (0.3), a larger relative change (3)
        tuned.steps += 5
    updates = weight_updates(base, tuned)
    assert list(updates) == ["big.weight", "small.weight"]  # largest norm first, whatever the relative change
    assert updates["big.weight"][1] < updates["small.weight"][1]
