"""Text to ids and back: tokenizers, chat templates, stop strings, and how documents are framed.

- :mod:`~attnkit.text.tokenizers`: the one :class:`Tokenizer` class (on Hugging Face ``tokenizers``) for
  attnkit's own kinds (char, word, BPE, text) and pretrained tokenizers; :class:`StreamDecoder` for
  streaming generation. :mod:`~attnkit.text.tokenizer_kinds`: the kinds, each registered once;
  :mod:`~attnkit.text.byte_pairs`: byte-pair training; :mod:`~attnkit.text.pretrained_tokenizer`:
  reading a model folder's tokenizer.
- :mod:`~attnkit.text.chat`: chat templates, rendered as transformers renders them, and the ids that end
  a turn; :mod:`~attnkit.text.stops`: cutting streamed text at stop strings.
- :mod:`~attnkit.text.framing`: the ids a model's tokenizer writes around a document and a prompt.
- :mod:`~attnkit.text.generate`: text out of a decoder (prompt ids -> new ids -> streamed text -> cut at the
  stop strings), the one path of ``generate``, ``chat`` and ``lmeval``; it imports the models.

The datasets (:mod:`attnkit.data`) and outside checkpoints (:mod:`attnkit.interop`) both build on it;
it imports neither.
"""

from attnkit.text.pretrained_tokenizer import tokenizer_from_folder
from attnkit.text.streaming import StreamDecoder
from attnkit.text.tokenizers import PAD, UNK, Tokenizer, build_tokenizer, tokenizer_from_dict

__all__ = [
    "PAD",
    "UNK",
    "StreamDecoder",
    "Tokenizer",
    "build_tokenizer",
    "tokenizer_from_dict",
    "tokenizer_from_folder",
]
