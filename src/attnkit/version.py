"""The package version (a base module: every layer may import it)."""

__version__ = "0.1.0"
