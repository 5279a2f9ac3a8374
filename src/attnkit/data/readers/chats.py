"""Conversations in JSON Lines files (``.jsonl``), one per line, in the three layouts fine-tuning data comes in.

* ``messages``: OpenAI's chat format, ``{"messages": [{"role": "user", "content": "..."}, {"role":
  "assistant", "content": "..."}, ...]}`` (roles ``system``, ``user``, ``assistant``, ``tool``);
* ``prompt`` / ``completion``: ``{"prompt": "...", "completion": "..."}`` (TRL's prompt-completion
  layout; each may also be a list of messages), read as a user message and the assistant's reply;
* Alpaca: ``{"instruction": "...", "input": "...", "output": "..."}`` (``input`` optional), read as a user
  message (the instruction, then a blank line and the input when there is one) and the reply.

Any layout may add ``"system": "..."``, put first as a system message (unless the messages already start
with one). Blank lines are skipped. A line that is not valid JSON, not an object, of no known layout, or
whose messages are malformed (no assistant reply, a role or content of the wrong type) is a ``ValueError``
naming the file and the line (``chats.jsonl:12: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.data.readers.jsonl import jsonl_objects

__all__ = ["LAYOUTS", "ROLES", "Chat", "chat_messages", "read_chats"]

LAYOUTS = ("messages", "prompt/completion", "instruction/input/output (alpaca)")
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Chat:
    """One conversation: its ``messages`` (``{"role", "content"}`` dicts), its ``group`` (the value of the
    group key, as a str; ``None`` without one) and where it was read (``source:line``)."""

    messages: list[dict[str, str]]
    group: str | None = None
    where: str = ""


def read_chats(path: str | Path, *, group_key: str | None = None) -> list[Chat]:
    """Every conversation of the ``.jsonl`` file ``path`` (see the module docstring); ``group_key``: the
    key naming each conversation's group (a string or an integer; required on every line when given)."""
    chats = []
    for obj, where in jsonl_objects(path, "conversations"):
        group = None
        if group_key is not None:
            value = obj.get(group_key)
            if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
                raise ValueError(
                    f"{where}: data.group_column={group_key!r} needs a string or integer {group_key!r} on every line, "
                    f"got {value!r}"
                )
            group = str(value)
        chats.append(Chat(chat_messages(obj, where), group, where))
    if not chats:
        raise ValueError(f"{path}: no conversations (the file is empty)")
    return chats


def chat_messages(obj: Mapping[str, Any], where: str = "conversation") -> list[dict[str, str]]:
    """The messages of one record of any layout (see the module docstring), checked; errors name ``where``."""
    if "messages" in obj:
        messages = _message_list(obj["messages"], where, "messages")
    elif "prompt" in obj and "completion" in obj:
        prompt, completion = obj["prompt"], obj["completion"]
        messages = [
            *(_message_list(prompt, where, "prompt") if isinstance(prompt, list) else [_user(prompt, where, "prompt")]),
            *(
                _message_list(completion, where, "completion")
                if isinstance(completion, list)
                else [{"role": "assistant", "content": _text(completion, where, "completion")}]
            ),
        ]
    elif "instruction" in obj and "output" in obj:
        instruction = _text(obj["instruction"], where, "instruction")
        extra = obj.get("input") or ""
        if not isinstance(extra, str):
            raise ValueError(f"{where}: 'input' must be a string, got {type(extra).__name__}")
        user = f"{instruction}\n\n{extra}" if extra.strip() else instruction
        messages = [
            {"role": "user", "content": user},
            {"role": "assistant", "content": _text(obj["output"], where, "output")},
        ]
    else:
        raise ValueError(
            f"{where}: no conversation in keys {sorted(obj)}; expected one of the layouts {', '.join(LAYOUTS)}"
        )
    system = obj.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise ValueError(f"{where}: 'system' must be a string, got {type(system).__name__}")
        if messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system}, *messages]
    if not any(m["role"] == "assistant" for m in messages):
        raise ValueError(f"{where}: the conversation has no assistant message: nothing to learn from it")
    return messages


def _user(value: Any, where: str, key: str) -> dict[str, str]:
    return {"role": "user", "content": _text(value, where, key)}


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def _message_list(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty list of {{'role', 'content'}} objects")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"{where}: {key}[{i}] must be an object with 'role' and 'content', got {message!r:.40}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"{where}: {key}[{i}] has role {role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"{where}: {key}[{i}] ({role}) needs a string 'content', got {type(content).__name__}")
        out.append({"role": role, "content": content})
    return out
