"""Instruction-tuning data: the chat JSONL reader's three layouts and its errors, rendering with the model's
chat template, which tokens the loss counts (and a zero gradient everywhere else), truncation, splits, and
length-bucketed and packed batches."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from attnkit.data.lm.blocks import IGNORE_INDEX
from attnkit.data.readers.chats import read_chats
from attnkit.data.samplers import LengthGroupedBatches
from attnkit.data.sft.config import SFTDataConfig
from attnkit.data.sft.encode import collate_examples, encode_conversation, make_example, pack_examples
from attnkit.data.sft.module import SFTDataModule
from attnkit.models import LanguageModel
from attnkit.tasks.sft.module import assistant_loss, token_losses
from attnkit.text.chat import ChatTemplate, encode_chat
from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.tokenizers import Tokenizer
from chat_models import build_chat_model

TEMPLATES = Path(__file__).parent / "chat_templates"
CONVERSATION = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "2+3"},
    {"role": "assistant", "content": "5"},
    {"role": "user", "content": "and 1+1?"},
    {"role": "assistant", "content": "2 of course"},
]


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("sft_chat"), context=128)


@pytest.fixture(scope="module")
def tok(chat_dir: Path) -> Tokenizer:
    return tokenizer_from_folder(chat_dir)


@pytest.fixture(scope="module")
def chatml(chat_dir: Path) -> ChatTemplate:
    template = ChatTemplate.from_folder(chat_dir)
    assert template is not None
    return template


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def counted_text(tok: Tokenizer, ids: list[int], counted: list[bool]) -> list[str]:
    """The counted tokens' text, one string per contiguous run."""
    runs: list[list[int]] = []
    for i, (token, c) in enumerate(zip(ids, counted)):
        if c:
            if i == 0 or not counted[i - 1]:
                runs.append([])
            runs[-1].append(token)
    return [tok.decode(r, skip_special=False) for r in runs]


# ---------------------------------------------------------------------------------------------- reader
def test_the_three_layouts_and_a_system_key_become_messages(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "chats.jsonl",
        [
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
            "",
            {"prompt": "2+2", "completion": "4", "system": "Add."},
            {"instruction": "Translate", "input": "chat", "output": "cat"},
            {"instruction": "Say hi", "output": "hi", "input": ""},
            {"prompt": [{"role": "user", "content": "a"}], "completion": [{"role": "assistant", "content": "b"}]},
        ],
    )
    chats = read_chats(path)
    assert [c.messages for c in chats] == [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        [
            {"role": "system", "content": "Add."},
            {"role": "user", "content": "2+2"},
            {"role": "assistant", "content": "4"},
        ],
        [{"role": "user", "content": "Translate\n\nchat"}, {"role": "assistant", "content": "cat"}],
        [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    ]
    assert [c.where for c in chats] == [f"{path}:{n}" for n in (1, 3, 4, 5, 6)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"messages": [', "malformed JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"text": "hello"}', "no conversation in keys ['text']"),
        ('{"messages": [{"role": "user", "content": "Hi"}]}', "no assistant message"),
        ('{"messages": [{"role": "bot", "content": "Hi"}]}', "has role 'bot'"),
        ('{"messages": [{"role": "assistant", "content": 3}]}', "needs a string 'content'"),
        ('{"prompt": 1, "completion": "x"}', "'prompt' must be a string"),
        ('{"instruction": "a", "input": 3, "output": "b"}', "'input' must be a string"),
        ('{"prompt": "a", "completion": "b", "system": 1}', "'system' must be a string"),
    ],
)
def test_a_malformed_line_is_reported_with_its_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write(tmp_path / "chats.jsonl", [{"prompt": "a", "completion": "b"}, "", line])
    with pytest.raises(ValueError) as err:
        read_chats(path)
    assert f"{path}:3: " in str(err.value) and message in str(err.value)


