"""Tasks register themselves with ``@register_task``; the CLI, the API and the tuner find them by name."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from attnkit.tasks import TASKS, build_config, get_task, register_task
from attnkit.tasks.reverse import ReverseConfig, ReverseTask


class EchoConfig(ReverseConfig):
    defaults: ClassVar[dict[str, Any]] = {"trainer": {"max_epochs": 1}}


@pytest.fixture
def echo_task():
    class EchoTask(ReverseTask):
        name = "echo"
        summary = "a registered copy of reverse"
        config_cls = EchoConfig

    yield register_task(EchoTask)
    TASKS.unregister("echo")


def test_a_registered_task_is_found_by_name(echo_task):
    assert type(get_task("echo")) is echo_task
    assert "echo" in TASKS and TASKS["echo"].summary == "a registered copy of reverse"
    cfg = build_config("echo", overrides={"model.d_model": 16})
    assert isinstance(cfg, EchoConfig)
    # The subclass's defaults merge over its base's: reverse's model and optimiser, its own epochs.
    assert (cfg.model.d_model, cfg.model.num_heads, cfg.optim.lr, cfg.trainer.max_epochs) == (16, 1, 5e-4, 1)


def test_a_name_is_registered_once(echo_task):
    class Other(ReverseTask):
        name = "echo"

    with pytest.raises(ValueError, match=r"task name 'echo' is taken by .*EchoTask"):
        register_task(Other)
    assert type(get_task("echo")) is echo_task


def test_a_task_needs_a_name():
    class Nameless(ReverseTask):
        name = ""

    with pytest.raises(TypeError, match="needs a class attribute `name`"):
        register_task(Nameless)


def test_the_built_in_tasks_are_registered():
    assert sorted(TASKS) == ["anomaly", "classify", "dpo", "grpo", "kto", "lm", "reverse", "sft", "translate"]
    with pytest.raises(ValueError, match="unknown task 'revers'; available tasks: anomaly, classify, dpo, grpo, kto"):
        get_task("revers")


def test_a_tasks_defaults_hold_however_its_config_is_built():
    """``TaskConfig.defaults``: a section given as a mapping is merged over the task's defaults (from
    YAML, overrides or plain ``model_validate``); a section given as a config object is used as it is."""
    from attnkit.models import PredictorArchitecture

    cfg = ReverseConfig.model_validate({"model": {"d_model": 64}, "optim": {"lr": 1e-3}})
    assert (cfg.model.d_model, cfg.model.num_heads, cfg.model.dropout) == (64, 1, 0.0)
    assert (cfg.optim.lr, cfg.optim.warmup, cfg.trainer.max_epochs) == (1e-3, 50, 10)
    assert ReverseConfig().model.d_model == 32
    given = ReverseConfig(model=PredictorArchitecture(d_model=64))
    assert (given.model.d_model, given.model.num_heads) == (64, 4)
    # The defaults live in one place: the field's own default is the family's.
    assert ReverseConfig.model_fields["model"].default.d_model == PredictorArchitecture().d_model
