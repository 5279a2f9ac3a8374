"""Streaming generation's text: ids arriving one by one, turned into text pieces."""

from __future__ import annotations

from attnkit.text.tokenizers import Tokenizer

__all__ = ["StreamDecoder"]


class StreamDecoder:
    """Turns ids arriving one by one into text pieces, for streaming generation.

    ``push(id)`` returns the new text (possibly ``""``: a byte-level token may end inside a
    multi-byte character, which is held back until it is complete); ``flush()`` returns what is
    still held back. The pieces concatenate to ``tokenizer.decode(all ids)``.

    Each step decodes a short window, not every id so far (the incremental detokenisation of
    text-generation servers): the ids since the last emitted piece, after the piece before it as
    context, so that a decoder that renders a token by its neighbours (a leading space dropped at the
    start of a text, WordPiece's ``##``) renders it as within the whole text. A decoder whose
    window does not extend the text it gave before is answered from the whole text instead.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self.ids: list[int] = []
        self._emitted = 0  # characters emitted so far
        self._context = 0  # the window starts here: ids[_context:_read] were emitted last, as context
        self._read = 0  # ids before this are emitted
        self._whole = tokenizer.spec.whole_tokens  # one token is always whole text

    def push(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        if self._whole:
            text = self._decode(self.ids[-1:])
            self._emitted += len(text)
            return text
        return self._advance(final=False)

    def flush(self) -> str:
        return "" if self._whole else self._advance(final=True)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special=self.skip_special)

    def _advance(self, final: bool) -> str:
        before = self._decode(self.ids[self._context : self._read])
        after = self._decode(self.ids[self._context :])
        if not final and after.endswith("\ufffd"):
            return ""  # the last token ends inside a character: wait for the rest of it
        # A window that renders earlier text differently: the new text is taken from the whole.
        new = after[len(before) :] if after.startswith(before) else self._decode(self.ids)[self._emitted :]
        if new:
            self._context, self._read = self._read, len(self.ids)
        self._emitted += len(new)
        return new