def test_reader_refuses_other_files_and_checks_the_group_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"\.jsonl files"):
        read_chats(_write(tmp_path / "chats.json", [{"prompt": "a", "completion": "b"}]))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_chats(tmp_path / "missing.jsonl")
    path = _write(
        tmp_path / "g.jsonl", [{"prompt": "a", "completion": "b", "g": 1}, {"prompt": "a", "completion": "b"}]
    )
    with pytest.raises(ValueError, match=rf"{path}:2: data.group_column='g'"):
        read_chats(path, group_key="g")
    assert read_chats(path)[0].group is None


# ---------------------------------------------------------------------------------------------- masking
def test_only_the_replies_and_their_end_of_turn_count(tok: Tokenizer, chatml: ChatTemplate) -> None:
    ids, counted = encode_conversation(tok, chatml, CONVERSATION)
    assert ids == encode_chat(tok, chatml, CONVERSATION, add_generation_prompt=False)  # the chat renderer's ids
    assert counted_text(tok, ids, counted) == ["5<|im_end|>", "2 of course<|im_end|>"]
    ids, counted = encode_conversation(tok, chatml, CONVERSATION, train_on_prompt=True)
    assert all(counted)


def test_a_template_without_turn_tokens_gets_eos_after_the_last_reply(tok: Tokenizer) -> None:
    ids, counted = encode_conversation(tok, None, CONVERSATION)  # attnkit's default, plain-text template
    text = ChatTemplate.default().render(CONVERSATION, add_generation_prompt=False)
    assert ids == [*tok.encode(text, add_special_tokens=False), tok.eos_id]
    # the first reply ends where the next turn starts (the default template's stop string)
    assert counted_text(tok, ids, counted) == [" 5\n\nUser:", " 2 of course<|im_end|>"]


# Replies that are also in the prompt (and in the system message): a search of the text for them finds the prompt's.
NAMES = [
    {"role": "system", "content": "Answer with names only, as in John or Mary."},
    {"role": "user", "content": "Extract the name: John went home."},
    {"role": "assistant", "content": "John"},
    {"role": "user", "content": "And here: Mary met John at home."},
    {"role": "assistant", "content": "Mary"},
    {"role": "user", "content": "Both, as in 'John and Mary'?"},
    {"role": "assistant", "content": "John and Mary"},
]
# Per template: what each reply is counted as ({} is the reply): what the template writes between the prompt and
# the reply, the reply, and its end of turn; the last one, EOS (<|im_end|>) when the end of turn is not a token.
COUNTED = {
    None: [" {}\n\nUser:", " {}\n\nUser:", " {}<|im_end|>"],  # attnkit's default: the next turn's start
    "llama2.jinja": [" {} </s>", " {} </s>", " {} </s><|im_end|>"],
    "llama3.2.jinja": ["{}<|eot_id|>", "{}<|eot_id|>", "{}<|eot_id|><|im_end|>"],
    "mistral-v0.3.jinja": [" {}</s>", " {}</s>", " {}</s><|im_end|>"],
    "qwen2.5.jinja": ["{}<|im_end|>", "{}<|im_end|>", "{}<|im_end|>"],
}
SPECIALS = {"bos_token": "<s>", "eos_token": "</s>"}


def _template(name: str | None) -> ChatTemplate:
    if name is None:
        return ChatTemplate.default()
    return ChatTemplate((TEMPLATES / name).read_text(), SPECIALS, origin=name)


def test_every_template_of_the_folder_has_its_expected_spans() -> None:
    assert sorted(n for n in COUNTED if n) == sorted(p.name for p in TEMPLATES.glob("*.jinja"))


