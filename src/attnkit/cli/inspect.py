"""Commands that look inside a decoder: ``inspect lens|attribution|patch|heads|over-training``, and ``diff``
(what tuning changed between two decoders)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from attnkit import api
from attnkit.cli.common import PLOT_ERRORS, fail, main
from attnkit.config import UserPath

JSON_HELP = "Print the result as JSON (default: a short summary)."
FIG_HELP = "Also draw it into this image file (.png or .svg)."


@main.group()
def inspect() -> None:
    """Look inside a decoder-only model (a run, attnkit or Hugging Face folder): the logit lens, logit
    attribution, activation patching, head scores and their timeline over training; JSON with --json, a figure
    with --out.

    \b
      attnkit inspect lens RUN "The old owl" --top 3 --json
      attnkit inspect attribution RUN "When Mary and John went, John gave it to" --target " Mary" --against " John"
      attnkit inspect patch RUN "... John gave it to" "... Mary gave it to" --target " Mary" --out p.png
      attnkit inspect heads RUN --out heads.png
      attnkit inspect over-training RUN --out timeline.png   (a run trained with trainer.snapshot_every_n_steps=K)
    """


def _finish(
    compute: Callable[[], dict[str, Any]], as_json: bool, out: str | None, summary: Callable[[dict[str, Any]], str]
) -> None:

    try:
        result = compute()
        written = api.inspect_figure(result, out) if out else None
    except PLOT_ERRORS as err:
        fail(err)
        return
    click.echo(json.dumps(result) if as_json else summary(result))
    if written is not None and not as_json:
        click.echo(f"wrote {written}")


def _best(values: list[list[float]], labels: Callable[[int, int], str], k: int = 3) -> str:
    cells = sorted(((v, i, j) for i, row in enumerate(values) for j, v in enumerate(row)), key=lambda c: -abs(c[0]))
    return ", ".join(f"{labels(i, j)} {v:+.3f}" for v, i, j in cells[:k])


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--out", type=UserPath(dir_okay=False), help=FIG_HELP)(fn)
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(fn)


def _head_score_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The repeated random sequences head scores are read on (``heads``, ``over-training``)."""
    fn = click.option("--seed", default=0, show_default=True, help="Seed of the random tokens.")(fn)
    fn = click.option("--batch", default=4, show_default=True, help="Repeated sequences.")(fn)
    return click.option(
        "--length", default=20, show_default=True, help="Random tokens in each half of the repeated sequences."
    )(fn)


@inspect.command("lens")
@click.argument("model", type=UserPath())
@click.argument("text")
@click.option("--top", default=3, show_default=True, type=click.IntRange(min=1), help="Top tokens per cell.")
@click.option("--target", help="Also the probability of this token at every layer and position.")
@_options
def lens(model: str, text: str, top: int, target: str | None, as_json: bool, out: str | None) -> None:
    """The logit lens of TEXT: each layer's residual stream through the final norm and the unembedding."""

    def summary(r: dict[str, Any]) -> str:
        rows = [f"{name}: {row[-1][0]['token']!r} {row[-1][0]['prob']:.3f}" for name, row in zip(r["layers"], r["top"])]
        return "top token at the last position, per layer\n" + "\n".join(rows)

    _finish(lambda: api.inspect_lens(model, text, top=top, target=target), as_json, out, summary)


@inspect.command("attribution")
@click.argument("model", type=UserPath())
@click.argument("text")
@click.option("--target", help="The token whose logit is split (default: the model's top prediction).")
@click.option("--against", help="Split logit(target) - logit(against) instead.")
@_options
def attribution(model: str, text: str, target: str | None, against: str | None, as_json: bool, out: str | None) -> None:
    """Direct logit attribution at the last position of TEXT: each head's and MLP's share of the target's logit."""

    def summary(r: dict[str, Any]) -> str:
        return f"total {r['total']:.4g}; top heads: {_best(r['heads'], lambda i, j: f'L{i}H{j}')}"

    _finish(lambda: api.inspect_attribution(model, text, target=target, against=against), as_json, out, summary)


@inspect.command("patch")
@click.argument("model", type=UserPath())
@click.argument("clean")
@click.argument("corrupted", required=False)
@click.option("--target", help="The answer token (default: the clean run's top prediction).")
@click.option("--against", help="The metric is logit(target) - logit(against) (default: the target's log-prob).")
@click.option("--by", type=click.Choice(["position", "head"]), default="position", show_default=True,
              help="Patch the residual stream per layer x position, or each head's output.")  # fmt: skip
