"""Standard benchmarks with EleutherAI's lm-evaluation-harness: :func:`evaluate_harness` (what ``attnkit
eval RUN --tasks ...`` runs), :func:`harness_table` and :func:`harness_json` (how it shows the results).

lm_eval (``pip install attnkit[eval]``) is imported on first use only.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.api.models import load_model
from attnkit.interop import Pretrained

__all__ = ["evaluate_harness", "harness_json", "harness_table", "parse_gen_kwargs"]

logger = logging.getLogger(__name__)


def _lm_eval() -> Any:
    try:
        import lm_eval
    except ImportError as err:
        raise ImportError(f"`attnkit eval` needs lm-evaluation-harness ({err}): pip install 'attnkit[eval]'") from None
    return lm_eval


def _task_names(tasks: str | Sequence[str]) -> list[str]:
    names = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"tasks must be task names (a list of str, or one str 'a,b'), got {tasks!r}")
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise ValueError("no task given: name lm-evaluation-harness tasks, e.g. tasks=['hellaswag', 'arc_easy']")
    return names


def _check_tasks(names: list[str], known: Sequence[str], where: str) -> None:
    """A ``ValueError`` naming the unknown tasks, each with the known names closest to it."""
    unknown = [n for n in names if n not in known and not Path(n).is_file()]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
        hints.append(f"{name!r} (did you mean {', '.join(close)}?)" if close else repr(name))
    raise ValueError(f"unknown lm-evaluation-harness task {', '.join(hints)}: no such task, group or tag in {where}")


def parse_gen_kwargs(gen_kwargs: str | dict[str, Any] | None) -> dict[str, Any] | None:
    """Generation options as a dict: ``gen_kwargs`` itself, or lm_eval's ``--gen_kwargs`` text
    ``"max_gen_toks=32,temperature=0,do_sample=false"`` (comma-separated ``key=value``, each value
    read by lm_eval's own parser: numbers, ``true``/``false``, ``none``, text; a quoted value stays text),
    None for nothing given. A part without ``=`` or with an empty key is a ``ValueError``."""
    if gen_kwargs is None or isinstance(gen_kwargs, dict):
        return gen_kwargs or None
    if not isinstance(gen_kwargs, str):
        raise TypeError(f"gen_kwargs must be a dict or a 'key=value,...' string, got {type(gen_kwargs).__name__}")
    from lm_eval.utils import simple_parse_args_string

    for part in filter(None, (p.strip() for p in gen_kwargs.split(","))):
        if not part.partition("=")[0].strip() or "=" not in part:
            raise ValueError(
                f"gen_kwargs {gen_kwargs!r}: {part!r} is not key=value; write comma-separated key=value pairs, "
                "e.g. max_gen_toks=32,temperature=0"
            )
    parsed = simple_parse_args_string(gen_kwargs)
    return {key.strip(): value for key, value in parsed.items()} or None


def evaluate_harness(
    model: Pretrained | str | Path,
    tasks: str | Sequence[str],
    *,
    include_path: str | Path | Sequence[str | Path] | None = None,
    include_defaults: bool = True,
    num_fewshot: int | None = None,
    limit: int | float | None = None,
    batch_size: int = 8,
    device: str | None = None,
    max_length: int | None = None,
    log_samples: bool = False,
    gen_kwargs: str | dict[str, Any] | None = None,
    apply_chat_template: bool = False,
    bootstrap_iters: int = 100_000,
    random_seed: int = 0,
) -> dict[str, Any]:
    """Evaluate a language model on lm-evaluation-harness tasks; lm_eval's results dict
    (``results[task][metric]``, ``"configs"``, ``"versions"``, ``"n-shot"``; ``"samples"`` with
    ``log_samples``).

    Args:
        model: a RUN (an attnkit run folder or checkpoint, an attnkit model folder or a Hugging Face
            folder; :func:`attnkit.api.load_model`) or a loaded :class:`~attnkit.interop.Pretrained`.
        tasks: lm_eval task, group or tag names (``["hellaswag", "arc_easy"]`` or ``"hellaswag,arc_easy"``),
            or task YAML files.
        include_path: folders (or one) of your own task YAMLs, added to lm_eval's.
        include_defaults: also index lm_eval's built-in tasks (false: only ``include_path``'s, which
            starts about 10 s sooner).
        num_fewshot: examples put before each question (default: each task's own).
        limit: at most this many documents per task (a float below 1: that fraction).
        batch_size: requests per forward pass; device: ``"cpu"``, ``"cuda"``... (default: CUDA if any);
        max_length: the context used (default: the model's).
        log_samples: keep every document's requests and answers under ``"samples"``.
        gen_kwargs: generation options of the ``generate_until`` tasks, over each task's own
            ``generation_kwargs`` (``{"max_gen_toks": 32, "do_sample": True, "temperature": 0.7}``, or
            lm_eval's text ``"max_gen_toks=32,temperature=0"``; :func:`parse_gen_kwargs`). The model takes
            ``until``, ``max_gen_toks`` (or ``max_new_tokens``...), ``do_sample``, ``temperature``,
            ``top_k``, ``top_p`` and ``min_p``; ``max_gen_toks`` must leave room for a prompt in the
            context (on a model whose context is 256 tokens or less, lm_eval's default of 256 does not:
            without one, half the context is used).
        apply_chat_template: render the prompts with the model's chat template (instruct models).
        bootstrap_iters: resamples for the standard errors of non-mean metrics (0: none).
        random_seed: the seed of Python's, NumPy's and torch's generators and of few-shot sampling.

    Unknown task names are a ``ValueError`` that lists the closest known names; a model that is not a
    language model is a ``TypeError``; generation options the model does not take, or a ``max_gen_toks``
    that leaves no room for a prompt, a ``ValueError`` before anything is evaluated.
    """
    lm_eval = _lm_eval()
    from lm_eval.tasks import TaskManager

    from attnkit.lmeval import MAX_GEN_TOKS_ALIASES, AttnkitLM

    names = _task_names(tasks)
    gen_kwargs = parse_gen_kwargs(gen_kwargs)
    if isinstance(include_path, Sequence) and not isinstance(include_path, str):
        paths: Any = [str(p) for p in include_path]
    else:
        paths = str(include_path) if include_path is not None else None
    for path in [paths] if isinstance(paths, str) else paths or []:
        if not Path(path).is_dir():
            raise FileNotFoundError(f"include_path {path} is not a folder of lm-evaluation-harness task YAML files")
    if not include_defaults and not paths:
        raise ValueError("include_defaults=False needs an include_path: there would be no task to run")
    manager = TaskManager(include_path=paths, include_defaults=include_defaults)
    folders = ", ".join([paths] if isinstance(paths, str) else paths or [])
    builtin = "lm_eval's tasks (`lm_eval ls tasks` lists them)"
    if not folders:
        where = f"{builtin}; tasks of your own: include_path=FOLDER of task YAML files"
    else:
        where = f"{builtin} or {folders}" if include_defaults else folders
    _check_tasks(names, manager.all_tasks, where)
    if isinstance(model, str | Path):
        model = load_model(model)
    lm = AttnkitLM(model, batch_size=batch_size, device=device, max_length=max_length)
    if gen_kwargs:  # checked now, not after the other tasks ran (only the options given: a stand-in length)
        given = {"max_gen_toks": 1} if not {"max_gen_toks", *MAX_GEN_TOKS_ALIASES} & set(gen_kwargs) else {}
        lm.generation_settings({**given, **gen_kwargs})
    logger.info("evaluating %s on %s", model.source, ", ".join(names))
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=names,
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=manager,
        log_samples=log_samples,
        gen_kwargs=gen_kwargs,
        apply_chat_template=apply_chat_template,
        bootstrap_iters=bootstrap_iters,
        random_seed=random_seed,
        numpy_random_seed=random_seed,
        torch_random_seed=random_seed,
        fewshot_random_seed=random_seed,
    )
    if results is None:  # only other ranks of a distributed run get None; attnkit runs one process
        raise RuntimeError("lm_eval returned no results")
    results.setdefault("config", {})["model"] = f"attnkit ({model.source})"
    return dict(results)


def harness_table(results: dict[str, Any]) -> str:
    """The results as lm_eval prints them (its ``make_table``): one Markdown table of the tasks, and one
    of the groups when there are groups."""
    from lm_eval.utils import make_table

    table = make_table(results)
    if results.get("groups"):
        table += "\n" + make_table(results, "groups")
    return str(table)


def harness_json(results: dict[str, Any]) -> str:
    """The results as JSON text (values JSON cannot hold written as lm_eval writes them)."""
    from lm_eval.utils import handle_non_serializable

    return json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False)