@pytest.mark.parametrize("system", [True, False], ids=["system", "no-system"])
@pytest.mark.parametrize("name", list(COUNTED), ids=lambda n: n or "default")
def test_real_templates_count_each_reply_and_nothing_else(tok: Tokenizer, name: str | None, system: bool) -> None:
    """Three replies that each also occur in the prompt before them, with and without a system message (which
    Mistral v0.3 moves into the last user turn, so that the conversation's start changes as it goes on): the
    counted tokens are each reply and its end of turn, exactly."""
    template = _template(name)
    messages = NAMES if system else NAMES[1:]
    ids, counted = encode_conversation(tok, template, messages)
    eos = [] if tok.token_to_id(template.end_of_turn() or "") is not None else [tok.eos_id]
    assert ids == encode_chat(tok, template, messages, add_generation_prompt=False) + eos
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    assert counted_text(tok, ids, counted) == [form.format(r) for form, r in zip(COUNTED[name], replies)]


@pytest.mark.parametrize(
    ("name", "counted"), [("llama3.2.jinja", "John<|eot_id|><|im_end|>"), ("qwen2.5.jinja", " John \n<|im_end|>")]
)
def test_a_reply_is_counted_as_the_template_writes_it(tok: Tokenizer, name: str, counted: str) -> None:
    """Llama 3 trims a reply's whitespace, Qwen keeps it: either is the reply as given."""
    messages = [{"role": "user", "content": "John?"}, {"role": "assistant", "content": " John \n"}]
    ids, mask = encode_conversation(tok, _template(name), messages)
    assert counted_text(tok, ids, mask)[0] == counted


REASONING = [
    {"role": "user", "content": "Extract the name: John went home."},
    {"role": "assistant", "content": "<think>The person is John.</think>John"},
    {"role": "user", "content": "And here: Mary met John at home."},
    {"role": "assistant", "content": "<think>Mary met him.</think>Mary"},
]


@pytest.mark.parametrize(
    ("name", "index", "problem"),
    [
        ("uppercase-replies.jinja", 1, "the template does not write it (or changes its text)"),
        ("drops-earlier-replies.jinja", 1, "the template does not write it (or changes its text)"),
        ("strips-earlier-reasoning.jinja", 1, "the template writes it as 'John', not as its content"),
        ("reversed-turns.jinja", 1, "its prompt ends with '<|im_end|>\\n<|im_start|>assistant\\n' after message 0"),
        ("repeats-last-reply.jinja", 5, "the template writes it 2 times"),
        ("counts-reply-characters.jinja", 1, "the template writes it with other text (the rendering differs from the"),
        ("prompts-another-role.jinja", 1, "its prompt ends with '<|im_end|>\\n<|im_start|>bot\\n' after message 0"),
    ],
)
def test_a_template_that_rewrites_replies_is_refused_by_name(
    tok: Tokenizer, name: str, index: int, problem: str
) -> None:
    """Templates that change, drop, reorder or repeat replies: an error naming the template, what it does and
    the fix, never a span elsewhere (a search for "John" finds the one in a prompt)."""
    template = ChatTemplate((TEMPLATES / "rewriting" / name).read_text(), SPECIALS, origin=name)
    messages = REASONING if "reasoning" in name else NAMES[1:]
    with pytest.raises(ValueError) as err:
        encode_conversation(tok, template, messages)
    message = str(err.value)
    assert f"tokens of assistant message {index} to train on with the chat template ({name})" in message
    assert problem in message and "Fix: give the model folder a chat_template.jinja" in message


def test_replies_that_start_or_end_like_the_placeholder_and_a_reply_first(tok: Tokenizer, chatml: ChatTemplate) -> None:
    """The placeholder's first and last characters differ from the reply's, trimmed or not; a conversation may
    start with a reply (no prompt: its span starts at its text)."""
    replies = ["⟦John⟧", " ⟨Mary⟩ ", "⟨⟦both⟧⟩"]
    for template, written in ((chatml, replies), (_template("llama3.2.jinja"), [r.strip() for r in replies])):
        messages = [{"role": "assistant", "content": replies[0]}]
        for reply in replies[1:]:
            messages += [{"role": "user", "content": "⟦and⟧"}, {"role": "assistant", "content": reply}]
        ids, counted = encode_conversation(tok, template, messages)
        end = template.end_of_turn()
        runs = counted_text(tok, ids, counted)
        assert runs[:2] == [f"{written[0]}{end}", f"{written[1]}{end}"] and runs[2].startswith(f"{written[2]}{end}")


