"""Tests that kill mutants of ``attnkit/data/sft/encode.py`` that ``test_sft_data.py`` lets live (``tools/mutation.py
--module sft_encode``): the refusal's whole text, trimmed forms of a reply, placeholder characters, an attnkit
tokenizer with BOS, a tokenizer that adds special tokens, a template without an end of turn, packing's exact
layout and the batch's dtypes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_sft_data import NAMES, SPECIALS, TEMPLATES, counted_text

from attnkit.data.sft.encode import Example, collate_examples, encode_conversation, make_example, pack_examples
from attnkit.text.chat import ChatTemplate, encode_chat
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.tokenizers import Tokenizer, build_tokenizer
from chat_models import build_chat_model

CHATML_ASSISTANT = (  # ChatML whose assistant replies go through `{}` (a jinja expression of `content`)
    "{% for m in messages %}{% set content = m['content'] %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
    "{% if m['role'] == 'assistant' %}{{ {} }}{% else %}{{ content }}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("sft_mutants"), context=128)


@pytest.fixture(scope="module")
def tok(chat_dir: Path) -> Tokenizer:
    return tokenizer_from_folder(chat_dir)


def _assistant(expression: str) -> ChatTemplate:
    return ChatTemplate(CHATML_ASSISTANT.replace("{}", expression, 1), origin=f"chatml with {expression}")


def test_the_refusal_says_what_is_wrong_and_how_to_fix_it_in_full(tok: Tokenizer) -> None:
    template = ChatTemplate((TEMPLATES / "rewriting" / "uppercase-replies.jinja").read_text(), SPECIALS, origin="up")
    with pytest.raises(ValueError) as err:
        encode_conversation(tok, template, NAMES[1:3])
    assert str(err.value) == (
        "cannot tell which tokens of assistant message 1 to train on with the chat template (up): rendered with the "
        "placeholder '⟦AttnKit reply placeholder⟧' in place of its content, the template does not write it (or "
        "changes its text) (the rendering differs from the real one in '⟦ATTNKIT REPLY PLACEHOLDER⟧'). The sft task "
        "trains on each reply as the template writes it, found by rendering the conversation with a placeholder in "
        "place of a message, so the template must write each message once and as given (surrounding whitespace "
        "aside), and end the prompt of a reply (the conversation before it with the generation prompt) as the "
        "conversation goes on to that reply. Fix: give the model folder a chat_template.jinja that does (it is also "
        "what attnkit chat and serve use), or split the conversation into conversations that each end with one reply "
        "the template keeps"
    )


@pytest.mark.parametrize(("expression", "written"), [("content.lstrip()", "John  "), ("content.rstrip()", "  John")])
def test_a_reply_trimmed_on_one_side_is_the_reply(tok: Tokenizer, expression: str, written: str) -> None:
    messages = [{"role": "user", "content": "John?"}, {"role": "assistant", "content": "  John  "}]
    ids, counted = encode_conversation(tok, _assistant(expression), messages)
    assert counted_text(tok, ids, counted) == [f"{written}<|im_end|>"]


def test_replies_that_start_or_end_like_other_placeholders(tok: Tokenizer) -> None:
    """``None``, ``X``...: the placeholder's edges are its brackets, whatever the reply starts or ends with."""
    replies = ["Nobody", "Xavier MAX", "None", "⟦x⟧"]
    messages = []
    for reply in replies:
        messages += [{"role": "user", "content": "who?"}, {"role": "assistant", "content": reply}]
    ids, counted = encode_conversation(tok, _assistant("content"), messages)
    assert counted_text(tok, ids, counted) == [f"{r}<|im_end|>" for r in replies]


def test_refusals_name_the_message_before_the_reply(tok: Tokenizer) -> None:
    """The prompt does not begin the conversation (the earlier question is shouted once it is answered), so the
    span would start after the previous message: that message is refused, for the reply it was needed for."""
    source = CHATML_ASSISTANT.replace("{}", "content", 1).replace(
        "{% else %}{{ content }}", "{% elif loop.last %}{{ content }}{% else %}{{ content | upper }}"
    )
    template = ChatTemplate(source, origin="shouts-earlier-questions")
    with pytest.raises(ValueError, match=r"of assistant message 1 to train on .* does not write message 0 \(user\)"):
        encode_conversation(tok, template, NAMES[1:5])
    reversed_turns = (TEMPLATES / "rewriting" / "reversed-turns.jinja").read_text()
    with pytest.raises(ValueError, match=r"the conversation writes '' between message 0 and it"):
        encode_conversation(tok, ChatTemplate(reversed_turns, origin="reversed"), NAMES[1:5])


