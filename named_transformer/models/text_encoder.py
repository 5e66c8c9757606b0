r"""A bidirectional text encoder (BERT; Devlin et al. 2019): the paper's encoder stack
with BERT's embeddings, and optionally its pooler and masked-language-model head.

$$\begin{aligned}
  X^0 &= \text{Dropout}\left(\text{LayerNorm}\left(
    E \ndot{vocab} I_{\text{tokens}} + T \ndot{types} I_{\text{types}} + P
  \right)\right), \\
  X^{l} &= \text{EncoderLayer}(X^{l-1}, M_{\text{padding}}),
  \qquad l = 1, \dots, N.
\end{aligned}$$

Three things differ from the paper's embeddings: the token embedding is not scaled by
$\sqrt{|\mathsf{layer}|}$, the positions $P$ are learned (one row per position), and a
*token-type* table $T \in \mathbb R^{\mathsf{types} \times \mathsf{layer}}$ marks which
of two segments a token belongs to; the sum is normalised before the first layer. The
layers are the paper's post-norm encoder layers with GELU and BERT's
$\epsilon = 10^{-12}$. Every query attends every real token: the mask hides padding
only.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.core.dropout import dropout as drop
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import Learned, TokenEmbedding, embed_positions
from named_transformer.models.encoder import Encoder
from named_transformer.models.generator import Generator
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.sublayers import ACTIVATIONS, LayerNorm

__all__ = ["MaskedLanguageHead", "Pooler", "TextEncoder", "dense"]


# --8<-- [start:dense]
@checked
def dense(
    inputs: Float[Tensor, "*batch layer"],
    weight: Float[Tensor, "layer_out layer"],
    bias: Float[Tensor, " layer_out"],
) -> Float[Tensor, "*batch layer_out"]:
    r"""$W \ndot{layer} X + b$, a position-wise affine map to a new
    $\mathsf{layer'}$ axis."""
    return einsum(inputs, weight, "... layer, layer_out layer -> ... layer_out") + bias


class _Dense(nn.Module):
    r"""$W \in \mathbb R^{\mathsf{layer'} \times \mathsf{layer}}$ and $b$, as
    ``nn.Linear`` initialises them."""

    def __init__(self, layer: int) -> None:
        super().__init__()
        bound = layer**-0.5
        self.weight = nn.Parameter(torch.empty(layer, layer).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(layer).uniform_(-bound, bound))


# --8<-- [end:dense]


# --8<-- [start:Pooler]
class Pooler(_Dense):
    r"""BERT's sentence vector: $\tanh(W^P \ndot{layer} X^N_0 + b^P)$, read from the
    first position (the ``[CLS]`` token)."""

    @checked
    def forward(
        self, hidden: Float[Tensor, "*batch seq layer"]
    ) -> Float[Tensor, "*batch layer"]:
        return torch.tanh(dense(hidden[..., 0, :], self.weight, self.bias))


# --8<-- [end:Pooler]


# --8<-- [start:MaskedLanguageHead]
class MaskedLanguageHead(_Dense):
    r"""Log-probabilities of the hidden token at every position (BERT's pre-training
    head):

    $$\nfun{vocab}{log\,softmax}\left(E \ndot{layer}
      \text{LayerNorm}\left(\operatorname{gelu}(W \ndot{layer} X + b)\right)
      + b^{\mathsf{vocab}}\right),$$

    the output table tied to the input embedding $E$.
    """

    def __init__(
        self,
        layer: int,
        table: nn.Parameter,
        *,
        activation: str = "gelu",
        eps: float = 1e-12,
    ) -> None:
        super().__init__(layer)
        self.activation = activation
        self.norm = LayerNorm(layer, eps)
        self.generator = Generator(layer, table.shape[0], table=table, bias=True)

    @checked
    def forward(
        self, hidden: Float[Tensor, "*batch seq layer"]
    ) -> Float[Tensor, "*batch seq vocab"]:
        transformed = ACTIVATIONS[self.activation](
            dense(hidden, self.weight, self.bias)
        )
        return self.generator(self.norm(transformed))


# --8<-- [end:MaskedLanguageHead]


def check_bert(config: TransformerConfig) -> None:
    """A configuration BERT cannot take, refused in one line: positions other than a
    learned table (the default sinusoidal ones become one), or a window, which limits
    causal self-attention where BERT attends both ways."""
    if config.positions.kind not in ("sinusoidal", "learned"):
        raise ValueError(
            f"TextEncoder is BERT, whose positions are a learned table: "
            f"{config.positions.kind} positions are not built here"
        )
    if config.window is not None:
        raise ValueError(
            f"window={config.window} limits causal self-attention; BERT attends "
            "both ways"
        )


# --8<-- [start:TextEncoder]
class TextEncoder(CountsParameters, nn.Module):
    r"""BERT: token, token-type and learned position embeddings, normalised; then
    ``config.encoder_layers`` encoder layers.

    Args:
        vocab: the vocabulary size $|\mathsf{vocab}|$.
        config: sizes and choices of the layers; default BERT-base's (12 layers, 768
            wide, 12 heads, hidden 3072, GELU, post-norm, $\epsilon = 10^{-12}$).
        max_positions: rows of the learned position table (BERT: 512), unless
            ``config.positions`` is a ``Learned`` table of its own; BERT's positions
            are learned: a configuration naming any other scheme is refused.
        types: rows of the token-type table (BERT: 2 segments; 0 for none).
        padding: the padding token's id, whose row gets no gradient (BERT: 0).
        pooler: add :class:`Pooler` (``model.pool``).
        head: add :class:`MaskedLanguageHead` (``model.predict``).
    """

    def __init__(
        self,
        vocab: int,
        config: TransformerConfig | None = None,
        *,
        max_positions: int = 512,
        types: int = 2,
        padding: int | None = 0,
        pooler: bool = False,
        head: bool = False,
    ) -> None:
        super().__init__()
        if config is None:
            config = TransformerConfig(
                encoder_layers=12, layer=768, heads=12, hidden=3072,
                activation="gelu", eps=1e-12,
            )  # fmt: skip
        check_bert(config)
        if config.positions.kind == "sinusoidal":  # the configuration's default
            config = replace(config, positions=Learned(max_positions))
        self.config = c = config
        self.embedding = TokenEmbedding(vocab, c.layer, scale=False, padding=padding)
        self.types = TokenEmbedding(types, c.layer, scale=False) if types else None
        # dropout follows the norm below, not the sum
        self.positions = embed_positions(c.positions, c.layer, 0.0)
        self.embedding_norm = LayerNorm(c.layer, c.eps)
        self.blocks = Encoder.of(c, c.encoder_layers)
        self.pooler = Pooler(c.layer) if pooler else None
        self.head = None
        if head:
            self.head = MaskedLanguageHead(
                c.layer, self.embedding.table, activation=c.activation, eps=c.eps
            )

    # --8<-- [end:TextEncoder]

    # --8<-- [start:forward]
    @checked
    def embed(
        self,
        tokens: Int[Tensor, "*batch seq"],
        types: Int[Tensor, "*batch seq"] | None = None,
    ) -> Float[Tensor, "*batch seq layer"]:
        r"""$X^0$: the three embeddings summed, normalised, dropped out (types
        default to 0, the first segment)."""
        summed = self.embedding(tokens)
        if self.types is not None:
            if types is None:
                types = torch.zeros_like(tokens)
            summed = summed + self.types(types)
        summed = self.positions(summed)
        return drop(self.embedding_norm(summed), self.config.dropout, self.training)

    @checked
    def forward(
        self,
        tokens: Int[Tensor, "*batch seq"],
        mask: Bool[Tensor, "*batch seq"] | None = None,
        types: Int[Tensor, "*batch seq"] | None = None,
    ) -> Float[Tensor, "*batch seq layer"]:
        """The last layer's states $X^N$. ``mask``: True on real tokens, False on
        padding."""
        keys = None if mask is None else rearrange(mask, "... seq -> ... 1 seq")
        return self.blocks(self.embed(tokens, types), keys)

    # --8<-- [end:forward]

    def pool(self, hidden: Tensor) -> Tensor:
        """The :class:`Pooler`'s sentence vector (built with ``pooler=True``)."""
        if self.pooler is None:
            raise ValueError("this TextEncoder was built without a pooler")
        return self.pooler(hidden)

    def predict(self, hidden: Tensor) -> Tensor:
        """The :class:`MaskedLanguageHead`'s log-probabilities (``head=True``)."""
        if self.head is None:
            raise ValueError("this TextEncoder was built without a head")
        return self.head(hidden)
