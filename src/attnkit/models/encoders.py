"""Encoder-only models: a per-element predictor and a sequence classifier."""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor, nn

from attnkit.models.checks import check_ids
from attnkit.models.config import EncoderConfig, OneOf
from attnkit.models.registry import register_model
from attnkit.nn import POSITIONS, TransformerEncoder, embedding_positions
from attnkit.nn.hooks import HookPoint, embed_positions

__all__ = [
    "ClassifierArchitecture",
    "ClassifierConfig",
    "PredictorArchitecture",
    "PredictorConfig",
    "SequenceClassifier",
    "TransformerPredictor",
]


class PredictorArchitecture(EncoderConfig):
    """The user-set fields of a :class:`TransformerPredictor` (the stack fields as :class:`EncoderConfig`)."""

    positional: Annotated[str, OneOf(POSITIONS)] = Field(
        "sinusoidal", description="positional encoding (none: permutation-equivariant)"
    )
    max_len: int = Field(5000, gt=0, description="longest sequence (learned encodings only)")
    input_dropout: float = Field(0.0, ge=0.0, lt=1.0)


class PredictorConfig(PredictorArchitecture):
    """One prediction per element: the tutorial's ``TransformerPredictor``; the architecture and the
    data-derived input and output sizes."""

    input_dim: int | None = Field(None, gt=0, description="feature size of each element (feature inputs)")
    vocab_size: int | None = Field(None, gt=0, description="token inputs: ids in [0, vocab_size)")
    num_outputs: int = Field(..., gt=0, description="outputs per element (classes, or 1 for a score)")

    @model_validator(mode="after")
    def _one_input_kind(self) -> PredictorConfig:
        if (self.input_dim is None) == (self.vocab_size is None):
            raise ValueError("set exactly one of input_dim (feature vectors) and vocab_size (token ids)")
        return self


