"""Chat templates (attnkit.text.chat) against transformers' ``apply_chat_template`` on three real template
styles: ChatML (Qwen2.5), Llama 3.2 and Mistral v0.3 ``[INST]``, whose template texts are stored under
``chat_templates/``. Each style gets a model folder as Hugging Face saves one: a small byte-level BPE
(``tokenizers``, trained here on a few sentences) with the style's special tokens, ``tokenizer_config.json``
and the template in one of the places transformers reads it from. Nothing is downloaded."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from attnkit.text.chat import (
    ChatTemplate,
    ChatTemplateError,
    check_messages,
    encode_chat,
    read_generation_config,
    stop_ids,
    stop_strings,
)
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.tokenizers import BOS_ID, EOS_ID, build_tokenizer

HERE = Path(__file__).parent / "chat_templates"
CORPUS = [
    "You are a helpful assistant who answers briefly.",
    "What is the capital of France? Paris is the capital of France.",
    "Tell me a joke about cats and dogs, please.",
    "Sure! Why did the cat sit on the computer? To keep an eye on the mouse.",
    "Numbers: 1, 2, 3 and 42; tools, functions and JSON objects.",
]
# style -> (template file, where the folder keeps it, special tokens of tokenizer_config.json, added specials,
#           BOS the tokenizer's post-processor adds (as Llama's and Mistral's tokenizer.json do), generation config)
STYLES = {
    "chatml": (
        "qwen2.5.jinja",
        "chat_template.jinja",
        {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        None,
        {},
    ),
    "llama3": (
        "llama3.2.jinja",
        "tokenizer_config",
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|begin_of_text|>",
        {"eos_token_id": ["<|end_of_text|>", "<|eot_id|>"]},
    ),
    "mistral": (
        "mistral-v0.3.jinja",
        "tokenizer_config_list",
        {
            "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
            "eos_token": "</s>",
            "unk_token": "<unk>",
        },
        ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"],
        "<s>",
        {},
    ),
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
HISTORY = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris is the capital of France."},
    {"role": "user", "content": "Tell me a joke about cats, please."},
]
CONVERSATIONS = {
    "system+history": [SYSTEM, *HISTORY],
    "history": HISTORY,
    "one-turn": HISTORY[:1],
    "ends-with-reply": [SYSTEM, *HISTORY[:2]],
}
DATE = {"date_string": "26 Jul 2024"}  # Llama 3.2 writes today's date otherwise (strftime_now: tested below)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city, in degrees Celsius (°C) <today>.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _save_folder(folder: Path, style: str) -> Path:
    template_file, where, specials, added, bos, generation = STYLES[style]
    backend = HFTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=added, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(CORPUS, trainer=trainer)
    if bos is not None:  # the tokenizer adds BOS itself; a rendered template must not get a second one
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, backend.token_to_id(bos))]
        )
    folder.mkdir(parents=True)
    backend.save(str(folder / "tokenizer.json"))
    template = (HERE / template_file).read_text(encoding="utf-8")
    config: dict = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, **specials}
    if where == "chat_template.jinja":
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    elif where == "tokenizer_config":
        config["chat_template"] = template
    else:  # a list of named templates; "default" is used
        config["chat_template"] = [{"name": "default", "template": template}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    if generation:
        ids = {k: [backend.token_to_id(t) for t in v] for k, v in generation.items()}
        (folder / "generation_config.json").write_text(json.dumps(ids), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chat-models")
    return {style: _save_folder(root / style, style) for style in STYLES}


@pytest.fixture(scope="module")
def hf_tokenizers(folders: dict[str, Path]) -> dict:
    return {style: transformers.AutoTokenizer.from_pretrained(str(folder)) for style, folder in folders.items()}


def _ids(encoded) -> list[int]:
    """transformers 5 may return a BatchEncoding from apply_chat_template(tokenize=True)."""
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


# ====================================================================== same text and ids as transformers
@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["prompt", "no-prompt"])
@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("style", list(STYLES))
def test_rendered_text_and_ids_equal_transformers(folders, hf_tokenizers, style, conversation, add_generation_prompt):
    messages = CONVERSATIONS[conversation]
    hf = hf_tokenizers[style]
    template = ChatTemplate.from_folder(folders[style])
    assert template is not None
    text = template.render(messages, add_generation_prompt=add_generation_prompt, **DATE)
    expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt, **DATE)
    assert text == expected
    tokenizer = tokenizer_from_folder(folders[style])
    ids = encode_chat(tokenizer, template, messages, add_generation_prompt=add_generation_prompt, **DATE)
    hf_ids = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt, **DATE)
    assert ids == _ids(hf_ids)
    bos = STYLES[style][4]
    if bos is not None:  # exactly one BOS: the template's (the tokenizer would add another one)
        assert ids.count(tokenizer.token_to_id(bos)) == 1
        assert tokenizer.encode("Hi")[0] == tokenizer.token_to_id(bos)


def test_the_styles_write_their_own_format(folders):
    """The fixtures are the real formats (not three templates that happen to agree with themselves)."""
    texts = {style: ChatTemplate.from_folder(folders[style]).render(HISTORY[:1], **DATE) for style in STYLES}
    assert texts["chatml"] == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert texts["llama3"] == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert texts["mistral"] == "<s>[INST] What is the capital of France?[/INST]"
    mistral = ChatTemplate.from_folder(folders["mistral"]).render([SYSTEM, *HISTORY])
    assert mistral.endswith(f"[INST] {SYSTEM['content']}\n\nTell me a joke about cats, please.[/INST]")


@pytest.mark.parametrize("style", ["chatml", "llama3", "mistral"])
def test_tools_render_as_transformers(folders, hf_tokenizers, style):
    """``tools`` reach the template through the same ``tojson`` filter (non-ASCII kept, ``indent=4``)."""
    template = ChatTemplate.from_folder(folders[style])
    text = template.render(HISTORY, tools=TOOLS, **DATE)
    assert text == hf_tokenizers[style].apply_chat_template(
        HISTORY, tools=TOOLS, tokenize=False, add_generation_prompt=True, **DATE
    )
    assert "get_weather" in text and "°C" in text


def test_strftime_now_writes_today(folders):
    before = datetime.now().strftime("%d %b %Y")
    text = ChatTemplate.from_folder(folders["llama3"]).render(HISTORY[:1])
    after = datetime.now().strftime("%d %b %Y")
    assert f"Today Date: {before}\n" in text or f"Today Date: {after}\n" in text


# ====================================================================== errors from templates
def test_raise_exception_is_a_clear_error(folders, hf_tokenizers):
    two_users = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Anyone there?"}]
    template = ChatTemplate.from_folder(folders["mistral"])
    with pytest.raises(ChatTemplateError, match=r"refused these messages: After the optional system message, "):
        template.render(two_users)
    with pytest.raises(ValueError, match=r"mistral/tokenizer_config\.json\) refused"):  # names its file
        template.render(two_users)
    with pytest.raises(Exception, match="conversation roles must alternate"):  # transformers refuses it too
        hf_tokenizers["mistral"].apply_chat_template(two_users, tokenize=False)


def test_the_sandbox_and_template_failures_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="failed on these messages: SecurityError"):
        ChatTemplate("{{ messages.append(1) }}").render(HISTORY)
    with pytest.raises(ChatTemplateError, match="underscore-prefixed"):
        ChatTemplate("{% set ns = namespace(_x=1) %}{{ ns }}").render(HISTORY)
    with pytest.raises(ChatTemplateError, match="TypeError"):
        ChatTemplate("{{ messages[0]['content'] + 1 }}").render(HISTORY)


def test_globals_and_filters_as_transformers(hf_tokenizers):
    """``tojson`` (no HTML escaping, options), ``dict``, ``namespace``, loop controls and ``{% generation %}``."""
    source = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'assistant' %}{% continue %}{% endif %}"
        "{% set ns.n = ns.n + 1 %}{% generation %}{{ m | tojson(indent=2, sort_keys=True) }}{% endgeneration %}"
        "{% endfor %}{{ ns.n }}|{{ dict(a='<&>') | tojson }}|{{ bos_token }}|{{ extra_var }}"
    )
    messages = [{"role": "user", "content": '<b>é</b> & "q"'}, HISTORY[1], HISTORY[2]]
    ours = ChatTemplate(source, {"bos_token": "<s>"}).render(messages, extra_var=[1, 2])
    hf = hf_tokenizers["mistral"]
    assert ours == hf.apply_chat_template(messages, chat_template=source, tokenize=False, extra_var=[1, 2])
    assert '"<b>é</b> & \\"q\\""' in ours and "|2|" not in ours and ours.endswith('|{"a": "<&>"}|<s>|[1, 2]')


def test_whitespace_control_as_transformers(hf_tokenizers):
    """trim_blocks and lstrip_blocks: a block tag's own line and indentation leave nothing in the text."""
    source = (
        "{% for m in messages %}\n    {% if m.role == 'user' %}\n  [{{ m.content }}]\n    {% endif %}\n{% endfor %}\n"
    )
    ours = ChatTemplate(source).render(HISTORY)
    assert ours == hf_tokenizers["chatml"].apply_chat_template(HISTORY, chat_template=source, tokenize=False)
    assert ours == "  [What is the capital of France?]\n  [Tell me a joke about cats, please.]\n"


