"""Chat templates: a model's ``chat_template`` read from its folder and rendered as transformers does.

A chat model is trained on conversations written in its own format (ChatML's ``<|im_start|>user ...
<|im_end|>``, Llama 3's ``<|start_header_id|>user<|end_header_id|> ... <|eot_id|>``, Mistral's
``[INST] ... [/INST]``). The model folder holds that format as a jinja template; :class:`ChatTemplate`
reads it (:meth:`ChatTemplate.from_folder`) and renders a list of messages with it exactly as
transformers' ``apply_chat_template(..., tokenize=False)`` does (same sandboxed jinja2 environment,
globals and filters; transformers itself is not imported). :func:`encode_chat` gives the ids the model
expects, :func:`stop_ids` / :func:`stop_strings` where generation should stop (the end of the
assistant's turn, the EOS of ``generation_config.json``). Models without a template (attnkit's own lm
runs) get :meth:`ChatTemplate.default`, a plain-text format.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache, cached_property, lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from attnkit.text.tokenizers import Tokenizer

__all__ = [
    "SPECIAL_TOKEN_NAMES",
    "ChatTemplate",
    "ChatTemplateError",
    "check_messages",
    "encode_chat",
    "eos_token_ids",
    "read_generation_config",
    "stop_ids",
    "stop_strings",
]

logger = logging.getLogger(__name__)

#: The special-token variables a template sees (transformers' ``special_tokens_map``), when the folder names them.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_PROBE_USER, _PROBE_REPLY, _PROBE_NEXT = "attnkit-probe-question", "attnkit-probe-answer", "attnkit-probe-again"

DEFAULT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if not loop.first %}{{ '\\n\\n' }}{% endif %}"
    "{{- message['role'] | capitalize }}: {{ message['content'] | trim }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '\\n\\nAssistant:' }}{% endif %}"
)
DEFAULT_STOP_STRINGS = ("\n\nUser:",)


class ChatTemplateError(ValueError):
    """A chat template refused the messages (its ``raise_exception``) or failed while rendering them."""


class _TemplateRefusal(jinja2.TemplateError):
    """What the template's ``raise_exception(message)`` raises (a ``TemplateError``, as in transformers)."""