@click.option("--ablate", type=click.Choice(["zero", "mean"]), help="Ablate each head of CLEAN instead (no CORRUPTED).")
@click.option("--chunk-size", default=32, show_default=True, type=click.IntRange(min=1), help="Patched runs per pass.")
@_options
def patch(
    model: str,
    clean: str,
    corrupted: str | None,
    target: str | None,
    against: str | None,
    by: str,
    ablate: str | None,
    chunk_size: int,
    as_json: bool,
    out: str | None,
) -> None:
    """Activation patching from CLEAN into CORRUPTED (texts of equal token length): 1 = clean, 0 = corrupted."""

    def summary(r: dict[str, Any]) -> str:
        label = (lambda i, j: f"L{i}@{j}") if r["by"] == "position" else (lambda i, j: f"L{i}H{j}")
        return f"{r['by']} ({r['metric']} of {r['target']!r}): strongest {_best(r['scores'], label)}"

    def compute() -> dict[str, Any]:
        return api.inspect_patch(model, clean, corrupted, target=target, against=against, by=by, ablate=ablate,
                             chunk_size=chunk_size)  # fmt: skip

    _finish(compute, as_json, out, summary)


@inspect.command("heads")
@click.argument("model", type=UserPath())
@_head_score_options
@_options
def heads(model: str, length: int, batch: int, seed: int, as_json: bool, out: str | None) -> None:
    """Previous-token, duplicate-token and induction scores of every head, on repeated random tokens."""

    def summary(r: dict[str, Any]) -> str:
        return "\n".join(
            f"{kind}: " + ", ".join(f"L{c['layer']}H{c['head']} {c['score']:.3f}" for c in cells)
            for kind, cells in r["top"].items()
        )

    _finish(lambda: api.inspect_heads(model, length=length, batch=batch, seed=seed), as_json, out, summary)


@main.command("diff")
@click.argument("base", type=UserPath())
@click.argument("tuned", type=UserPath())
@click.option("--prompts", "prompts", required=True, type=UserPath(exists=True, dir_okay=False),
              help="The prompts to compare on: a text file (one a line) or JSON lines (prompt or text).")  # fmt: skip
@click.option("--top", default=5, show_default=True, type=click.IntRange(min=1), help="Heads listed per ranking.")
@_options
def diff(base: str, tuned: str, prompts: str, top: int, as_json: bool, out: str | None) -> None:
    """What tuning changed between BASE and TUNED (a run and its sft, preference or LoRA run, or any two models
    of one architecture and tokenizer): per layer the KL divergence of the logit lenses, the heads whose attention
    patterns and logit attributions changed most, and the weight updates.

    \b
      attnkit diff runs/lm/base runs/sft/tuned --prompts prompts.txt --out diff.png
    """

    def summary(r: dict[str, Any]) -> str:
        kl = ", ".join(f"{v:.3g}" for v in r["layer_kl"])
        lines = [f"{r['prompts']} prompt(s), {r['positions']} positions", f"KL(tuned || base) per layer: {kl}"]
        lines.append("heads by pattern change: " + ", ".join(
            f"L{c['layer']}H{c['head']} {c['score']:.3f}" for c in r["top_pattern"]))  # fmt: skip
        if "top_attribution" in r:
            lines.append("heads by attribution change: " + ", ".join(
                f"L{c['layer']}H{c['head']} {c['score']:.3f}" for c in r["top_attribution"]))  # fmt: skip
        updates = r["weight_updates"][:top]
        lines.append(f"{len(r['weight_updates'])} weight(s) changed" + (": " if updates else ""))
        lines += [f"  {u['name']}: {u['norm']:.4g} ({u['relative']:.2%} of the base's)" for u in updates]
        return "\n".join(lines)

    _finish(lambda: api.diff_models(base, tuned, prompts, top=top), as_json, out, summary)


@inspect.command("over-training")
@click.argument("run", type=UserPath())
@_head_score_options
@_options
def over_training(run: str, length: int, batch: int, seed: int, as_json: bool, out: str | None) -> None:
    """The training timeline of RUN (trained with trainer.snapshot_every_n_steps=K): the head scores of each
    weight snapshot (previous-token, duplicate-token, induction) and the training loss, against steps."""

    def summary(r: dict[str, Any]) -> str:
        lines = [f"{len(r['snapshots'])} snapshot(s); per step: loss, best previous-token / duplicate / induction"]
        for row in r["snapshots"]:
            loss = "-" if row["loss"] is None else f"{row['loss']:.4f}"
            lines.append(f"step {row['step']}: loss {loss}, {row['max_previous_token']:.3f} / "
                         f"{row['max_duplicate_token']:.3f} / {row['max_induction']:.3f}")  # fmt: skip
        return "\n".join(lines)

    _finish(lambda: api.inspect_over_training(run, length=length, batch=batch, seed=seed), as_json, out, summary)
