r"""The encoder–decoder Transformer (paper A.1): embeddings, two stacks, a generator.

$$\begin{aligned}
  H &= \text{Encoder}(\text{Embed}(x) + P), \\
  \log p(y_{j} \mid y_{<j}, x)
  &= \text{Generator}(\text{Decoder}(\text{Embed}(y) + P, H))_j.
\end{aligned}$$

:class:`TransformerStacks` is the two stacks alone, on already embedded sequences: the
counterpart of PyTorch's ``nn.Transformer`` (which has no embeddings and always ends
each stack with a LayerNorm). :class:`Transformer` adds token embeddings scaled by
$\sqrt{|\mathsf{layer}|}$, sinusoidal positions, and a generator whose table is tied to
the target embedding.
"""

from __future__ import annotations

from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask, sliding_window_mask
from named_transformer.models.config import TransformerConfig
from named_transformer.models.decoder import Decoder
from named_transformer.models.embedding import TokenEmbedding, embed_positions
from named_transformer.models.encoder import Encoder
from named_transformer.models.generator import Generator
from named_transformer.models.parameters import CountsParameters

__all__ = ["Transformer", "TransformerStacks"]


# --8<-- [start:TransformerStacks]
class TransformerStacks(CountsParameters, nn.Module):
    r"""An encoder stack and a decoder stack; the decoder cross-attends the encoder
    output."""

    def __init__(self, encoder: Encoder, decoder: Decoder) -> None:
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    @classmethod
    def build(cls, config: TransformerConfig | None = None) -> TransformerStacks:
        """Fresh stacks of the given configuration (default: the paper's base model)."""
        c = TransformerConfig.base() if config is None else config
        return cls(Encoder.of(c, c.encoder_layers), Decoder.of(c, c.decoder_layers))

    @checked
    def forward(
        self,
        source: Float[Tensor, "*batch seq layer"],
        target: Float[Tensor, "*batch seq_q layer"],
        source_mask: Bool[Tensor, "*#batch #seq #seq"] | None = None,
        target_mask: Bool[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        memory_mask: Bool[Tensor, "*#batch #seq_q #seq"] | None = None,
    ) -> Float[Tensor, "*batch seq_q layer"]:
        """Masks are True where attention is allowed; ``target_mask`` is usually
        causal."""
        memory = self.encoder(source, source_mask)
        return self.decoder(target, memory, target_mask, memory_mask)


# --8<-- [end:TransformerStacks]


# --8<-- [start:Transformer]
class Transformer(CountsParameters, nn.Module):
    r"""Tokens in, log-probabilities over the target vocabulary out.

    ``config`` defaults to the paper's base model. The generator reuses the target
    embedding table (``tie_output=True``, paper A.1).
    """

    def __init__(
        self,
        source_vocab: int,
        target_vocab: int,
        config: TransformerConfig | None = None,
        *,
        tie_output: bool = True,
    ) -> None:
        super().__init__()
        self.config = c = TransformerConfig.base() if config is None else config
        self.source_embedding = TokenEmbedding(source_vocab, c.layer)
        self.target_embedding = TokenEmbedding(target_vocab, c.layer)
        self.positions = embed_positions(c.positions, c.layer, c.dropout)
        self.stacks = TransformerStacks.build(c)
        table = self.target_embedding.table if tie_output else None
        self.generator = Generator(
            c.layer, target_vocab, table=table, bias=not tie_output
        )

    @checked
    def encode(
        self,
        source: Int[Tensor, "*batch seq"],
        source_mask: Bool[Tensor, "*#batch 1 seq"] | None = None,
    ) -> Float[Tensor, "*batch seq layer"]:
        """The memory $H$. ``source_mask`` marks real (non-padding) source tokens."""
        embedded = self.positions(self.source_embedding(source))
        return self.stacks.encoder(embedded, source_mask)

    # --8<-- [end:Transformer]

    # --8<-- [start:decode]
    @checked
    def decode(
        self,
        target: Int[Tensor, "*batch seq_q"],
        memory: Float[Tensor, "*batch seq layer"],
        source_mask: Bool[Tensor, "*#batch 1 seq"] | None = None,
        target_mask: Bool[Tensor, "*#batch #seq_q #seq_q"] | None = None,
        *,
        offset: int = 0,
    ) -> Float[Tensor, "*batch seq_q vocab"]:
        """Log-probabilities of the next target token at every target position.

        ``target_mask`` defaults to the causal mask (the sliding window of
        ``config.window`` positions when it is set). ``offset`` is the position of the
        first target token (for decoding with a cache of earlier steps).
        """
        if target_mask is None and self.config.window is not None:
            target_mask = sliding_window_mask(
                target.shape[-1], window=self.config.window, device=target.device
            )
        if target_mask is None:
            target_mask = causal_mask(target.shape[-1], device=target.device)
        embedded = self.positions(self.target_embedding(target), offset)
        return self.generator(
            self.stacks.decoder(embedded, memory, target_mask, source_mask)
        )

    # --8<-- [end:decode]

    # --8<-- [start:forward]
    @checked
    def forward(
        self,
        source: Int[Tensor, "*batch seq"],
        target: Int[Tensor, "*batch seq_q"],
        source_mask: Bool[Tensor, "*#batch 1 seq"] | None = None,
        target_mask: Bool[Tensor, "*#batch #seq_q #seq_q"] | None = None,
    ) -> Float[Tensor, "*batch seq_q vocab"]:
        """Teacher forcing: log-probabilities for every target position at once.

        The per-layer, per-head weights are recorded
        (:func:`~named_transformer.recording.record`), under
        ``stacks.encoder.layers.{}.self_attention.weights`` and the decoder's
        ``self_attention`` and ``cross_attention``.
        """
        memory = self.encode(source, source_mask)
        return self.decode(target, memory, source_mask, target_mask)

    # --8<-- [end:forward]
