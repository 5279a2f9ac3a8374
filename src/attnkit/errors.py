"""Errors that tell a user what they got wrong (importing this module is cheap)."""

from pathlib import Path

__all__ = ["CheckpointError", "ConfigError", "Preempted"]


class ConfigError(ValueError):
    """A config file, key or value that is not valid; the message says which and what is allowed."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, truncated, corrupt or from another model."""


class Preempted(SystemExit):
    """A run stopped by a signal. ``code`` is ``128 + signum``; ``checkpoint`` is the ``last.ckpt``
    written on the way out (None when none could be); ``message`` says how to continue."""

    def __init__(self, signum: int, checkpoint: Path | None, message: str, *, is_global_zero: bool = True) -> None:
        super().__init__(128 + signum)
        self.signum = signum
        self.checkpoint = checkpoint
        self.message = message
        self.is_global_zero = is_global_zero

    def __str__(self) -> str:
        return self.message
