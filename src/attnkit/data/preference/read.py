"""Preference data in TRL's column conventions: one JSON object a line (``.jsonl``), or the rows of Parquet / Arrow
files with those columns (:func:`attnkit.data.readers.columnar_tasks.read_objects`).

* preference pairs (``dpo``): ``prompt`` / ``chosen`` / ``rejected``, each plain text or a conversation (a list of
  ``{"role", "content"}`` messages); or the implicit-prompt layout, ``chosen`` and ``rejected`` alone as whole
  conversations that share their first turns (the shared turns are the prompt, TRL's ``extract_prompt``);
* unpaired feedback (``kto``): ``prompt`` / ``completion`` / ``label`` (``true``: desirable), text or messages.

A record is a :class:`Completion`: its ``prompt`` (text, or messages) and its completions (text, or the messages
that follow the prompt). A line that is not valid JSON, not an object, lacks a column, mixes text and messages, or
has a malformed message is a ``ValueError`` naming the file and the line (``pairs.jsonl:12: ...``, or
``pairs.parquet:row 12: ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.data.readers.chats import ROLES
from attnkit.data.readers.columnar_tasks import read_objects

__all__ = ["Feedback", "Pair", "Turns", "read_feedback", "read_pairs"]

Turns = str | list[dict[str, str]]  # plain text, or a list of messages


@dataclass(frozen=True)
class Pair:
    """One preference pair: ``prompt`` and the ``chosen`` / ``rejected`` completions (all text, or all messages),
    its ``group`` (``None`` without ``data.group_column``) and where it was read (``file:line``)."""

    prompt: Turns
    chosen: Turns
    rejected: Turns
    group: str | None = None
    where: str = ""


@dataclass(frozen=True)
class Feedback:
    """One unpaired completion: ``prompt``, ``completion`` and whether it is desirable (``label``)."""

    prompt: Turns
    completion: Turns
    label: bool
    group: str | None = None
    where: str = ""


def _messages(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if not value:
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


def _turns(obj: dict[str, Any], key: str, where: str) -> Turns:
    if key not in obj:
        raise ValueError(f"{where}: missing {key!r} (keys: {sorted(obj)})")
    value = obj[key]
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _messages(value, where, key)
    raise ValueError(f"{where}: {key!r} must be a string or a list of messages, got {type(value).__name__}")


def _same_kind(where: str, **values: Turns) -> None:
    kinds = {k: "text" if isinstance(v, str) else "messages" for k, v in values.items()}
    if len(set(kinds.values())) > 1:
        raise ValueError(f"{where}: mixes plain text and messages ({kinds}); give every column in one form")


def _split_implicit(chosen: list[dict[str, str]], rejected: list[dict[str, str]], where: str) -> tuple[Turns, ...]:
    """TRL's implicit prompt (``extract_prompt``): the longest run of first messages ``chosen`` and ``rejected``
    share; the completions are the messages after it."""
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if not shared:
        raise ValueError(f"{where}: 'chosen' and 'rejected' share no first turns: no prompt; add a 'prompt' column")
    if shared == len(chosen) or shared == len(rejected):
        raise ValueError(f"{where}: 'chosen' or 'rejected' has nothing after the shared prompt turns")
    return chosen[:shared], chosen[shared:], rejected[shared:]


def _group(obj: dict[str, Any], group_key: str | None, where: str) -> str | None:
    if group_key is None:
        return None
    value = obj.get(group_key)
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise ValueError(
            f"{where}: data.group_column={group_key!r} needs a string or integer {group_key!r} on every line, "
            f"got {value!r}"
        )
    return str(value)


def _pair(obj: dict[str, Any], where: str, group: str | None) -> Pair:
    chosen, rejected = _turns(obj, "chosen", where), _turns(obj, "rejected", where)
    if "prompt" in obj:
        prompt = _turns(obj, "prompt", where)
        _same_kind(where, prompt=prompt, chosen=chosen, rejected=rejected)
    else:
        if isinstance(chosen, str) or isinstance(rejected, str):
            raise ValueError(
                f"{where}: no 'prompt' column; without one, 'chosen' and 'rejected' must be whole conversations "
                "(lists of messages) that share their first turns"
            )
        prompt, chosen, rejected = _split_implicit(chosen, rejected, where)
    return Pair(prompt, chosen, rejected, group, where)


def _feedback(obj: dict[str, Any], where: str, group: str | None) -> Feedback:
    prompt, completion = _turns(obj, "prompt", where), _turns(obj, "completion", where)
    _same_kind(where, prompt=prompt, completion=completion)
    if "label" not in obj:
        raise ValueError(f"{where}: missing 'label' (true: a desirable completion, false: an undesirable one)")
    label = obj["label"]
    if not isinstance(label, bool):
        raise ValueError(f"{where}: 'label' must be true or false, got {label!r:.40}")
    return Feedback(prompt, completion, label, group, where)


def _read(path: str | Path, make: Callable[[dict[str, Any], str, str | None], Any], group_key: str | None) -> list:
    out = []
    for obj, where in read_objects(path, "preference data"):
        out.append(make(obj, where, _group(obj, group_key, where)))
    if not out:
        raise ValueError(f"{path}: no records (the file is empty)")
    return out


def read_pairs(path: str | Path, *, group_key: str | None = None) -> list[Pair]:
    """Every preference pair of ``path`` (a ``.jsonl`` file or Parquet / Arrow data; see the module docstring)."""
    return _read(path, _pair, group_key)


def read_feedback(path: str | Path, *, group_key: str | None = None) -> list[Feedback]:
    """Every unpaired, labelled completion of ``path`` (``.jsonl`` or Parquet / Arrow; see the module docstring)."""
    return _read(path, _feedback, group_key)