def _raise_exception(message: str) -> None:
    raise _TemplateRefusal(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
    """transformers' ``tojson`` filter: plain ``json.dumps`` (jinja's own escapes HTML characters)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _TemplateDict:
    """``dict`` in a template: builds plain dicts, with no attribute access to the ``dict`` type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """jinja's ``namespace`` refusing underscore-prefixed attributes (no way into CPython internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja's signature trick: namespace(self=...) works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore-prefixed attributes on a namespace, got {name!r}"
            )


class _GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers marks the assistant's tokens with it): its body."""

    tags = {"generation"}  # noqa: RUF012  # jinja's Extension declares tags as a plain set attribute

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


@cache
def _environment() -> ImmutableSandboxedEnvironment:
    """The one environment every template is compiled in (as transformers sets it up)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


@lru_cache(maxsize=32)
def _compiled(source: str) -> jinja2.Template:
    """``source`` compiled (cached: a model's template is compiled once however often it is read)."""
    return _environment().from_string(source)


def _plain(value: Any) -> Any:
    """``value`` rebuilt from plain JSON types (as transformers passes data into the sandbox); other objects
    become a placeholder ``"<TypeName>"``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for kind in (str, bool, int, float):
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


# ====================================================================== messages
def check_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` checked: a non-empty list of dicts, each with a str ``"role"`` (``system``, ``user``,
    ``assistant``, ``tool``, or any other the template knows) and a str ``"content"``. Returns copies;
    other keys are kept, those set to ``None`` dropped (as transformers does). Raises ``TypeError`` /
    ``ValueError`` saying which message is wrong and how."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise TypeError(
            "messages must be a list of {'role': ..., 'content': ...} dicts, "
            f"got {type(messages).__name__}; wrap a single message in a list"
        )
    if not messages:
        raise ValueError("messages is empty; give at least one {'role': 'user', 'content': ...} message")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise TypeError(f"message {i} must be a dict with 'role' and 'content', got {type(message).__name__}")
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f"message {i} has no {key!r}; every message needs 'role' and 'content' (strings)")
            if not isinstance(message[key], str):
                got = type(message[key]).__name__
                raise TypeError(f"message {i}: {key!r} must be a str, got {got}")
        checked.append({key: value for key, value in message.items() if value is not None})
    return checked


def _alias_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' aliasing: a message's reasoning (``reasoning_content``, ``thinking`` or ``reasoning``)
    is given to the template as ``reasoning_content`` and ``thinking``."""
    out = []
    for message in messages:
        fields = ("reasoning_content", "thinking", "reasoning")
        reasoning = next((message[key] for key in fields if message.get(key) is not None), None)
        out.append(message if reasoning is None else {"thinking": reasoning, **message, "reasoning_content": reasoning})
    return out


# ====================================================================== the template
class ChatTemplate:
    """A chat template: its jinja ``source`` and the special-token strings it is rendered with.

    Args:
        source: the jinja text (``chat_template`` of a model folder).
        special_tokens: ``bos_token``, ``eos_token``, ... -> token string (or ``None``: not given to the
            template, where it is undefined and renders as ``""``, as in transformers).
        origin: where the template came from, named in error messages (a file path).
        stop_strings: extra texts that end the assistant's turn (the default template's ``"\\n\\nUser:"``).
        variants: other named templates of the folder (``tool_use`` is rendered when tools are given).

    A jinja syntax error is a ``ValueError`` naming ``origin`` and the template's line.
    """

    def __init__(
        self,
        source: str,
        special_tokens: Mapping[str, str | None] | None = None,
        *,
        origin: str = "chat template",
        stop_strings: Sequence[str] = (),
        variants: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(source, str) or not source.strip():
            raise ValueError(f"{origin}: a chat template must be a non-empty str, got {source!r}")
        unknown = sorted(set(special_tokens or {}) - set(SPECIAL_TOKEN_NAMES))
        if unknown:
            raise ValueError(f"{origin}: unknown special tokens {unknown}; expected some of {SPECIAL_TOKEN_NAMES}")
        self.source = source
        self.origin = origin
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if isinstance(v, str)}
        self.stop_strings = tuple(stop_strings)
        self.variants = dict(variants or {})
        self._compiled = {"default": self._compile(source, origin)}
        for name, text in self.variants.items():
            self._compiled[name] = self._compile(text, f"{origin} ({name!r} template)")

    @staticmethod
    def _compile(source: str, origin: str) -> jinja2.Template:
        try:
            return _compiled(source)
        except jinja2.TemplateSyntaxError as err:
            raise ValueError(
                f"{origin}: jinja syntax error at line {err.lineno} of the chat template: {err.message}; "
                "fix the template (transformers cannot render it either)"
            ) from None

    def __repr__(self) -> str:
        return f"ChatTemplate(origin={self.origin!r}, special_tokens={self.special_tokens!r})"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def default(cls, special_tokens: Mapping[str, str | None] | None = None) -> ChatTemplate:
        """attnkit's plain-text template, for models without one (attnkit's own lm runs, whose char/word/bpe
        tokenizers have no turn tokens). Each message is ``"<Role>: <content>"`` (role capitalised, content
        stripped), messages are separated by a blank line, and the generation prompt is ``"\\n\\nAssistant:"``::

            System: You are terse.

            User: Hi!

            Assistant: Hello.

            User: Bye?

            Assistant:

        No special tokens are written. The assistant's turn ends where the next one would start: the stop
        string ``"\\n\\nUser:"``."""
        return cls(DEFAULT_TEMPLATE, special_tokens, origin="attnkit's default chat template",
                   stop_strings=DEFAULT_STOP_STRINGS)  # fmt: skip

    @classmethod
    def from_folder(cls, folder: str | Path) -> ChatTemplate | None:
        """The chat template of a model folder, read as transformers 5 does, or ``None`` when it has none.

        ``chat_template.jinja`` wins (with the named ones in ``additional_chat_templates/*.jinja``); else
        ``tokenizer_config.json``'s ``"chat_template"`` (a str, or a list of ``{"name", "template"}`` whose
        ``"default"`` is used); else ``chat_template.json`` (``{"chat_template": ...}``, a processor's file).
        Special tokens: ``tokenizer_config.json``'s ``bos_token``, ``eos_token``, ... (a str or
        ``{"content": ...}``); ``special_tokens_map.json`` overrides them when the config has no
        ``added_tokens_decoder`` (transformers' legacy rule)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is not a folder; give a model folder (with tokenizer_config.json)")
        config = _read_json(folder / "tokenizer_config.json")
        specials = {name: _token_string(config.get(name)) for name in SPECIAL_TOKEN_NAMES}
        if "added_tokens_decoder" not in config:
            legacy = _read_json(folder / "special_tokens_map.json")
            specials.update({k: _token_string(legacy[k]) for k in SPECIAL_TOKEN_NAMES if k in legacy})
        templates: dict[str, str] = {}
        origins: dict[str, Path] = {}
        if (folder / "chat_template.jinja").is_file():
            templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
            origins["default"] = folder / "chat_template.jinja"
        extra_dir = folder / "additional_chat_templates"
        for path in sorted(extra_dir.glob("*.jinja")) if extra_dir.is_dir() else []:
            templates[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
        if not templates and "chat_template" in config:
            templates = _named_templates(config["chat_template"], folder / "tokenizer_config.json")
            origins["default"] = folder / "tokenizer_config.json"
        if not templates and (folder / "chat_template.json").is_file():
            path = folder / "chat_template.json"
            templates = _named_templates(_read_json(path).get("chat_template"), path)
            origins["default"] = path
        if not templates:
            return None
        if "default" not in templates:
            raise ValueError(
                f"{folder}: the chat templates {sorted(templates)} include no 'default' one; "
                "add chat_template.jinja (the template to use)"
            )
        source = templates.pop("default")
        logger.debug("chat template of %s read from %s", folder, origins["default"])
        return cls(source, specials, origin=str(origins["default"]), variants=templates)

    # ------------------------------------------------------------------ rendering
    def render(self, messages: Any, *, add_generation_prompt: bool = True, **extra: Any) -> str:
        """The conversation as text, as transformers' ``apply_chat_template(messages, tokenize=False,
        add_generation_prompt=...)``: the template sees ``messages``, ``add_generation_prompt``, the special
        tokens, ``tools`` and ``documents`` (``None`` unless given: lists of dicts) and any ``extra`` variable
        (``date_string=...``; these override the special tokens). A template's ``raise_exception`` (Mistral's
        "roles must alternate") or a failure inside it is a :class:`ChatTemplateError` with its message."""
        checked = _alias_reasoning(check_messages(messages))
        tools, documents = extra.pop("tools", None), extra.pop("documents", None)
        for name, value in (("tools", tools), ("documents", documents)):
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value)):
                raise TypeError(f"{name} must be a list of dicts (JSON schemas for tools), got {value!r:.80}")
        template = self._compiled["tool_use" if tools and "tool_use" in self._compiled else "default"]
        variables = {**self.special_tokens, **_plain(extra)}
        try:
            return template.render(
                messages=_plain(checked),
                tools=_plain(tools),
                documents=_plain(documents),
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
        except _TemplateRefusal as err:
            raise ChatTemplateError(f"the chat template ({self.origin}) refused these messages: {err}") from None
        except (jinja2.TemplateError, TypeError) as err:
            raise ChatTemplateError(
                f"the chat template ({self.origin}) failed on these messages: {type(err).__name__}: {err}"
            ) from None

    @cached_property
    def _end_of_turn(self) -> str | None:
        user = {"role": "user", "content": _PROBE_USER}
        reply = {"role": "assistant", "content": _PROBE_REPLY}
        try:
            closed = self.render([user, reply], add_generation_prompt=False)
            after = closed[closed.rindex(_PROBE_REPLY) + len(_PROBE_REPLY) :].strip()
            if after:
                return after
            # nothing written after the last reply: the turn ends where the next message starts
            longer = self.render([user, reply, {"role": "user", "content": _PROBE_NEXT}], add_generation_prompt=False)
            start = longer.rindex(_PROBE_REPLY) + len(_PROBE_REPLY)
            between = longer[start : longer.index(_PROBE_NEXT, start)].rstrip()
            return between or None
        except (ChatTemplateError, ValueError):  # the template refuses the probe, or drops its text
            logger.info("%s: could not find the end-of-turn text by rendering a probe conversation", self.origin)
            return None

    def end_of_turn(self) -> str | None:
        """What the template writes after an assistant message (``"<|im_end|>"``, ``"<|eot_id|>"``, ``"</s>"``),
        surrounding whitespace stripped: generation stops there. Found by rendering a probe conversation
        (user, assistant); when nothing follows the reply, the text up to the next message (the default
        template's ``"\\n\\nUser:"``). ``None`` when the template refuses the probe."""
        return self._end_of_turn


# ====================================================================== ids and stops
def encode_chat(
    tokenizer: Tokenizer,
    template: ChatTemplate | None,
    messages: Any,
    *,
    add_generation_prompt: bool = True,
    **extra: Any,
) -> list[int]:
    """The ids of ``messages`` rendered with ``template`` (``None``: :meth:`ChatTemplate.default`; ``extra``
    variables as in :meth:`ChatTemplate.render`).

    A ``pretrained`` tokenizer encodes the text without adding its own special tokens (the template writes
    BOS itself), as transformers' ``apply_chat_template(..., tokenize=True)``; attnkit's own kinds
    (char/word/bpe) get ``[bos] + encode(text)``."""
    template = ChatTemplate.default() if template is None else template
    text = template.render(messages, add_generation_prompt=add_generation_prompt, **extra)
    if tokenizer.spec.pretrained:
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text, add_bos=tokenizer.bos_id is not None)


