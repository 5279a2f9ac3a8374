"""A tiny random Llama chat model (a locally trained byte-level BPE ``tokenizer.json`` and a ChatML
template, saved by ``save_pretrained``; nothing is downloaded) and a real ``attnkit serve`` process on
127.0.0.1 serving it, started with ``--port 0`` (the port is read from its first line of output) and
stopped when the tests are done."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
API_KEY = "test-key"
CORPUS = [
    f"The {a} {b} sat on the {c} and looked at the {d}. It was {e}."
    for a in ("old", "young", "small", "big", "quiet")
    for b in ("owl", "cat", "fox", "dog")
    for c in ("mat", "hill", "roof")
    for d in ("moon", "river", "stars")
    for e in ("late", "cold", "calm")
]


def build_chat_model(folder: Path, *, context: int = 128, seed: int = 0) -> Path:
    """Save a random ``LlamaForCausalLM`` (2 layers, width 32, GQA) with a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    options = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": CHATML,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    ids = {t: tok.token_to_id(t) for t in SPECIALS}
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        initializer_range=0.3,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chat_model(tmp_path_factory.mktemp("serve") / "tiny-chat")


@pytest.fixture(scope="session")
def pretrained(model_dir: Path) -> Any:
    from attnkit.interop import load_pretrained

    return load_pretrained(model_dir)


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT
    lines: list[str]

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def request(
        self, method: str, path: str, body: bytes | dict[str, Any] | None = None, key: str | None = API_KEY
    ) -> tuple[int, Any]:
        """``(status, parsed JSON body)`` of a raw HTTP request."""
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if key is not None:
            req.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        match = re.search(r"VmRSS:\s+(\d+) kB", status)
        assert match is not None
        return int(match.group(1))


def start_server(folder: Path, *args: str, log: Path) -> Server:
    """``attnkit serve FOLDER --port 0 ARGS`` in a process; waits for the line giving its URL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ATTNKIT_API_KEY", None)
    stderr = log.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "attnkit", "serve", str(folder), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    stderr.close()
    lines: list[str] = []
    first: queue.Queue[str] = queue.Queue()

    def read() -> None:  # reads until the process exits, so its stdout never fills up
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            first.put(line)
        first.put("")

    threading.Thread(target=read, daemon=True).start()
    try:
        line = first.get(timeout=120)
        match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if match is None:
            raise RuntimeError(f"the server did not report its URL: {line!r}; stderr: {log.read_text()}")
    except BaseException:
        stop_server(process)
        raise
    return Server(process, f"http://127.0.0.1:{match.group(1)}", lines)


def stop_server(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


@pytest.fixture(scope="session")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The model served with an API key and ``--max-batch 32``."""
    log = tmp_path_factory.mktemp("serve-log") / "stderr.txt"
    srv = start_server(model_dir, "--api-key", API_KEY, "--max-batch", "32", "--model-name", "tiny-chat", log=log)
    try:
        yield srv
    finally:
        stop_server(srv.process)
