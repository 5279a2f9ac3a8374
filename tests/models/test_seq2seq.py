"""The encoder–decoder Transformer and its decoders: shapes, masks, initialisation, caching, beam search."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from attnkit.models import build_model
from attnkit.models.seq2seq import (
    Seq2SeqConfig,
    Seq2SeqTransformer,
    beam_search,
    greedy_decode,
    length_normalized,
    sequence_log_probs,
)

PAD, BOS, EOS = 0, 1, 2


def tiny(vocab: int = 20, *, seed: int = 0, eos_boost: float = 0.0, **kwargs) -> Seq2SeqTransformer:
    """A random model in eval mode; ``eos_boost`` makes EOS likelier so rows end at different lengths."""
    torch.manual_seed(seed)
    cfg = dict(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, num_heads=4, num_layers=2)
    cfg.update(dim_feedforward=64, dropout=0.0)
    cfg.update(kwargs)
    model = Seq2SeqTransformer(Seq2SeqConfig(**cfg)).eval()
    if eos_boost:
        with torch.no_grad():
            model.output.weight[EOS] += eos_boost * torch.randn(model.config.d_model)
    return model


def padded_source(batch: int = 5, length: int = 7, vocab: int = 20, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, length), generator=g)
    for row in range(1, batch, 2):
        src[row, length - row :] = PAD  # every other row padded by a different amount
    return src


VOCAB = 4 + 8  # the reverse task: specials + 8 symbols


def reverse_batch(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src [n, 7], tgt [n, 8])``: 3-6 random symbols + EOS, and BOS + the symbols reversed + EOS."""
    lengths = torch.randint(3, 7, (n,), generator=g)
    symbols = torch.randint(4, VOCAB, (n, 6), generator=g)
    src, tgt = torch.zeros(n, 7, dtype=torch.long), torch.zeros(n, 8, dtype=torch.long)
    for i, n_i in enumerate(lengths.tolist()):
        src[i, :n_i], src[i, n_i] = symbols[i, :n_i], EOS
        tgt[i, 0], tgt[i, 1 : n_i + 1], tgt[i, n_i + 1] = BOS, symbols[i, :n_i].flip(0), EOS
    return src, tgt


def train_reverse(steps: int, seed: int = 0) -> Seq2SeqTransformer:
    """A width-32, one-layer model trained ``steps`` steps on the reverse task (eval mode)."""
    torch.manual_seed(seed)
    cfg = Seq2SeqConfig(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=32, num_heads=2, num_layers=1,
        dim_feedforward=64, dropout=0.0, share_embeddings=True,
    )  # fmt: skip
    model = Seq2SeqTransformer(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        src, tgt = reverse_batch(64, g)
        tgt_in, tgt_out = tgt[:, :-1].masked_fill(tgt[:, :-1] == EOS, PAD), tgt[:, 1:]
        valid = tgt_out != PAD
        loss = F.cross_entropy(model(src, tgt_in)[valid], tgt_out[valid])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def half_trained() -> list[tuple[Seq2SeqTransformer, torch.Tensor]]:
    """Barely trained models (uncertain, with rows ending at different lengths) and padded sources:
    where beam search and greedy decoding differ."""
    out = []
    for seed, steps in ((0, 30), (1, 30), (2, 60)):
        src, _ = reverse_batch(16, torch.Generator().manual_seed(100 + seed))
        out.append((train_reverse(steps, seed), src))
    return out


# ---------------------------------------------------------------------- config and model
def test_config_validation_messages():
    with pytest.raises(ValueError, match="share_embeddings needs one vocabulary"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=12, share_embeddings=True)
    with pytest.raises(ValueError, match="must differ"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, bos_id=0)
    with pytest.raises(ValueError, match="below both vocabulary sizes"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=2)
    with pytest.raises(ValueError, match="Extra inputs"):
        Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, d_modle=3)
    cfg = Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, num_layers=3)
    assert cfg.decoder_layers == 3
    model = build_model("seq2seq", {"src_vocab_size": 10, "tgt_vocab_size": 11, "num_decoder_layers": 1})
    assert isinstance(model, Seq2SeqTransformer)
    assert len(model.encoder.layers) == 2 and len(model.decoder.layers) == 1