@register_model("predictor", PredictorConfig)
class TransformerPredictor(nn.Module):
    """Input network, optional positional encoding, encoder stack, output network.

    ``forward(x)``: ``x [B, T, input_dim]`` (or ids ``[B, T]`` with ``vocab_size``) ->
    ``[B, T, num_outputs]``. Without positional encoding the model is permutation-equivariant
    (the set-anomaly task relies on it).
    """

    def __init__(self, config: PredictorConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        if config.vocab_size is not None:
            embedding = nn.Embedding(config.vocab_size, d)
            nn.init.normal_(embedding.weight, std=d**-0.5)
            self.input_net: nn.Module = embedding
        else:
            assert config.input_dim is not None
            self.input_net = nn.Sequential(nn.Dropout(config.input_dropout), nn.Linear(config.input_dim, d))
        spec = config.stack_spec(positional=config.positional, max_len=config.max_len)
        self.positional = embedding_positions(spec)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()  # the input network's output, the positions
        self.encoder = TransformerEncoder(spec)
        self.output_net = nn.Sequential(
            nn.Linear(d, d),
            nn.LayerNorm(d),
            nn.ReLU(inplace=True),
            nn.Dropout(config.dropout),
            nn.Linear(d, config.num_outputs),
        )

    def embed(self, x: Tensor) -> Tensor:
        """Input network + positional encoding: ``[B, T, d_model]``."""
        cfg = self.config
        if cfg.vocab_size is not None:
            if x.dim() != 2:
                raise ValueError(f"expected token ids [batch, seq], got shape {tuple(x.shape)}")
            check_ids(x, cfg.vocab_size)
        elif x.dim() != 3 or x.shape[-1] != cfg.input_dim:
            raise ValueError(f"expected features [batch, seq, {cfg.input_dim}], got shape {tuple(x.shape)}")
        h = self.hook_embed(self.input_net(x))
        return embed_positions(h, self.positional.add, self.hook_pos_embed) if self.positional is not None else h

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``key_padding_mask [B, T]``: True at real elements."""
        h = self.encoder(self.embed(x), key_padding_mask=key_padding_mask)
        # A new tensor, not the [B*T, C] -> [B, T, C] view nn.Linear returns for 3-D inputs: FSDP2 hooks
        # the root module's output for backward, and an in-place op on a view would bypass that hook
        # (it warns). The copy is B x T x num_outputs, small beside the head's own matmul.
        return self.output_net(h).clone()

    @torch.no_grad()
    def get_attention_maps(self, x: Tensor, key_padding_mask: Tensor | None = None) -> list[Tensor]:
        """Per layer, the attention weights ``[B, H, T, T]``."""
        return self.encoder.get_attention_maps(self.embed(x), key_padding_mask=key_padding_mask)


class ClassifierArchitecture(EncoderConfig):
    """The user-set fields of a :class:`SequenceClassifier` (the stack fields as :class:`EncoderConfig`)."""

    positional: Annotated[str, OneOf(POSITIONS, exclude=("none",))] = "learned"
    pooling: Literal["mean", "cls"] = "mean"


class ClassifierConfig(ClassifierArchitecture):
    """Sequence classification from token ids: the architecture and what the data sets (the vocabulary, the
    classes, the longest input, the pad id)."""

    vocab_size: int = Field(..., gt=0)
    num_classes: int = Field(..., ge=2)
    max_len: int = Field(512, gt=0, description="longest input in tokens")
    pad_id: int = Field(0, ge=0)


@register_model("classifier", ClassifierConfig)
class SequenceClassifier(nn.Module):
    """Token embedding + positional encoding + encoder + pooling + classification head.

    ``forward(ids [B, T], mask [B, T] (True = real token))`` -> logits ``[B, num_classes]``.
    Mean pooling averages real tokens only; ``"cls"`` pooling prepends a learned [CLS] vector and
    classifies its output.
    """

    def __init__(self, config: ClassifierConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, d, padding_idx=config.pad_id)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)
        with torch.no_grad():
            self.embedding.weight[config.pad_id].zero_()
        extra = 1 if config.pooling == "cls" else 0
        spec = config.stack_spec(positional=config.positional, max_len=config.max_len + extra)
        self.positional = embedding_positions(spec)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * d**-0.5) if config.pooling == "cls" else None
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()  # token embeddings ([CLS] first), positions
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = TransformerEncoder(spec)
        self.head = nn.Linear(d, config.num_classes)

    def _encode(self, ids: Tensor, mask: Tensor | None, need_weights: bool) -> tuple[Tensor, Tensor, list[Tensor]]:
        if ids.dim() != 2:
            raise ValueError(f"expected token ids [batch, seq], got shape {tuple(ids.shape)}")
        if ids.shape[1] > self.config.max_len:
            raise ValueError(
                f"input has {ids.shape[1]} tokens but the model supports at most max_len={self.config.max_len}; "
                "truncate the input (the data module's max_len does this)"
            )
        check_ids(ids, self.config.vocab_size)
        mask = ids != self.config.pad_id if mask is None else mask
        if mask.shape != ids.shape or mask.dtype != torch.bool:
            raise ValueError(
                f"mask must be bool [batch, seq] like ids {tuple(ids.shape)}, got {mask.dtype} {tuple(mask.shape)}"
            )
        h = self.embedding(ids)
        if self.cls is not None:
            h = torch.cat([self.cls.expand(h.shape[0], -1, -1), h], dim=1)
            mask = torch.cat([mask.new_ones(mask.shape[0], 1), mask], dim=1)
        h = self.hook_embed(h)
        if self.positional is not None:
            h = embed_positions(h, self.positional.add, self.hook_pos_embed)
        h = self.dropout(h)
        if need_weights:
            h, maps = self.encoder.forward_with_attention(h, key_padding_mask=mask)
        else:
            h, maps = self.encoder(h, key_padding_mask=mask), []
        return h, mask, maps

    def _pool(self, h: Tensor, mask: Tensor) -> Tensor:
        if self.cls is not None:
            return h[:, 0]
        weights = mask.unsqueeze(-1).to(h.dtype)
        return (h * weights).sum(1) / weights.sum(1).clamp_min(1.0)

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        h, mask, _ = self._encode(ids, mask, need_weights=False)
        return self.head(self._pool(h, mask))

    @torch.no_grad()
    def get_attention_maps(self, ids: Tensor, mask: Tensor | None = None) -> list[Tensor]:
        """Per layer, ``[B, H, T, T]`` (``T`` includes the [CLS] position with cls pooling)."""
        return self._encode(ids, mask, need_weights=True)[2]