def test_a_jinja_syntax_error_names_the_file_and_line(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{{ bos_token }}\n{% for m in messages %}\n{{ m.content }\n")
    with pytest.raises(ValueError, match=r"chat_template\.jinja: jinja syntax error at line 3 "):
        ChatTemplate.from_folder(tmp_path)


# ====================================================================== reading the folder
def test_where_the_template_is_read_from(tmp_path):
    def folder(name: str, files: dict[str, object]) -> Path:
        path = tmp_path / name
        path.mkdir()
        for file, content in files.items():
            (path / file).write_text(content if isinstance(content, str) else json.dumps(content))
        return path

    config = {"chat_template": "config {{ eos_token }}", "eos_token": {"content": "</s>"}, "bos_token": None}
    assert ChatTemplate.from_folder(folder("none", {"tokenizer_config.json": {"eos_token": "</s>"}})) is None
    assert ChatTemplate.from_folder(folder("empty", {})) is None
    both = ChatTemplate.from_folder(folder("both", {"tokenizer_config.json": config, "chat_template.jinja": "jinja"}))
    assert both.render(HISTORY) == "jinja" and both.origin.endswith("chat_template.jinja")  # the .jinja file wins
    only_config = ChatTemplate.from_folder(folder("config", {"tokenizer_config.json": config}))
    assert only_config.render(HISTORY) == "config </s>"
    assert only_config.special_tokens == {"eos_token": "</s>"}
    named = {"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]}
    listed = ChatTemplate.from_folder(folder("list", {"tokenizer_config.json": named}))
    assert listed.render(HISTORY) == "plain" and listed.render(HISTORY, tools=TOOLS) == "tools"
    processor = ChatTemplate.from_folder(folder("processor", {"chat_template.json": {"chat_template": "proc"}}))
    assert processor.render(HISTORY) == "proc"
    legacy = {"special_tokens_map.json": {"bos_token": "<B>"}, "chat_template.jinja": "{{ bos_token }}"}
    assert ChatTemplate.from_folder(folder("legacy", legacy)).render(HISTORY) == "<B>"
    with pytest.raises(ValueError, match=r"no 'default' one"):
        ChatTemplate.from_folder(
            folder("nodefault", {"tokenizer_config.json": {"chat_template": named["chat_template"][:1]}})
        )
    with pytest.raises(ValueError, match=r"tokenizer_config\.json is not valid JSON"):
        ChatTemplate.from_folder(folder("badjson", {"tokenizer_config.json": "{oops"}))
    with pytest.raises(ValueError, match=r"'chat_template' must be a str or a list"):
        ChatTemplate.from_folder(folder("badtype", {"tokenizer_config.json": {"chat_template": 3}}))
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        ChatTemplate.from_folder(tmp_path / "missing")


def test_read_generation_config(tmp_path, folders):
    assert read_generation_config(tmp_path) == {}
    assert read_generation_config(folders["llama3"])["eos_token_id"] == [
        tokenizer_from_folder(folders["llama3"]).token_to_id(t) for t in ("<|end_of_text|>", "<|eot_id|>")
    ]
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"generation_config\.json is not valid JSON"):
        read_generation_config(tmp_path)


# ====================================================================== where generation stops
def test_end_of_turn_and_stop_ids(folders):
    expected = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "mistral": "</s>"}
    for style, end in expected.items():
        folder = folders[style]
        template, tokenizer = ChatTemplate.from_folder(folder), tokenizer_from_folder(folder)
        assert template.end_of_turn() == end
        ids = stop_ids(tokenizer, template, read_generation_config(folder))
        assert tokenizer.token_to_id(end) in ids and tokenizer.eos_id in ids
        assert len(ids) == len(set(ids))
        assert stop_strings(tokenizer, template) == []  # every end of turn is one token here
    chatml = tokenizer_from_folder(folders["chatml"])
    im_end, eot = chatml.token_to_id("<|im_end|>"), chatml.token_to_id("<|endoftext|>")
    assert stop_ids(chatml, ChatTemplate.from_folder(folders["chatml"])) == [eot, im_end]  # EOS, then the turn's end
    assert stop_ids(chatml, None) == [eot]
    assert stop_ids(chatml, None, {"eos_token_id": 7}) == [7, eot]
    assert stop_ids(chatml, None, {"eos_token_id": [10**6, eot]}) == [
        10**6,
        eot,
    ]  # the model's vocabulary may be larger
    for bad in ("7", [1, "x"], -1, True, 2.0):
        with pytest.raises(ValueError, match="eos_token_id must be an int >= 0 or a list of them"):
            stop_ids(chatml, None, {"eos_token_id": bad})


def test_an_end_of_turn_that_is_not_one_token_is_a_stop_string(folders):
    tokenizer = tokenizer_from_folder(folders["chatml"])
    template = ChatTemplate("{% for m in messages %}### {{ m.role }}: {{ m.content }}\n[END]\n{% endfor %}")
    assert template.end_of_turn() == "[END]"
    assert stop_strings(tokenizer, template) == ["[END]"]
    assert stop_ids(tokenizer, template) == [tokenizer.eos_id]
    refusing = ChatTemplate("{{ raise_exception('no') }}")
    assert refusing.end_of_turn() is None and stop_strings(tokenizer, refusing) == []


# ====================================================================== the default template
def test_default_template_on_a_char_tokenizer():
    tokenizer = build_tokenizer("char", [*CORPUS, "System: User: Assistant: Bye?\n\n"])
    template = ChatTemplate.default()
    messages = [SYSTEM, *HISTORY]
    text = template.render(messages)
    assert text == (
        f"System: {SYSTEM['content']}\n\nUser: What is the capital of France?\n\n"
        "Assistant: Paris is the capital of France.\n\nUser: Tell me a joke about cats, please.\n\nAssistant:"
    )
    assert template.render(HISTORY[:2], add_generation_prompt=False).endswith(
        "Assistant: Paris is the capital of France."
    )
    assert encode_chat(tokenizer, None, messages) == [BOS_ID, *tokenizer.encode(text)]
    assert encode_chat(tokenizer, template, messages) == [BOS_ID, *tokenizer.encode(text)]
    assert template.end_of_turn() == "\n\nUser:"
    assert stop_strings(tokenizer, template) == ["\n\nUser:"]
    assert stop_ids(tokenizer, template) == [EOS_ID]
    assert tokenizer.decode(encode_chat(tokenizer, None, messages)) == text


# ====================================================================== messages
@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ([], ValueError, "messages is empty"),
        ("hello", TypeError, "got str; wrap a single message in a list"),
        ({"role": "user", "content": "hi"}, TypeError, "got dict"),
        (["hi"], TypeError, "message 0 must be a dict"),
        ([{"role": "user"}], ValueError, "message 0 has no 'content'"),
        ([HISTORY[0], {"content": "x"}], ValueError, "message 1 has no 'role'"),
        ([{"role": "user", "content": None}], TypeError, "message 0: 'content' must be a str, got NoneType"),
        ([{"role": 1, "content": "x"}], TypeError, "message 0: 'role' must be a str, got int"),
    ],
)
def test_check_messages_refuses(messages, error, match):
    with pytest.raises(error, match=match):
        check_messages(messages)
    with pytest.raises(error, match=match):
        ChatTemplate.default().render(messages)


def test_check_messages_keeps_other_keys_and_drops_none():
    given = [{"role": "tool", "content": "42", "name": "calc", "tool_calls": None}]
    checked = check_messages(given)
    assert checked == [{"role": "tool", "content": "42", "name": "calc"}]
    assert given[0]["tool_calls"] is None  # a copy: the caller's messages are untouched
    assert check_messages(({"role": "custom", "content": ""},)) == [{"role": "custom", "content": ""}]


def test_encode_without_special_tokens(folders):
    tokenizer = tokenizer_from_folder(folders["llama3"])
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    assert tokenizer.encode("Paris") == [bos, *tokenizer.encode("Paris", add_special_tokens=False)]
    assert bos not in tokenizer.encode("Paris", add_special_tokens=False)
    assert len(tokenizer.encode("Paris is the capital", 3, add_special_tokens=False)) == 3