def test_a_user_message_the_template_changes_is_refused_when_it_is_needed(tok: Tokenizer) -> None:
    """When the prompt does not begin the conversation (the system message goes to the last user turn, as in
    Mistral v0.3), the span starts after the previous message's content: found as a reply's is, and refused
    the same way when the template changes it."""
    source = (TEMPLATES / "mistral-v0.3.jinja").read_text()
    source = source.replace('message["content"] + "[/INST]"', 'message["content"] | upper + "[/INST]"')
    template = ChatTemplate(source, SPECIALS, origin="shouting-mistral")
    ids, counted = encode_conversation(tok, template, NAMES[1:])  # no system message: the prompt begins the text
    expected = [" John</s>", " Mary</s>", " John and Mary</s><|im_end|>"]
    assert counted_text(tok, ids, counted) == expected
    problem = r"\(shouting-mistral\): rendered with the placeholder .* the template does not write message 1 \(user\)"
    with pytest.raises(ValueError, match=r"assistant message 2 to train on with the chat template " + problem):
        encode_conversation(tok, template, NAMES)


def test_the_loss_gradient_is_exactly_zero_at_prompt_positions(tok: Tokenizer, chatml: ChatTemplate) -> None:
    from attnkit.tasks.sft import SFTConfig
    from attnkit.tasks.sft.module import SFTModule

    examples = [make_example(*encode_conversation(tok, chatml, c))[0] for c in (CONVERSATION, CONVERSATION[:3])]
    inputs, targets, documents = collate_examples([[e] for e in examples], pad_id=0)
    assert documents is None
    V = tok.vocab_size
    cfg = SFTConfig.model_validate({"model": {"init": "base", "lora": None}})
    lm_config = {"vocab_size": V, "d_model": 8, "num_heads": 2, "num_layers": 1, "dim_feedforward": 8}
    module = SFTModule(task="sft", config=cfg.model_dump(mode="json"), model={"name": "lm", "config": lm_config},
                       artifacts={}, attnkit_version="1", num_classes=V)  # fmt: skip
    hidden: list[torch.Tensor] = []  # the head's input [B, T, D]: the logits of a position are a function of its row

    def keep(_module: torch.nn.Module, _inputs: object, output: torch.Tensor) -> None:
        output.retain_grad()
        hidden.append(output)

    module.model.decoder.register_forward_hook(keep)
    loss, _, _ = module.step((inputs, targets, documents))
    loss.backward()
    assert hidden[0].grad is not None
    per_position = hidden[0].grad.abs().sum(-1)
    prompt = targets == IGNORE_INDEX
    assert prompt.any() and bool((per_position[prompt] == 0).all())  # exactly zero
    assert bool((per_position[~prompt] > 0).all())
    # the counted targets are the replies' tokens and their end of turn
    row = targets[1][targets[1] != IGNORE_INDEX].tolist()
    assert tok.decode(row, skip_special=False) == "5<|im_end|>"


# ---------------------------------------------------------------------------------------------- the data module
def _chats(n: int, offset: int = 0, group: bool = False) -> list[dict[str, object]]:
    out = []
    for i in range(offset, offset + n):
        row: dict[str, object] = {
            "prompt": f"{i % 7}+{i % 5}",
            "completion": "the sum is " * (i % 4) + str(i % 7 + i % 5),
        }
        if group:
            row["topic"] = f"t{i % 6}"
        out.append(row)
    return out


def _module(tok: Tokenizer, chatml: ChatTemplate, **data: object) -> SFTDataModule:
    cfg = SFTDataConfig.model_validate(data)
    return SFTDataModule(cfg, tok, chatml, context=128, pad_id=0, batch_size=4)


