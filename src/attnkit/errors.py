"""Errors that tell a user what they got wrong (importing this module is cheap)."""

__all__ = ["CheckpointError", "ConfigError"]


class ConfigError(ValueError):
    """A config file, key or value that is not valid; the message says which and what is allowed."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, truncated, corrupt or from another model."""