def read_generation_config(folder: str | Path) -> dict[str, Any]:
    """``generation_config.json`` of a model folder as a dict (``{}`` when there is none)."""
    return _read_json(Path(folder) / "generation_config.json")


def eos_token_ids(generation_config: Mapping[str, Any] | None) -> list[int]:
    """``generation_config``'s ``eos_token_id`` (an int or a list) as a list; ``[]`` when it has none."""
    given = (generation_config or {}).get("eos_token_id")
    ids = given if isinstance(given, list) else [] if given is None else [given]
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or i < 0:  # an id past the tokenizer's may be the model's
            raise ValueError(
                f"generation config: eos_token_id must be an int >= 0 or a list of them, got {given!r}; "
                "fix generation_config.json"
            )
    return list(ids)


def stop_ids(
    tokenizer: Tokenizer, template: ChatTemplate | None, generation_config: Mapping[str, Any] | None = None
) -> list[int]:
    """The ids that end generation: ``generation_config``'s ``eos_token_id`` (an int or a list), the
    tokenizer's EOS, and the template's :meth:`~ChatTemplate.end_of_turn` when it is one token of the
    vocabulary (``<|im_end|>``, ``<|eot_id|>``). In that order, without repeats."""
    ids = eos_token_ids(generation_config)
    if tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
    end = template.end_of_turn() if template is not None else None
    end_id = tokenizer.token_to_id(end) if end else None
    if end_id is not None:
        ids.append(end_id)
    return list(dict.fromkeys(ids))


def stop_strings(tokenizer: Tokenizer, template: ChatTemplate | None) -> list[str]:
    """The texts that end generation: the template's own ``stop_strings`` and its end-of-turn text when that
    is not one token of ``tokenizer`` (a template without turn tokens)."""
    if template is None:
        return []
    out = list(template.stop_strings)
    end = template.end_of_turn()
    if end and tokenizer.token_to_id(end) is None:
        out.append(end)
    return list(dict.fromkeys(out))


# ====================================================================== files
def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object file as a dict; ``{}`` when the file does not exist."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON: {err}; fix or remove the file") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_string(value: Any) -> str | None:
    """A special token as written in tokenizer_config.json: a str or ``{"content": ...}``."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _named_templates(value: Any, path: Path) -> dict[str, str]:
    """``chat_template`` of a config: a str (the default) or a list of ``{"name": ..., "template": ...}``."""
    if isinstance(value, str):
        return {"default": value}
    ok = isinstance(value, list) and all(
        isinstance(t, Mapping) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in value
    )
    if not ok:
        raise ValueError(
            f"{path}: 'chat_template' must be a str or a list of {{'name': str, 'template': str}}, got {value!r:.80}"
        )
    return {t["name"]: t["template"] for t in value}
