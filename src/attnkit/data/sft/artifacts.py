"""What an sft run stores besides its tokenizer: the chat template it was trained with (and the special-token
strings it is rendered with) and the base's ``generation_config.json``, so that ``attnkit chat`` / ``serve`` /
``export`` talk to the run in the format it learned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attnkit.data.lm.blocks import artifacts_of
from attnkit.text.chat import ChatTemplate
from attnkit.text.tokenizers import Tokenizer

__all__ = ["chat_artifacts", "chat_of", "write_chat_files"]


def chat_artifacts(
    tokenizer: Tokenizer, template: ChatTemplate | None, generation_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The artifacts of an sft run: its tokenizer (:func:`~attnkit.data.lm.blocks.artifacts_of`), its chat
    template's source and special tokens (``None``: attnkit's default template) and the generation config."""
    out = artifacts_of(tokenizer)
    out["chat_template"] = None if template is None else template.source
    out["chat_special_tokens"] = {} if template is None else dict(template.special_tokens)
    out["generation_config"] = dict(generation_config or {})
    return out


def chat_of(artifacts: dict[str, Any] | None) -> tuple[ChatTemplate | None, dict[str, Any]]:
    """``(chat template or None, generation config)`` stored in a run's artifacts (``(None, {})`` for runs that
    store none: :meth:`ChatTemplate.default` applies)."""
    artifacts = artifacts or {}
    source = artifacts.get("chat_template")
    template = None
    if isinstance(source, str) and source.strip():
        template = ChatTemplate(source, artifacts.get("chat_special_tokens") or {}, origin="the run's chat template")
    generation = artifacts.get("generation_config")
    return template, dict(generation) if isinstance(generation, dict) else {}


def write_chat_files(artifacts: dict[str, Any] | None, folder: str | Path) -> None:
    """Write a run's chat template (``chat_template.jinja``) and ``generation_config.json`` into the model
    folder ``folder`` (what ``attnkit chat`` / ``serve`` and transformers read); nothing for runs without."""
    template, generation = chat_of(artifacts)
    folder = Path(folder)
    if template is not None:
        (folder / "chat_template.jinja").write_text(template.source, encoding="utf-8")
    if generation:
        (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
