"""Commands for model folders: ``import`` and ``export``."""

from __future__ import annotations

import click

from attnkit import api
from attnkit.cli.common import USER_ERRORS, fail, main
from attnkit.config import UserPath


@main.command("import")
@click.argument("path", type=UserPath())
@click.option("--out", required=True, type=UserPath(file_okay=False), help="The attnkit model folder to write.")
def import_model(path: str, out: str) -> None:
    """Convert the Hugging Face BERT, GPT-2, Llama, Mistral or Qwen2 folder PATH (config.json, weights,
    sharded or not, tokenizer files) into an attnkit model folder OUT (model.safetensors + attnkit.json +
    tokenizer). Nothing is downloaded.

    \b
      attnkit import ./bert-base-uncased --out models/bert
      attnkit train classify --init models/bert data.max_len=128
    """
    try:
        pretrained = api.import_model(path, out)
    except USER_ERRORS as err:
        fail(err)
        return
    n = sum(p.numel() for p in pretrained.model.parameters())
    click.echo(f"{path} -> {out}: {pretrained.name} ({type(pretrained.model).__name__}, {n:,} parameters)")


@main.command()
@click.argument("run", type=UserPath())
@click.option("--out", required=True, type=UserPath(file_okay=False), help="The model folder to write.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["attnkit", "hf"]),
    default="attnkit",
    show_default=True,
    help="attnkit: model.safetensors + attnkit.json; hf: a Hugging Face folder (config.json, model.safetensors, "
    "tokenizer.json) that transformers loads.",
)
@click.option("--merge", is_flag=True, help="A LoRA run: fold its adapters into the base weights (a plain model).")
def export(run: str, out: str, fmt: str, merge: bool) -> None:
    """Write the model of RUN (a run folder or checkpoint file) to OUT as model.safetensors + attnkit.json
    (with the run's task and data artifacts); attnkit.interop.load_model(OUT) loads it back bit-exactly.

    With --format hf, RUN is an lm run or an attnkit model folder of a language model (e.g. written by
    `attnkit import`), written as a Hugging Face llama / mistral / qwen2 (rotary, RMSNorm, SwiGLU) or
    gpt2 (learned positions, LayerNorm) checkpoint.

    A LoRA run (model.lora) needs --merge: the base weights plus the adapters, loadable without peft.

    \b
      attnkit export runs/lm/version_0 --out hf/my-lm --format hf
    """
    try:
        exported = api.export(run, out, format=fmt, merge=merge)
    except USER_ERRORS as err:
        fail(err)
        return
    written = f" ({exported.model_type})" if exported.model_type is not None else ""
    click.echo(f"{exported.source} -> {out}{written}")