def test_shapes_and_attention_maps():
    model = tiny(vocab=20, tgt_vocab_size=25)
    src = padded_source()
    tgt_in = torch.randint(3, 25, (5, 6))
    tgt_in[:, 0] = BOS
    logits = model(src, tgt_in)
    assert logits.shape == (5, 6, 25)
    out, maps = model.forward_with_attention(src, tgt_in)
    torch.testing.assert_close(out, logits)
    assert [m.shape for m in maps["encoder"]] == [(5, 4, 7, 7)] * 2
    assert [m.shape for m in maps["decoder"]] == [(5, 4, 6, 6)] * 2
    assert [m.shape for m in maps["cross"]] == [(5, 4, 6, 7)] * 2
    src_mask = src != PAD
    for cross in maps["cross"]:
        torch.testing.assert_close(cross.sum(-1), torch.ones(5, 4, 6))
        assert cross.masked_select(~src_mask[:, None, None, :]).abs().max() == 0  # nothing on padding
    for self_attn in maps["decoder"]:
        assert torch.triu(self_attn, diagonal=1).abs().max() == 0  # causal
    assert model.get_attention_maps(src, tgt_in)["cross"][0].shape == (5, 4, 6, 7)


def test_initialisation_scale_tying_and_sharing():
    d = 64
    model = tiny(vocab=500, d_model=d, share_embeddings=True)
    emb = model.src_embedding.weight
    assert model.tgt_embedding is model.src_embedding
    assert model.output.weight.data_ptr() == emb.data_ptr()  # tied: one storage
    assert emb[PAD].abs().max() == 0
    assert emb[1:].std().item() == pytest.approx(d**-0.5, rel=0.05)
    # scaled by sqrt(d): unit variance per component, the scale of the sinusoidal encoding
    x = model.src_embedding(torch.arange(4, 500)) * model.embed_scale
    assert x.std().item() == pytest.approx(1.0, rel=0.05)
    # logits of the layer-normalised decoder output start with unit scale
    src, tgt = torch.randint(4, 500, (8, 10)), torch.randint(4, 500, (8, 9))
    assert 0.5 < model(src, tgt).std().item() < 2.0

    untied = tiny(vocab=50, tie_output=False)
    assert untied.tgt_embedding is not untied.src_embedding
    assert untied.output.weight.data_ptr() != untied.tgt_embedding.weight.data_ptr()


def test_source_padding_and_causality():
    model = tiny()
    src = padded_source()
    tgt = torch.randint(3, 20, (5, 6))
    tgt[:, 0] = BOS
    full = model(src, tgt)
    for row in range(5):
        n = int((src[row] != PAD).sum())
        alone = model(src[row : row + 1, :n], tgt[row : row + 1])
        torch.testing.assert_close(alone[0], full[row], atol=1e-5, rtol=1e-5)
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(3, 20, (5, 2))
    torch.testing.assert_close(model(src, changed)[:, :4], full[:, :4])  # later tokens change nothing before