def test_splits_val_and_test_sources_and_groups(tmp_path: Path, tok: Tokenizer, chatml: ChatTemplate) -> None:
    source = _write(tmp_path / "train.jsonl", _chats(60, group=True))
    dm = _module(tok, chatml, source=str(source), group_column="topic", val_fraction=0.2, test_fraction=0.2)
    dm.setup("fit")
    groups = {s: {c.group for c in dm.chats[s]} for s in ("train", "val", "test")}
    assert sum(len(dm.chats[s]) for s in groups) == 60 and all(groups.values())
    assert not (groups["train"] & groups["val"]) and not (groups["train"] & groups["test"])
    val = _write(tmp_path / "val.jsonl", _chats(5, offset=100))
    dm = _module(tok, chatml, source=str(source), val_source=str(val), test_fraction=0.1)
    dm.setup("fit")
    assert [c.where for c in dm.chats["val"]] == [f"{val}:{n}" for n in range(1, 6)]
    assert len(dm.chats["test"]) == 6 and len(dm.chats["train"]) == 54
    assert dm.counts["train"] == {"conversations": 54, "cut": 0, "dropped": 0}
    with pytest.raises(ValueError, match=r"data\.source is required"):
        _module(tok, chatml)


def test_long_conversations_are_cut_and_counted_and_those_without_a_reply_dropped(
    tmp_path: Path, tok: Tokenizer, chatml: ChatTemplate, caplog: pytest.LogCaptureFixture
) -> None:
    long_prompt = {"prompt": "the cat sat on the mat " * 16, "completion": "yes"}
    long_reply = {"prompt": "hi", "completion": "the cat sat on the mat " * 16}
    source = _write(tmp_path / "c.jsonl", [long_prompt, long_reply, *_chats(8)])
    with caplog.at_level(logging.WARNING, logger="attnkit.data.sft.module"):
        dm = _module(tok, chatml, source=str(source), max_len=80, val_fraction=0.0, test_fraction=0.0)
        dm.setup("fit")
    assert dm.counts["train"] == {"conversations": 10, "cut": 2, "dropped": 1}
    assert "2 of 10 conversations were cut at data.max_len=80" in caplog.text and "1 of them lost" in caplog.text
    rows = dm.datasets["train"].rows
    assert len(rows) == 9 and max(len(r[0]) for r in rows) == 79  # 80 tokens: 79 inputs and targets
    with pytest.raises(ValueError, match="longer than the model's context"):
        _module(tok, chatml, source=str(source), max_len=500)


