"""Any model folder is a model: Hugging Face and attnkit folders and runs load with ``attnkit.api.load_model``,
chat with their template, work with every command that takes a RUN, and fine-tune with ``lm --init``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import QUIET_TRAINING

from attnkit import api
from attnkit.errors import CheckpointError
from attnkit.interop import load_pretrained
from attnkit.text.framing import document_bounds, document_ids, prompt_ids
from chat_models import build_chat_model
from cli_inprocess import cli_in_process, cli_ok

SENTENCES = [
    "the cat sat on the mat and looked at the bird",
    "a dog ran in the park while the sun was shining",
    "she read the book by the window in the evening",
    "the old owl watched the quiet forest at night",
    "we walked to the river and sat on the warm stones",
    "the children played a game in the garden after school",
]
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_chatml_model(folder: Path, context: int = 128) -> Path:
    """A random Qwen2 chat model (ChatML template with a default system message, end of turn ``<|im_end|>``,
    EOS ids ``[<|im_end|>, <|endoftext|>]`` in generation_config.json), saved by ``save_pretrained``."""
    return build_chat_model(
        folder,
        context=context,
        model_type="qwen2",
        template=CHATML,
        eos=("<|im_end|>", "<|endoftext|>"),
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chatml_model(tmp_path_factory.mktemp("qwen_chat"))


GREEDY_8 = ["--temperature", "0", "--max-new-tokens", "8"]
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "the cat sat"},
    {"role": "assistant", "content": "on the mat"},
    {"role": "user", "content": "and the dog"},
]


def _hf_greedy(folder: Path, ids: list[int], n: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids) :].tolist()


def test_chat_is_transformers_greedy_reply_cut_at_the_end_of_turn(chat_dir: Path) -> None:
    from transformers import AutoTokenizer

    model = api.load_model(chat_dir)
    hf_tok = AutoTokenizer.from_pretrained(chat_dir)
    ids = model.encode_chat(MESSAGES)
    expected = hf_tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if not isinstance(expected, list) else expected
    assert ids == list(expected)
    end = hf_tok.convert_tokens_to_ids("<|im_end|>")
    assert model.stop_ids == sorted({end, 0}) and model.context == 128
    hf = _hf_greedy(chat_dir, ids, 12)
    reply = model.chat(MESSAGES, 12)
    assert reply == hf_tok.decode(hf, skip_special_tokens=True)
    # A reply stops at the first stop id (as it would at <|im_end|>): made one here with the 6th token.
    stop = hf[5]
    first = hf.index(stop)
    assert model.chat(MESSAGES, 12, stop_ids=[stop]) == hf_tok.decode(hf[:first], skip_special_tokens=True)
    pieces: list[str] = []
    assert model.chat(MESSAGES, 12, on_text=pieces.append) == reply and "".join(pieces) == reply


def test_generate_continues_as_transformers_and_the_cli_reads_the_folder(chat_dir: Path) -> None:
    from transformers import AutoTokenizer

    model = api.load_model(chat_dir)
    hf_tok = AutoTokenizer.from_pretrained(chat_dir)
    prompt = "the old owl"
    ids = hf_tok(prompt)["input_ids"]
    assert model.encode_prompt(prompt) == ids
    text = model.generate(prompt, 10)
    assert text == hf_tok.decode(_hf_greedy(chat_dir, ids, 10), skip_special_tokens=True)
    out = cli_ok("generate", str(chat_dir), "--prompt", prompt, "--max-new-tokens", "10", "--temperature", "0")
    assert out.stdout == prompt + text + "\n"


def test_a_scripted_chat_gives_the_replies_of_model_chat(chat_dir: Path) -> None:
    model = api.load_model(chat_dir)
    session = api.ChatSession(model, system="Answer briefly.", max_new_tokens=8, temperature=0.0)
    replies = [session.send("the cat sat").text, session.send("and the dog").text]
    history = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "the cat sat"}]
    assert replies[0] == model.chat(history, 8)
    history += [{"role": "assistant", "content": replies[0]}, {"role": "user", "content": "and the dog"}]
    assert replies[1] == model.chat(history, 8)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = "the cat sat\nand the dog\n/reset\nthe cat sat\n/exit\nnever read\n"
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit", "chat", str(chat_dir), "--system", "Answer briefly.", *GREEDY_8],
        input=script,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [r.replace("\\", "\\\\").replace("\n", "\\n") for r in (replies[0], replies[1], replies[0])]
    assert proc.stdout.split("\n") == [*lines, ""]
    assert "conversation forgotten" in proc.stderr


def test_old_turns_are_dropped_when_the_conversation_outgrows_the_context(tmp_path: Path) -> None:
    model = api.load_model(build_chatml_model(tmp_path / "small", context=64))
    session = api.ChatSession(model, max_new_tokens=4, temperature=0.0)
    dropped = [session.send(text).dropped for text in ("the cat sat", "a dog ran", "she read", "we walked")]
    assert dropped[0] == 0 and sum(dropped) > 0
    assert session.history[0]["role"] == "user"  # whole turns go: the history starts with a user message
    # the last prompt (without its reply) left room for the 4-token reply
    assert len(model.encode_chat(session.messages()[:-1])) + 4 <= model.context
    before = list(session.history)
    with pytest.raises(ValueError, match="does not fit the model's context of 64 tokens"):
        session.send("the cat sat on the mat " * 10)
    assert session.history == before


def test_an_imported_folder_keeps_the_template_and_the_stop_ids(chat_dir: Path, tmp_path: Path) -> None:
    api.import_model(chat_dir, tmp_path / "imported")
    imported, original = api.load_model(tmp_path / "imported"), load_pretrained(chat_dir)
    assert imported.encode_chat(MESSAGES) == original.encode_chat(MESSAGES)
    assert imported.stop_ids == original.stop_ids
    assert imported.chat(MESSAGES, 6) == original.chat(MESSAGES, 6)


def test_a_folder_of_no_kind_names_the_three_kinds(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    for command in (["generate", str(tmp_path / "notes")], ["chat", str(tmp_path / "notes")]):
        proc = cli_in_process(*command)
        assert proc.returncode == 2
        for kind in ("an attnkit run", "an attnkit model folder", "a Hugging Face model folder"):
            assert kind in proc.stderr
    with pytest.raises(CheckpointError, match="no task runs as it is"):
        api.load_run(_bert_like(tmp_path))


def _bert_like(tmp_path: Path) -> Path:
    from transformers import BertConfig, BertModel

    folder = tmp_path / "bert"
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertModel(config).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *map(str, range(45))]))
    return folder


def test_documents_are_framed_as_the_model_was_trained(chat_dir: Path) -> None:
    tok = load_pretrained(chat_dir).tokenizer
    end = tok.token_to_id("<|im_end|>")
    assert document_bounds(tok) == (None, end)  # Qwen2: no BOS, documents end with the EOS
    assert document_ids(tok, "the cat") == [*tok.encode("the cat"), end]
    assert prompt_ids(tok, "") == [end]


def test_lm_init_fine_tunes_a_hugging_face_folder_with_its_tokenizer(chat_dir: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(SENTENCES * 3))
    result = api.train(
        "lm",
        **{
            "model.init": str(chat_dir),
            "model.lora.rank": 4,
            "model.max_len": 32,
            "data.source": str(corpus),
            "trainer.max_epochs": 1,
            "output_dir": str(tmp_path / "runs"),
            **QUIET_TRAINING,
        },
    )
    run = result.run_dir
    loaded = api.load_run(run)
    tok = loaded.task.build_datamodule(loaded.config, loaded.hparams["artifacts"]).tokenizer
    assert tok.vocab_size == load_pretrained(chat_dir).tokenizer.vocab_size and tok.kind == "pretrained"
    # The run's blocks are the corpus framed as the model's documents (no BOS; <|im_end|> after each).
    dm = loaded.task.build_datamodule(loaded.config, loaded.hparams["artifacts"])
    dm.setup("fit")
    stream = torch.cat([x[0] for x in (dm.datasets["train"][i] for i in range(len(dm.datasets["train"])))])
    end = tok.token_to_id("<|im_end|>")
    assert document_bounds(tok) == (None, end)
    first = document_ids(tok, dm.documents["train"][0])
    assert stream[: len(first)].tolist() == first and int((stream == end).sum()) >= len(dm.documents["train"]) - 1
    # The run works with every command: chat and generate from Python and the command line.
    model = api.load_model(run)
    assert isinstance(model.chat(MESSAGES[:2], 4), str)
    out = cli_ok("generate", str(run), "--prompt", "the cat", "--max-new-tokens", "4", "--temperature", "0")
    assert out.stdout.startswith("the cat") and out.stdout.rstrip("\n") == "the cat" + model.generate("the cat", 4)
