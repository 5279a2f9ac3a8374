import pytest

from attnkit.api import build_config
from attnkit.config import ConfigError, parse_overrides


def test_defaults_are_the_tutorials():
    cfg = build_config("reverse")
    assert (cfg.model.d_model, cfg.model.num_heads, cfg.model.num_layers) == (32, 1, 1)
    assert (cfg.optim.lr, cfg.optim.warmup, cfg.optim.gradient_clip_val) == (5e-4, 50, 5.0)
    assert cfg.trainer.max_epochs == 10
    assert (cfg.data.num_categories, cfg.data.seq_len) == (10, 16)
    assert (cfg.data.train_size, cfg.data.val_size, cfg.data.test_size) == (50000, 1000, 10000)


def test_overrides_both_syntaxes():
    o = parse_overrides(["model.d_model=64", "--optim.lr", "1e-3", "--trainer.max_epochs=2", "name=null"])
    assert o == {"model": {"d_model": 64}, "optim": {"lr": 1e-3}, "trainer": {"max_epochs": 2}, "name": None}
    cfg = build_config("reverse", overrides=o)
    assert cfg.model.d_model == 64 and cfg.optim.lr == 1e-3 and cfg.trainer.max_epochs == 2


def test_yaml_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 48\n  num_heads: 2\ntrainer:\n  max_epochs: 3\n")
    cfg = build_config("reverse", path, {"trainer.max_epochs": 4})
    assert cfg.model.d_model == 48 and cfg.model.num_heads == 2 and cfg.trainer.max_epochs == 4


def test_unknown_key_names_key_and_allowed_keys():
    with pytest.raises(ConfigError, match=r"model\.d_modle: unknown key; allowed keys here: .*d_model"):
        build_config("reverse", overrides={"model.d_modle": 3})


def test_unknown_section_in_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("modle:\n  d_model: 48\n")
    with pytest.raises(ConfigError, match=r"modle: unknown key; allowed keys here: .*model"):
        build_config("reverse", path)


def test_bad_values_name_key_and_allowed_values():
    with pytest.raises(ConfigError, match=r"optim\.optimizer: Input should be 'adam' or 'adamw'"):
        build_config("reverse", overrides={"optim.optimizer": "sgd"})
    with pytest.raises(ConfigError, match=r"model: dropout must be in \[0, 1\), got 1.5"):
        build_config("reverse", overrides={"model.dropout": 1.5})
    with pytest.raises(ConfigError, match=r"num_heads \(3\) must divide d_model \(32\)"):
        build_config("reverse", overrides={"model.num_heads": 3})
    with pytest.raises(ConfigError, match=r"data\.seq_len: Input should be greater than or equal to 1 \(got 0\)"):
        build_config("reverse", overrides={"data.seq_len": 0})


def test_unknown_task():
    with pytest.raises(ValueError, match=r"unknown task 'revers'; available tasks: .*reverse"):
        build_config("revers")


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["model.d_model"])


def test_bad_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        build_config("reverse", path)
    with pytest.raises(ConfigError, match="does not exist"):
        build_config("reverse", tmp_path / "missing.yaml")


def test_overriding_one_key_keeps_the_tasks_other_defaults_of_that_section(tmp_path):
    # classify's defaults differ from TrainerConfig's class defaults (5 epochs, batch 32):
    # overriding trainer.threads must not reset them to 10 epochs and batch 128.
    default = build_config("classify")
    cfg = build_config("classify", overrides={"trainer.threads": 1})
    assert cfg.trainer.threads == 1
    assert (cfg.trainer.max_epochs, cfg.trainer.batch_size) == (default.trainer.max_epochs, default.trainer.batch_size)
    assert cfg.optim == default.optim
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 0.01\n")
    cfg = build_config("reverse", path)
    assert cfg.optim.lr == 0.01
    assert cfg.optim.warmup == build_config("reverse").optim.warmup


def test_lm_model_preset_key_from_overrides():
    """`model.preset=llama` sets the family's fields the run did not set itself; explicit values win."""
    cfg = build_config("lm", overrides={"model.preset": "llama", "model.num_kv_heads": 2, "model.positional": "alibi"})
    m = cfg.model  # type: ignore[attr-defined]
    assert (m.preset, m.norm, m.activation, m.bias, m.tie_weights) == ("llama", "rmsnorm", "swiglu", False, False)
    assert m.num_kv_heads == 2 and m.positional == "alibi"
    assert m.d_model == 128 and m.max_len == 64  # the task's sizes stay
    again = type(cfg).model_validate(cfg.model_dump())  # a stored config validates to the same
    assert again.model_dump() == cfg.model_dump()
