"""BERT-style encoders: token + token-type + learned position embeddings, LayerNorm, a post-norm
GELU encoder stack and an optional pooler; and a classifier that puts a new head on such an encoder.

``ids [B, T]`` -> ``(word + token_type) + position`` -> LayerNorm -> dropout ->
:class:`attnkit.nn.TransformerEncoder` (post-norm blocks, as BERT) -> hidden states ``[B, T, D]``.
The layout is BERT's, so that :mod:`attnkit.interop` loads BERT checkpoints into it exactly.
Masks are True = real token (may be attended to).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from attnkit.models.checks import check_ids
from attnkit.models.config import EncoderConfig
from attnkit.models.registry import register_model
from attnkit.nn import LearnedPositionalEncoding, TransformerEncoder

__all__ = ["BertArchitecture", "BertClassifier", "BertClassifierConfig", "BertConfig", "BertEncoder", "mean_pool"]

_BERT_BASE: dict[str, Any] = dict(d_model=768, num_heads=12, num_layers=12, dim_feedforward=3072, activation="gelu")


class BertArchitecture(EncoderConfig):
    """The user-set fields of a BERT encoder (stack fields as :class:`EncoderConfig`; defaults are BERT-base's)."""

    field_overrides: ClassVar[dict[str, Any]] = _BERT_BASE
    max_len: int = Field(512, gt=0, description="learned positions: the longest input in tokens")
    type_vocab_size: int = Field(2, ge=0, description="token types (segments); 0 for none")
    layer_norm_eps: float = Field(1e-12, gt=0.0)
    pooler: bool = Field(True, description="BERT's pooler: tanh(Linear(hidden at position 0))")


class BertConfig(BertArchitecture):
    """A BERT encoder: the architecture, the vocabulary size and the padding id."""

    vocab_size: int = Field(..., gt=0, description="token ids lie in [0, vocab_size)")
    pad_id: int | None = Field(0, ge=0, description="padding token id (its embedding gets no gradient)")

    @model_validator(mode="after")
    def _check_bert(self) -> BertConfig:
        if self.norm_first:
            raise ValueError("BERT encoders are post-norm: norm_first must be false")
        if self.pad_id is not None and self.pad_id >= self.vocab_size:
            raise ValueError(f"pad_id ({self.pad_id}) must be < vocab_size ({self.vocab_size})")
        return self


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``hidden [B, T, D]`` over the real tokens of ``mask [B, T]`` (True = real) -> ``[B, D]``."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)


@register_model("bert", BertConfig)
class BertEncoder(nn.Module):
    """BERT's encoder. Attributes: ``token_embedding``, ``token_type_embedding`` (``None`` when
    ``type_vocab_size == 0``), ``positional`` (:class:`LearnedPositionalEncoding`), ``norm`` (the
    embedding LayerNorm), ``dropout``, ``encoder`` (:class:`TransformerEncoder`, post-norm) and
    ``pooler`` (``nn.Linear`` or ``None``).

    Initialisation as BERT: every Linear and Embedding weight ``N(0, 0.02)``, biases zero,
    LayerNorms one/zero (the padding row of the token embedding zero).

    ``forward(ids [B, T], mask [B, T] (True = real token; default ids != pad_id),
    token_type_ids [B, T] (default 0))`` -> hidden states ``[B, T, D]``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.token_type_embedding = nn.Embedding(c.type_vocab_size, c.d_model) if c.type_vocab_size else None
        self.positional = LearnedPositionalEncoding(c.d_model, c.max_len)
        self.norm = nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder = TransformerEncoder(c.stack_spec(layer_norm_eps=c.layer_norm_eps))
        self.pooler = nn.Linear(c.d_model, c.d_model) if c.pooler else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """BERT's initialisation (see the class docstring)."""
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if self.config.pad_id is not None:
            with torch.no_grad():
                self.token_embedding.weight[self.config.pad_id].zero_()

    def default_mask(self, ids: Tensor) -> Tensor:
        """The mask used when none is given: True where ``ids != pad_id`` (everywhere without a pad id)."""
        pad_id = self.config.pad_id
        return ids != pad_id if pad_id is not None else torch.ones_like(ids, dtype=torch.bool)

    def _inputs(self, ids: Tensor, mask: Tensor | None, token_type_ids: Tensor | None) -> tuple[Tensor, Tensor]:
        """Embeddings ``[B, T, D]`` (LayerNorm and dropout applied) and the checked mask."""
        c = self.config
        if ids.dim() != 2:
            raise ValueError(f"expected token ids [batch, seq], got shape {tuple(ids.shape)}")
        check_ids(ids, c.vocab_size)
        if mask is None:
            mask = self.default_mask(ids)
        if mask.shape != ids.shape or mask.dtype != torch.bool:
            raise ValueError(
                f"mask must be bool [batch, seq] like ids {tuple(ids.shape)} (True = real token), "
                f"got {mask.dtype} {tuple(mask.shape)}"
            )
        h = self.token_embedding(ids)
        if self.token_type_embedding is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            elif token_type_ids.shape != ids.shape:
                raise ValueError(
                    f"token_type_ids must be [batch, seq] like ids {tuple(ids.shape)}, "
                    f"got {tuple(token_type_ids.shape)}"
                )
            check_ids(token_type_ids, c.type_vocab_size)
            h = h + self.token_type_embedding(token_type_ids)
        elif token_type_ids is not None:
            raise ValueError("this encoder has no token types (type_vocab_size=0): do not pass token_type_ids")
        return self.dropout(self.norm(self.positional(h))), mask

    def forward(self, ids: Tensor, mask: Tensor | None = None, token_type_ids: Tensor | None = None) -> Tensor:
        """Hidden states ``[B, T, D]`` (the token embeddings of the last layer)."""
        h, mask = self._inputs(ids, mask, token_type_ids)
        return self.encoder(h, key_padding_mask=mask)

    def forward_with_attention(
        self, ids: Tensor, mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """Hidden states ``[B, T, D]`` and, per layer, the attention weights ``[B, H, T, T]``."""
        h, mask = self._inputs(ids, mask, token_type_ids)
        return self.encoder.forward_with_attention(h, key_padding_mask=mask)

    @torch.no_grad()
    def get_attention_maps(
        self, ids: Tensor, mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> list[Tensor]:
        """Per layer, the attention weights ``[B, H, T, T]``."""
        return self.forward_with_attention(ids, mask, token_type_ids)[1]

    def sentence_embedding(
        self, ids: Tensor, mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Mean of the last hidden states over the real tokens -> ``[B, D]``."""
        mask = self.default_mask(ids) if mask is None else mask
        return mean_pool(self(ids, mask, token_type_ids), mask)

    def pooled_output(self, hidden: Tensor) -> Tensor:
        """BERT's pooler: ``tanh(Linear(hidden[:, 0]))`` -> ``[B, D]`` (needs ``pooler=True``)."""
        if self.pooler is None:
            raise ValueError("this encoder has no pooler (pooler=false); use mean pooling (sentence_embedding)")
        return torch.tanh(self.pooler(hidden[:, 0]))


class BertClassifierConfig(BertConfig):
    """A BERT encoder with a new classification head."""

    num_classes: int = Field(..., ge=2)
    pooling: Literal["mean", "cls"] = Field(
        "mean", description="mean over real tokens, or the first token ([CLS]; through the pooler when there is one)"
    )


@register_model("bert_classifier", BertClassifierConfig)
class BertClassifier(nn.Module):
    """``bert`` (:class:`BertEncoder`, e.g. loaded from pretrained weights) + dropout + ``head``
    (``nn.Linear(d_model, num_classes)``).

    ``forward(ids [B, T], mask [B, T] (True = real token))`` -> logits ``[B, num_classes]``.
    """

    def __init__(self, config: BertClassifierConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertEncoder(config)
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.d_model, config.num_classes)
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = self.bert.default_mask(ids) if mask is None else mask
        hidden = self.bert(ids, mask)
        if self.config.pooling == "mean":
            pooled = mean_pool(hidden, mask)
        else:
            pooled = self.bert.pooled_output(hidden) if self.bert.pooler is not None else hidden[:, 0]
        return self.head(self.dropout(pooled))

    @torch.no_grad()
    def get_attention_maps(self, ids: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Per layer, the attention weights ``[B, H, T, T]``."""
        return self.bert.get_attention_maps(ids, mask)
