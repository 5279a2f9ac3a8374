"""Look inside a decoder, from text: ``attnkit inspect lens|attribution|patch|heads``.

Each function loads the model at ``model`` (a run, an attnkit or Hugging Face model folder:
:func:`attnkit.tasks.load_model`; or an already loaded :class:`~attnkit.interop.Pretrained`), encodes the text
as a prompt (the model's BOS first, where its documents have one) and returns a JSON-ready ``dict``;
:func:`inspect_figure` draws any of them (:mod:`attnkit.viz.inspect`). Targets are token strings: a
vocabulary entry (``"Ġthe"``) or a text that encodes to exactly one token (``" the"``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from attnkit.interop import Pretrained
from attnkit.models.lm import LanguageModel

__all__ = [
    "inspect_attribution",
    "inspect_figure",
    "inspect_heads",
    "inspect_lens",
    "inspect_over_training",
    "inspect_patch",
    "load_decoder",
]

ModelSource = str | Path | Pretrained


def load_decoder(model: ModelSource, command: str) -> Pretrained:
    """The decoder-only language model at ``model`` with its tokenizer; anything else (an encoder, a translator, a
    classifier) is a :class:`ValueError` naming what it is and what ``command`` reads."""
    from attnkit.tasks import load_model

    pretrained = model if isinstance(model, Pretrained) else load_model(model)
    if not isinstance(pretrained.model, LanguageModel):
        raise ValueError(
            f"{pretrained.source} holds a {type(pretrained.model).__name__} ({pretrained.name!r}), which "
            f"attnkit inspect {command} does not support: it reads decoder-only language models (lm and sft runs, "
            "GPT-2/Llama-family folders); encoders and encoder-decoders have no next-token logits to read"
        )
    if pretrained.tokenizer is None:
        raise ValueError(f"{pretrained.source} has no tokenizer: attnkit inspect reads text")
    pretrained.model.eval()
    return pretrained


def _encode(pretrained: Pretrained, text: str) -> torch.Tensor:
    ids = pretrained.encode_prompt(text)
    context = pretrained.context
    if len(ids) > context:
        raise ValueError(f"the text is {len(ids)} tokens; the model's context is {context}: shorten it")
    return torch.tensor([ids], device=next(pretrained.model.parameters()).device)


def _tokens(pretrained: Pretrained, ids: torch.Tensor) -> list[str]:
    tok = pretrained.tokenizer
    assert tok is not None  # load_decoder checked
    return [str(tok.id_to_token(int(i))) for i in ids.reshape(-1).tolist()]


def token_id(pretrained: Pretrained, token: str, what: str = "target") -> int:
    """The id of ``token``: a vocabulary entry, else a text that encodes to one token (else a ``ValueError``)."""
    tok = pretrained.tokenizer
    assert tok is not None
    found = tok.token_to_id(token)
    if found is not None:
        return int(found)
    ids = tok.encode(token, add_special_tokens=False) if token else []
    unk = getattr(tok, "unk_id", None)
    if len(ids) != 1 or (unk is not None and ids[0] == unk):
        pieces = [str(tok.id_to_token(i)) for i in ids]
        raise ValueError(
            f"unknown {what} token {token!r}: it is not in the vocabulary and encodes to {len(ids)} tokens {pieces}; "
            f"give one token (a vocabulary entry, or a text that is one token)"
        )
    return int(ids[0])


def inspect_lens(model: ModelSource, text: str, *, top: int = 3, target: str | None = None) -> dict[str, Any]:
    """The logit lens of ``text``: per layer (the residual stream entering each block, then the model's output)
    and position, the ``top`` likeliest tokens with their probabilities, and the probability of the next input
    token (``next_prob``, ``[L + 1][T - 1]``) and of ``target`` (``target_prob``, when given)."""
    from attnkit.models.lens import logit_lens

    pretrained = load_decoder(model, "lens")
    if top < 1:
        raise ValueError(f"--top must be >= 1, got {top}")
    ids = _encode(pretrained, text)
    target_id = token_id(pretrained, target) if target is not None else None
    lens = logit_lens(pretrained.model, ids)
    probs = lens.probs()[:, 0]  # [L + 1, T, V]
    p_top, i_top = probs.topk(min(top, probs.shape[-1]), dim=-1)
    names = _tokens(pretrained, torch.arange(probs.shape[-1]))
    out: dict[str, Any] = {
        "command": "lens",
        "model": str(pretrained.source),
        "text": text,
        "tokens": _tokens(pretrained, ids),
        "layers": lens.names,
        "top": [
            [[{"token": names[int(i)], "prob": float(p)} for p, i in zip(ps, is_)] for ps, is_ in zip(pl, il)]
            for pl, il in zip(p_top.tolist(), i_top.tolist())
        ],
        "next_prob": probs[:, :-1]
        .gather(-1, ids[0, 1:].view(1, -1, 1).expand(probs.shape[0], -1, 1))
        .squeeze(-1)
        .tolist(),
    }
    if target_id is not None:
        out["target"] = names[target_id]
        out["target_prob"] = probs[..., target_id].tolist()
    return out


def inspect_attribution(
    model: ModelSource, text: str, *, target: str | None = None, against: str | None = None
) -> dict[str, Any]:
    """Direct logit attribution at the last position of ``text``: what each head (``heads [L][H]``), each MLP
    (``mlps [L]``) and the embeddings write into the logit of ``target`` (default: the model's top prediction),
    or into ``logit(target) - logit(against)``; the parts and ``rest`` (biases) add up to ``total``."""
    from attnkit.models.lens import logit_attribution

    pretrained = load_decoder(model, "attribution")
    ids = _encode(pretrained, text)
    lm = pretrained.model
    if target is None:
        with torch.no_grad():
            target_id = int(lm(ids)[0, -1].argmax())
    else:
        target_id = token_id(pretrained, target)
    against_id = token_id(pretrained, against, "against") if against is not None else None
    att = logit_attribution(lm, ids, target_id, against_id)
    tok = pretrained.tokenizer
    assert tok is not None
    return {
        "command": "attribution",
        "model": str(pretrained.source),
        "text": text,
        "tokens": _tokens(pretrained, ids),
        "target": str(tok.id_to_token(target_id)),
        "against": None if against_id is None else str(tok.id_to_token(against_id)),
        "heads": att.heads[0, -1].tolist(),
        "mlps": att.mlps[0, -1].tolist(),
        "embed": float(att.embed[0, -1]),
        "rest": float(att.rest[0, -1]),
        "total": float(att.total[0, -1]),
    }


def inspect_patch(
    model: ModelSource,
    clean: str,
    corrupted: str | None = None,
    *,
    target: str | None = None,
    against: str | None = None,
    by: str = "position",
    ablate: str | None = None,
    chunk_size: int = 32,
) -> dict[str, Any]:
    """Activation patching from ``clean`` into ``corrupted`` (texts of equal token length) of the last position's
    metric: ``logit(target) - logit(against)``, or the log-probability of ``target`` without ``against``
    (``target`` defaults to the clean run's top prediction). ``by="position"``: the residual stream entering each
    block at each position (``scores [L][T]``); ``by="head"``: each head's output (``scores [L][H]``); scores are
    normalised, 0 = the corrupted run, 1 = the clean run. With ``ablate`` (``"zero"`` or ``"mean"``) and no
    ``corrupted``: each head of the clean run ablated, ``scores [L][H]`` the change of the metric."""
    from attnkit.models.patching import ablate_heads, logit_diff, patch_heads, patch_residual, target_logprob

    pretrained = load_decoder(model, "patch")
    if by not in ("position", "head"):
        raise ValueError(f"--by must be position or head, got {by!r}")
    if ablate is not None and corrupted is not None:
        raise ValueError("--ablate ablates heads of CLEAN alone: leave CORRUPTED out, or drop --ablate to patch")
    if ablate is None and corrupted is None:
        raise ValueError("give a CORRUPTED text to patch into, or --ablate zero|mean to ablate heads of CLEAN")
    lm = pretrained.model
    clean_ids = _encode(pretrained, clean)
    tok = pretrained.tokenizer
    assert tok is not None
    if target is None:
        with torch.no_grad():
            target_id = int(lm(clean_ids)[0, -1].argmax())
    else:
        target_id = token_id(pretrained, target)
    against_id = token_id(pretrained, against, "against") if against is not None else None
    metric = target_logprob(target_id) if against_id is None else logit_diff(target_id, against_id)
    out: dict[str, Any] = {
        "command": "patch",
        "model": str(pretrained.source),
        "clean": clean,
        "clean_tokens": _tokens(pretrained, clean_ids),
        "target": str(tok.id_to_token(target_id)),
        "against": None if against_id is None else str(tok.id_to_token(against_id)),
        "metric": "logprob" if against_id is None else "logit_diff",
    }
    if ablate is not None:
        result = ablate_heads(lm, clean_ids, metric, how=ablate, chunk_size=chunk_size)  # type: ignore[arg-type]  # checked there
        return out | {
            "by": f"ablate-{ablate}",
            "base": result.base,
            "scores": result.effect.tolist(),
            "raw": result.raw.tolist(),
        }
    assert corrupted is not None
    corrupted_ids = _encode(pretrained, corrupted)
    if corrupted_ids.shape[1] != clean_ids.shape[1]:
        raise ValueError(
            f"patching needs texts of equal token length: CLEAN is {clean_ids.shape[1]} tokens, CORRUPTED "
            f"{corrupted_ids.shape[1]}; reword one of them so that both have the same number of tokens"
        )
    sweep = patch_residual if by == "position" else patch_heads
    patched = sweep(lm, clean_ids, corrupted_ids, metric, chunk_size=chunk_size)
    return out | {
        "corrupted": corrupted,
        "corrupted_tokens": _tokens(pretrained, corrupted_ids),
        "by": by,
        "clean_metric": patched.clean,
        "corrupted_metric": patched.corrupted,
        "scores": patched.scores.tolist(),
        "raw": patched.raw.tolist(),
    }


def inspect_heads(model: ModelSource, *, length: int = 20, batch: int = 4, seed: int = 0) -> dict[str, Any]:
    """Previous-token, duplicate-token and induction scores of every head (``[L][H]`` each,
    :func:`attnkit.models.heads.head_scores`), and the top heads of each kind."""
    from attnkit.models.heads import head_scores

    pretrained = load_decoder(model, "heads")
    if length < 2 or batch < 1:
        raise ValueError(f"--length must be >= 2 and --batch >= 1, got {length} and {batch}")
    scores = head_scores(pretrained.model, length=length, batch=batch, seed=seed)
    out: dict[str, Any] = {"command": "heads", "model": str(pretrained.source), "length": length, "batch": batch}
    out["seed"] = seed
    top: dict[str, list[dict[str, Any]]] = {}
    for kind in ("previous_token", "duplicate_token", "induction"):
        values: torch.Tensor = getattr(scores, kind)
        out[kind] = values.tolist()
        best = values.flatten().topk(min(3, values.numel()))
        heads = values.shape[1]
        top[kind] = [
            {"layer": int(i) // heads, "head": int(i) % heads, "score": float(v)}
            for v, i in zip(best.values, best.indices)
        ]
    out["top"] = top
    return out


def inspect_figure(result: dict[str, Any], out: str | Path) -> Path:
    """Draw what an ``inspect_*`` function returned (:mod:`attnkit.viz.inspect`) into ``out`` (.png or .svg)."""
    from attnkit.api.plots import save_figure
    from attnkit.viz.inspect import inspect_figure as draw

    return save_figure(draw(result), out)


def inspect_over_training(run: str | Path, *, length: int = 20, batch: int = 4, seed: int = 0) -> dict[str, Any]:
    """The training timeline of ``run`` (a run trained with ``trainer.snapshot_every_n_steps=K``): for each weight
    snapshot, its step, the training loss at that step and the previous-token, duplicate-token and induction scores
    of every head (``[L][H]`` each, as :func:`inspect_heads`), in ``snapshots``, by step."""
    from attnkit.models.heads import head_scores
    from attnkit.models.lora import merge_lora
    from attnkit.tasks import load_run
    from attnkit.training.resolve import resolve_model
    from attnkit.training.snapshots import load_snapshot, read_snapshot_index

    pretrained = load_decoder(run, "over-training")
    run_dir = resolve_model(run).run_dir
    entries = read_snapshot_index(run_dir) if run_dir is not None else []
    if not entries:
        raise ValueError(
            f"{run} has no weight snapshots (snapshots/index.json in its run folder): train it with "
            "trainer.snapshot_every_n_steps=K to keep the weights every K steps"
        )
    assert run_dir is not None
    # A LoRA run's snapshots hold its adapters: loaded into the run's unmerged model, then merged into a copy.
    adapters = load_run(run_dir).module.model if entries[0].get("lora") else None
    kinds = ("previous_token", "duplicate_token", "induction")
    snapshots = []
    for entry in entries:
        if adapters is not None:
            load_snapshot(adapters, run_dir, entry)
            model = merge_lora(copy.deepcopy(adapters))
        else:
            load_snapshot(pretrained.model, run_dir, entry)
            model = pretrained.model
        scores = head_scores(model.eval(), length=length, batch=batch, seed=seed)
        row: dict[str, Any] = {"step": int(entry["step"]), "loss": entry.get("loss")}
        for kind in kinds:
            values: torch.Tensor = getattr(scores, kind)
            row[kind] = values.tolist()
            row[f"max_{kind}"] = float(values.max())
        snapshots.append(row)
    return {
        "command": "over-training",
        "model": str(pretrained.source),
        "run": str(run_dir),
        "length": length,
        "steps": [row["step"] for row in snapshots],
        "loss": [row["loss"] for row in snapshots],
        "snapshots": snapshots,
    }
