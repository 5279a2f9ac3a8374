"""The fuzzing harness shared by the suite (``tests/fuzz``: a few hundred derandomized examples per
target) and the long run (``tools/fuzz.py``): the oracle, the registry of targets, byte mutations
and the small assets (a trained run, model folders) that the targets corrupt.

The oracle: for every generated input a call either succeeds or raises one of attnkit's user
errors (:data:`USER_ERRORS`, what the ``attnkit`` command turns into ``error: ...`` and exit code 2),
raised by attnkit's own code (not a ``ValueError`` of numpy or a ``UnicodeDecodeError`` passing
through) and naming the input (the file, the folder or the key). Anything else fails the target.
A file that attnkit wrote and checks (a checkpoint, a token cache entry), corrupted byte by byte, may
load only as exactly what was written (the corruption was in bytes the format ignores):
:func:`require_intact`; loading other content without a word fails the target too.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

import attnkit
from attnkit.errors import CheckpointError, ConfigError

ATTNKIT_DIR = Path(attnkit.__file__).resolve().parent
# The errors that mean "the input is wrong" (the CLI's USER_ERRORS less TypeError, which is a bug here).
USER_ERRORS: tuple[type[Exception], ...] = (ConfigError, CheckpointError, ValueError, FileNotFoundError)


class Leak(AssertionError):
    """A generated input made attnkit fail with something other than a user error naming the input."""


def check_user_error(err: BaseException, names: tuple[str, ...]) -> None:
    """``err`` must have been raised by attnkit's code and its message must name one of ``names``."""
    frames = traceback.extract_tb(err.__traceback__)
    origin = Path(frames[-1].filename).resolve() if frames else None
    if origin is None or not origin.is_relative_to(ATTNKIT_DIR):
        raise Leak(f"{type(err).__name__} from {origin}, not an attnkit error: {err}") from err
    message = str(err)
    if not any(name and name in message for name in names):
        raise Leak(f"{type(err).__name__} does not name the input (one of {names!r}): {message}") from err


def expect_user_error(call: Callable[[], Any], *names: str | Path) -> Any:
    """``call()``'s result, or None when it raised a user error that names one of ``names``."""
    try:
        return call()
    except USER_ERRORS as err:
        check_user_error(err, tuple(str(n) for n in names))
        return None


