"""Stop strings on streamed text: cut a choice before the first stop string, and never send text that
could still turn out to be the start of one."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopText"]


class StopText:
    """The text of one choice as it arrives, cut at the first of ``stops``.

    :meth:`add` takes the next piece and returns ``(text safe to send now, stopped)``: text is held back
    while its end could still grow into a stop string; once a stop string appears, everything before it
    that was not sent yet is returned with ``stopped=True``. :meth:`flush` returns what is still held
    back at the end (cut at a stop string too). The pieces returned concatenate to the text up to
    (without) the first stop string.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty strings, got {list(stops)!r}")
        self.stops = tuple(stops)
        self.text = ""
        self.sent = 0
        self._longest = max((len(s) for s in self.stops), default=0)

    def add(self, piece: str) -> tuple[str, bool]:
        self.text += piece
        if not self.stops:
            return self._send(len(self.text)), False
        cut = self._find()
        if cut >= 0:
            return self._send(cut), True
        return self._send(len(self.text) - self._held()), False

    def flush(self, piece: str = "") -> str:
        self.text += piece
        cut = self._find() if self.stops else -1
        return self._send(cut if cut >= 0 else len(self.text))

    def _find(self) -> int:
        """Where the earliest stop string starts (-1: none). A stop string can only start in the held-back
        tail, so the search starts there."""
        start = max(0, self.sent - self._longest)
        found = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        return min(found, default=-1)

    def _held(self) -> int:
        """Length of the longest end of the text that is the start of a stop string."""
        for size in range(min(self._longest - 1, len(self.text) - self.sent), 0, -1):
            tail = self.text[-size:]
            if any(s.startswith(tail) for s in self.stops):
                return size
        return 0

    def _send(self, end: int) -> str:
        out = self.text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out