def test_length_grouped_batches_cover_every_row_once_and_shard_evenly() -> None:
    lengths = [(i * 37) % 101 for i in range(230)]
    sampler = LengthGroupedBatches(lengths, batch_size=8, seed=3)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(230))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 10  # similar lengths in a batch (random batches: about 80)
    sampler.set_epoch(1)
    assert list(sampler) != batches
    shards = [list(LengthGroupedBatches(lengths, 8, 3, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(s) for s in shards}) == 1
    flat = [i for s in shards for b in s for i in b]
    assert len(flat) == len(set(flat))
    resumed = LengthGroupedBatches(lengths, 8, 3)
    resumed.load_state_dict({"epoch": 0, "given": 5})
    assert list(resumed) == batches[5:]


def test_length_grouped_batches_start_a_new_epoch_after_len_batches_unexhausted() -> None:
    """Lightning takes ``len()`` batches without running the iterator to its end and never calls the batch
    sampler's ``set_epoch``: the next pass must still be a whole, reshuffled epoch."""
    sampler = LengthGroupedBatches([(i * 37) % 101 for i in range(230)], batch_size=8, seed=3)
    first = iter(sampler)
    epoch0 = [next(first) for _ in range(len(sampler))]
    assert sampler.state_dict() == {"epoch": 0, "given": len(sampler)}
    epoch1 = list(sampler)
    assert len(epoch1) == len(sampler) and epoch1 != epoch0
    assert sorted(i for b in epoch1 for i in b) == list(range(230))
    assert sampler.state_dict() == {"epoch": 1, "given": len(sampler)}


def test_packing_puts_several_conversations_in_a_row(tmp_path: Path, tok: Tokenizer, chatml: ChatTemplate) -> None:
    rows = pack_examples([5, 9, 3, 7, 2, 8], row_len=10)
    assert sorted(i for r in rows for i in r) == list(range(6))
    assert all(sum([5, 9, 3, 7, 2, 8][i] for i in r) <= 10 for r in rows) and len(rows) == 4
    source = _write(tmp_path / "c.jsonl", _chats(30))
    dm = _module(tok, chatml, source=str(source), packing=True, val_fraction=0.0, test_fraction=0.0)
    dm.setup("fit")
    packed = dm.datasets["train"].rows
    assert sum(len(r) for r in packed) == 30 and len(packed) < 30
    inputs, targets, documents = next(iter(dm.train_dataloader()))
    assert documents is not None and inputs.shape == targets.shape == documents.shape


def test_packed_rows_give_each_conversation_its_unpacked_loss(tok: Tokenizer, chatml: ChatTemplate) -> None:
    """Block-diagonal attention and positions restarting per conversation: the per-example losses of packed rows
    equal those of one-conversation rows (within 1e-5), for rotary (Llama) and learned (GPT-2) positions."""
    from attnkit.models.lm import LanguageModelArchitecture, LanguageModelConfig

    chats = [[{"role": "user", "content": f"{i}+{i}"}, {"role": "assistant", "content": "x" * i}] for i in range(1, 7)]
    examples = [make_example(*encode_conversation(tok, chatml, c))[0] for c in chats]
    layout = pack_examples([len(e) for e in examples], row_len=64)
    assert any(len(r) > 1 for r in layout)
    for preset in ("llama", "gpt2"):
        arch = LanguageModelArchitecture.from_preset(preset, d_model=32, num_heads=4, num_layers=2, max_len=64)
        model = LanguageModel(LanguageModelConfig(**arch.model_dump(), vocab_size=tok.vocab_size)).eval()
        with torch.no_grad():
            alone, kept = token_losses(model, collate_examples([[e] for e in examples], pad_id=0))
            unpacked = [float(alone[i][kept[i]].sum()) for i in range(len(examples))]
            losses, kept = token_losses(model, collate_examples([[examples[i] for i in r] for r in layout], 0))
        packed = {}
        for r, row in enumerate(layout):
            start = 0
            for i in row:
                end = start + len(examples[i])
                packed[i] = float(losses[r, start:end][kept[r, start:end]].sum())
                start = end
        assert [packed[i] for i in range(len(examples))] == pytest.approx(unpacked, abs=1e-5, rel=0)
        batch = collate_examples([[examples[i] for i in r] for r in layout], 0)
        with torch.no_grad():  # `only`: the head on the counted positions alone, the same logits
            full, kept = model(batch[0], document_ids=batch[2]), batch[1] != IGNORE_INDEX
            assert torch.allclose(model(batch[0], document_ids=batch[2], only=kept), full[kept], atol=1e-6)
            # the task's loss (the head chunk by chunk) of the packed batch: every counted token's mean
            task_loss, _, _ = assistant_loss(model, batch)
        assert float(task_loss) == pytest.approx(sum(unpacked) / int(kept.sum()), abs=1e-5, rel=0)
        # without the document mask the later conversations would see the earlier ones
        first = next(r for r in layout if len(r) > 1)
        inputs, targets, _ = collate_examples([[examples[i] for i in first]], 0)
        with torch.no_grad():
            leaky, kept = token_losses(model, (inputs, targets, None))
        start, end = len(examples[first[0]]), len(examples[first[0]]) + len(examples[first[1]])
        assert float(leaky[0, start:end][kept[0, start:end]].sum()) != pytest.approx(packed[first[1]], abs=1e-4)