def same_content(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same nested dicts, lists and values, tensors and arrays equal bit
    for bit (NaN too) with the same dtype and shape."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_content(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same_content(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN
    return type(a) is type(b) and a == b


def require_intact(loaded: Any, original: Any, what: str | Path) -> None:
    """``loaded`` (what a corrupted input loaded as, ``None``: it was refused) must be ``original``:
    a load that succeeds gives exactly what was written."""
    if loaded is not None and not same_content(loaded, original):
        raise Leak(f"{what}: corrupted, it loaded without an error as other content than was written")


# ------------------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """``check(assets, example)`` on every ``example`` drawn from ``strategy``."""

    name: str
    strategy: st.SearchStrategy[Any]
    check: Callable[[Assets, Any], None]
    examples: int = 200  # in the suite


TARGETS: dict[str, Target] = {}


def target(name: str, strategy: st.SearchStrategy[Any], *, examples: int = 200) -> Callable[..., Any]:
    """Register the decorated ``check(assets, example)`` as the target ``name``."""

    def register(check: Callable[[Assets, Any], None]) -> Callable[[Assets, Any], None]:
        if name in TARGETS:
            raise ValueError(f"fuzz target {name!r} is registered twice")
        TARGETS[name] = Target(name, strategy, check, examples)
        return check

    return register


def targets(prefix: str) -> list[Target]:
    return [t for name, t in TARGETS.items() if name.startswith(prefix)]


def run_target(
    t: Target,
    assets: Assets,
    examples: int | None = None,
    *,
    derandomize: bool = True,
    seed: int | None = None,
    timeout_s: float | None = None,
) -> int:
    """Run ``t`` on ``examples`` generated inputs (Hypothesis); returns how many were tried. A
    failing input is shrunk and raised; with ``timeout_s`` (main thread only), so is one that
    takes longer than that (a hang is a failure too)."""
    calls = 0

    def body(example: Any) -> None:
        nonlocal calls
        calls += 1
        if timeout_s is None:
            t.check(assets, example)
            return
        previous = signal.signal(signal.SIGALRM, _too_slow)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
        try:
            t.check(assets, example)
        except Hang:
            raise Hang(f"{t.name}: an example took over {timeout_s} s (a hang?): {example!r}") from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    test = given(t.strategy)(body)
    test = settings(
        max_examples=examples or t.examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )(test)
    if seed is not None and not derandomize:
        test = hypothesis_seed(seed)(test)
    test()
    return calls


class Hang(BaseException):
    """An example that took too long; a BaseException, so that no ``except Exception`` of the code under
    test turns it into a user error."""


def _too_slow(signum: int, frame: Any) -> None:
    raise Hang("the example took too long")


# -------------------------------------------------------------------------------------- byte mutations
# One mutation: (kind, where in [0, 1) of the file or of one of its interesting ranges, which range, a value).
MUTATION = st.tuples(
    st.sampled_from(["truncate", "flip", "zero", "insert", "delete", "byte"]),
    st.floats(0, 1, exclude_max=True),
    st.integers(0, 7),
    st.integers(0, 255),
)
MUTATIONS = st.lists(MUTATION, min_size=1, max_size=3)


def mutate(blob: bytes, mutations: list[tuple[str, float, int, int]], ranges: list[tuple[int, int]] = ()) -> bytes:
    """``blob`` truncated, bit-flipped, zeroed, ... as ``mutations`` say. ``ranges``: ``(start, end)``
    byte ranges worth hitting (headers, the pickle of a checkpoint): the ``which`` of a mutation
    picks one of them (or, past the last one, the whole file)."""
    data = bytearray(blob)
    for kind, where, which, value in mutations:
        start, end = ranges[which] if which < len(ranges) else (0, len(data))
        start, end = min(start, len(data)), min(end, len(data))
        pos = start + int(where * max(end - start, 1))
        pos = min(pos, max(len(data) - 1, 0))
        if kind == "truncate":
            del data[pos:]
        elif not data:
            continue
        elif kind == "flip":
            data[pos] ^= 1 << (value % 8)
        elif kind == "byte":
            data[pos] = value
        elif kind == "zero":
            data[pos : pos + value + 1] = bytes(len(data[pos : pos + value + 1]))
        elif kind == "insert":
            data[pos:pos] = bytes([value]) * (value % 5 + 1)
        else:  # delete
            del data[pos : pos + value % 16 + 1]
    return bytes(data)


# ---------------------------------------------------------------------------------------------- assets
class Assets:
    """Small things to corrupt, built once (lazily) under ``root``; ``scratch()`` is a fresh folder
    per example."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        folder = Path(tempfile.mkdtemp(dir=self.root, prefix="ex-"))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @cached_property
    def run_dir(self) -> Path:
        """A tiny trained ``reverse`` run (a few seconds)."""
        result = attnkit.train(
            "reverse",
            output_dir=str(self.root / "runs"),
            name="tiny",
            **{
                "data.train_size": 64,
                "data.val_size": 16,
                "data.test_size": 16,
                "data.seq_len": 4,
                "trainer.max_epochs": 1,
                "trainer.batch_size": 16,
                "trainer.threads": 1,
                "trainer.progress_bar": False,
                "trainer.report": False,
                "optim.warmup": 1,
                "model.d_model": 8,
                "model.dim_feedforward": 8,
            },
        )
        return Path(result.run_dir)

    @cached_property
    def checkpoint_bytes(self) -> bytes:
        return (self.run_dir / "checkpoints" / "best.ckpt").read_bytes()

    @cached_property
    def checkpoint(self) -> dict[str, Any]:
        """The run's best checkpoint, loaded (deep-copy it before changing it)."""
        import torch

        return torch.load(self.run_dir / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)

    @cached_property
    def cache_entry(self) -> Path:
        """A token cache entry: token ids of one split, texts and an array (``CacheWriter``)."""
        import numpy as np

        from attnkit.data.cache import CacheWriter

        folder = self.root / "cache-entry"
        folder.mkdir()
        writer = CacheWriter(folder, ["train"], np.dtype(np.uint16))
        writer.add_rows("train", [[1, 2, 3], [400, 5], [], [65_535]])
        writer.add_texts("docs", ["first", "", "sécond ünï"])
        writer.save_array("labels", np.array([0, 1, 1, 2], dtype=np.int64))
        writer.finish({"tokenizer": {"kind": "char", "vocab": ["a", "b", "é"]}, "chars": {"train": 12}})
        return folder

    @cached_property
    def cache_content(self) -> dict[str, Any]:
        """What :attr:`cache_entry` holds, as the cache target reads it."""
        from attnkit.data.cache import TokenCache

        return cache_content(TokenCache.open(self.cache_entry))

    @cached_property
    def tokenizer(self) -> Any:
        from attnkit.text.tokenizers import build_tokenizer

        return build_tokenizer("char", ["abc def", "ghi"])

    def language_model(self, preset: str | None = None) -> Any:
        from attnkit.models.lm import LanguageModel, LanguageModelConfig

        config = LanguageModelConfig(
            preset=preset, vocab_size=16, d_model=8, num_heads=2, num_layers=1, dim_feedforward=8, max_len=8
        )
        return LanguageModel(config)

    @cached_property
    def model_dir(self) -> Path:
        """An attnkit model folder (``attnkit.json``, ``model.safetensors``, the tokenizer's files)."""
        from attnkit.interop.export import save_model

        return save_model(self.language_model(), self.root / "model", tokenizer=self.tokenizer)

    def hf_dir(self, kind: str) -> Path:
        """A Hugging Face folder of a tiny ``gpt2`` or ``llama`` model with a tokenizer."""
        from attnkit.interop.hf_export import export_hf

        folder = self.root / f"hf-{kind}"
        if not (folder / "config.json").is_file():
            export_hf(self.language_model(None if kind == "gpt2" else kind), folder, tokenizer=self.tokenizer)
        return folder


def cache_content(cache: Any) -> dict[str, Any]:
    """Everything an opened :attr:`Assets.cache_entry` holds (a ``TokenCache``), read."""
    import numpy as np

    return {
        "meta": cache.meta,
        "dtype": str(cache.dtype),
        "tokens": np.asarray(cache.tokens("train")),
        "offsets": np.asarray(cache.offsets("train")),
        "texts": list(cache.texts("docs")),
        "labels": np.asarray(cache.array("labels")),
    }


def copy_folder(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest, dirs_exist_ok=True)
    return dest