def test_a_template_without_an_end_of_turn_counts_the_replies_and_eos(tok: Tokenizer) -> None:
    """A template that refuses the end-of-turn probe (it wants a system message first): no end of turn is
    counted, EOS is appended after the last reply."""
    source = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}"
    template = ChatTemplate(source + CHATML_ASSISTANT.replace("{}", "content", 1), origin="system-first")
    assert template.end_of_turn() is None
    ids, counted = encode_conversation(tok, template, NAMES[:3])
    assert ids == [*encode_chat(tok, template, NAMES[:3], add_generation_prompt=False), tok.eos_id]
    assert counted_text(tok, ids, counted) == ["John", "<|im_end|>"]


def test_text_that_ends_with_eos_gets_no_second_one(tok: Tokenizer) -> None:
    """The end of turn is not one token (``[/A]<|im_end|>``) but the text already ends with EOS."""
    source = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '[/A]<|im_end|>' }}{% endfor %}"
    template = ChatTemplate(source + "{% if add_generation_prompt %}assistant: {% endif %}", origin="ends-with-eos")
    assert template.end_of_turn() == "[/A]<|im_end|>"
    ids, counted = encode_conversation(tok, template, NAMES[1:3])
    assert ids == encode_chat(tok, template, NAMES[1:3], add_generation_prompt=False) and ids[-1] == tok.eos_id
    assert counted_text(tok, ids, counted) == ["John[/A]<|im_end|>"]


def test_attnkit_tokenizers_get_bos_first_and_uncounted() -> None:
    tok = build_tokenizer("char", ["".join(m["content"] for m in NAMES) + "UserAsistn:\n"])
    assert tok.bos_id is not None and not tok.spec.pretrained
    ids, counted = encode_conversation(tok, None, NAMES[1:3])
    assert ids == [*encode_chat(tok, None, NAMES[1:3], add_generation_prompt=False), tok.eos_id]
    assert ids[0] == tok.bos_id and not counted[0] and counted[-1]
    assert tok.decode([t for t, c in zip(ids, counted) if c], skip_special=True) == " John"


def test_the_tokenizer_adds_no_special_tokens_of_its_own(tmp_path: Path, chat_dir: Path) -> None:
    """A tokenizer.json whose post-processor adds a BOS (as Llama's): the template writes BOS itself, so the ids
    are the rendered text's alone, as ``encode_chat``'s."""
    from tokenizers import Tokenizer as Backend
    from tokenizers.processors import TemplateProcessing

    backend = Backend.from_file(str(chat_dir / "tokenizer.json"))
    bos = backend.token_to_id("<|endoftext|>")
    backend.post_processor = TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", bos)])
    folder = tmp_path / "with_bos"
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text((chat_dir / "tokenizer_config.json").read_text())
    tok = tokenizer_from_folder(folder)
    template = ChatTemplate(json.loads((folder / "tokenizer_config.json").read_text())["chat_template"])
    ids, _ = encode_conversation(tok, template, NAMES[1:3])
    assert bos not in ids and ids == encode_chat(tok, template, NAMES[1:3], add_generation_prompt=False)


def test_make_example_cuts_only_what_is_longer() -> None:
    example, cut = make_example([1, 2, 3, 4, 5], [False, True, True, True, True], max_len=5)
    assert not cut and example == Example([1, 2, 3, 4], [2, 3, 4, 5])
    example, cut = make_example([1, 2, 3, 4, 5], [False, True, True, True, True], max_len=4)
    assert cut and example == Example([1, 2, 3], [2, 3, 4])


def test_packing_layout_is_first_fit_longest_first() -> None:
    assert pack_examples([5, 9, 3, 7, 2, 8], row_len=10) == [[1], [5, 4], [3, 2], [0]]
    assert pack_examples([10, 3], row_len=10) == [[0], [1]]  # a row exactly full
    with pytest.raises(ValueError, match=r"^example 1 has 11 positions, more than a row's 10$"):
        pack_examples([3, 11], row_len=10)


def test_batches_are_int64() -> None:
    rows = [[Example([1, 2], [2, 3]), Example([4], [5])], [Example([6, 7, 8], [7, 8, 9])]]
    inputs, targets, documents = collate_examples(rows, pad_id=0)
    assert documents is not None
    assert inputs.dtype == targets.dtype == documents.dtype == torch.long
    assert documents.tolist() == [[0, 0, 1], [0, 0, 0]]