def test_input_errors_are_clear():
    model = tiny()
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 20\)"):
        model(torch.tensor([[5, 25]]), torch.tensor([[BOS]]))
    with pytest.raises(ValueError, match="source token ids"):
        model.encode(torch.tensor([5, 6]))
    with pytest.raises(ValueError, match="src_padding_mask must be a bool tensor"):
        model.encode(torch.tensor([[5, 6]]), torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        greedy_decode(model, torch.tensor([[5, 6]]), max_len=0)
    with pytest.raises(ValueError, match="beam_size must be an int >= 1"):
        beam_search(model, torch.tensor([[5, 6]]), beam_size=0, max_len=5)
    learned = tiny(positional="learned", max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        learned(torch.randint(4, 20, (1, 9)), torch.tensor([[BOS]]))


# ---------------------------------------------------------------------- decoding
def test_cached_greedy_equals_uncached(half_trained):
    for model, src in half_trained:
        cached = greedy_decode(model, src, max_len=10, return_logits=True)
        full = greedy_decode(model, src, max_len=10, use_cache=False, return_logits=True)
        assert len(set(cached.lengths.tolist())) > 1, "rows should end at different steps"
        assert torch.equal(cached.tokens, full.tokens)
        assert torch.equal(cached.lengths, full.lengths)
        assert cached.logits is not None and full.logits is not None
        torch.testing.assert_close(cached.logits, full.logits, atol=1e-5, rtol=0)
        # rows stop at EOS and are padded after it; PAD and BOS are never generated
        for row, n in zip(cached.tokens.tolist(), cached.lengths.tolist()):
            assert row[n - 1] == EOS or n == 10
            assert all(t == PAD for t in row[n:])
            assert PAD not in row[:n] and BOS not in row[:n]


def test_beam_size_one_is_greedy(half_trained):
    cases = [(tiny(seed=seed, eos_boost=0.8), padded_source(seed=seed)) for seed in range(3)] + half_trained
    for (model, src), length_penalty, max_len in itertools.product(cases, (0.0, 0.7, 1.0), (10, 40)):
        greedy = greedy_decode(model, src, max_len=max_len)
        beam = beam_search(model, src, beam_size=1, max_len=max_len, length_penalty=length_penalty)
        assert torch.equal(beam.tokens, greedy.tokens)
        assert torch.equal(beam.lengths, greedy.lengths)
        torch.testing.assert_close(beam.log_probs, greedy.log_probs)


def test_beam_scores_match_teacher_forced_log_probs(half_trained):
    model, src = half_trained[0]
    beam = beam_search(model, src, beam_size=4, max_len=10)
    rescored = sequence_log_probs(model, src, beam.tokens, beam.lengths)
    torch.testing.assert_close(rescored, beam.log_probs, atol=1e-4, rtol=0)
    for ids, row, n in zip(beam.token_lists(), beam.tokens.tolist(), beam.lengths.tolist()):
        assert ids == (row[: n - 1] if row[n - 1] == EOS else row[:n])  # EOS and padding stripped


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_search_is_exact_with_a_wide_beam(length_penalty: float):
    """With a beam as wide as the number of prefixes nothing is pruned: beam search must return the
    best of all possible outputs, found here by enumerating them."""
    vocab, max_len = 7, 4  # generable: EOS, <unk>=3 and 4, 5, 6 -> 4 non-EOS tokens
    model = tiny(vocab=vocab, eos_boost=0.5)
    src = torch.tensor([[4, 5, 6, 5], [6, 6, 4, PAD]])
    beam = beam_search(model, src, beam_size=4**3, max_len=max_len, length_penalty=length_penalty)
    words = [3, 4, 5, 6]
    outputs = [[*p, EOS] for n in range(max_len) for p in itertools.product(words, repeat=n)]
    outputs += [list(p) for p in itertools.product(words, repeat=max_len)]
    for row in range(2):
        tokens = torch.full((len(outputs), max_len), PAD)
        for i, out in enumerate(outputs):
            tokens[i, : len(out)] = torch.tensor(out)
        lengths = torch.tensor([len(o) for o in outputs])
        logp = sequence_log_probs(model, src[row : row + 1].expand(len(outputs), -1), tokens, lengths)
        scores = length_normalized(logp, lengths, length_penalty)
        best = int(scores.argmax())
        assert beam.tokens[row, : beam.lengths[row]].tolist() == outputs[best]
        assert beam.scores(length_penalty)[row].item() == pytest.approx(scores[best].item(), abs=1e-5)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_search_beats_greedy_on_random_models(half_trained, length_penalty: float):
    """Beam search is not guaranteed to find a better-scoring output than greedy decoding (the
    greedy prefix can fall out of the beam), but it should almost always, and often strictly."""
    cases = [(tiny(seed=seed, eos_boost=0.8), padded_source(seed=seed)) for seed in range(4)] + half_trained
    gaps = []
    for model, src in cases:
        greedy = greedy_decode(model, src, max_len=10)
        beam = beam_search(model, src, beam_size=4, max_len=10, length_penalty=length_penalty)
        gaps.append(beam.scores(length_penalty) - greedy.scores(length_penalty))
    gap = torch.cat(gaps)
    assert (gap < -1e-5).float().mean() <= 0.03, gap
    assert (gap > 1e-5).float().mean() >= 0.2, gap
    assert gap.mean() > 0


def test_batched_beam_equals_one_sentence_at_a_time(half_trained):
    cases = [(tiny(eos_boost=0.6), padded_source(batch=6)), *half_trained[:2]]
    for model, src in cases:
        batched = beam_search(model, src, beam_size=3, max_len=10, length_penalty=0.6)
        for row in range(src.shape[0]):
            n = int((src[row] != PAD).sum())
            alone = beam_search(model, src[row : row + 1, :n], beam_size=3, max_len=10, length_penalty=0.6)
            length = int(alone.lengths[0])
            assert int(batched.lengths[row]) == length
            assert batched.tokens[row, :length].tolist() == alone.tokens[0, :length].tolist()
            assert batched.log_probs[row].item() == pytest.approx(alone.log_probs[0].item(), abs=1e-4)


def test_default_initialisation_learns_to_reverse_in_seconds():
    """A one-layer, width-32 model learns to reverse 3-6 symbols in 300 steps (a few seconds)."""
    model = train_reverse(300)
    src, tgt = reverse_batch(200, torch.Generator().manual_seed(123))
    hyps = greedy_decode(model, src, max_len=8).token_lists()
    refs = [row[1 : row.index(EOS)] for row in tgt.tolist()]
    exact = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
    assert exact >= 0.8, exact
