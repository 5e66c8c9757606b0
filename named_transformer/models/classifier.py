r"""The NYU notes' sentiment classifier, done right: encode, max-pool over positions,
classify.

$$\begin{aligned}
  H &= \text{Encoder}(\text{Embed}(x) + P), \qquad
  h = \nfun{seq}{max}\, H \;(\text{real tokens only}), \\
  \text{logits} &= W \ndot{layer} h + b, \quad
  W \in \mathbb R^{\mathsf{classes} \times \mathsf{layer}}.
\end{aligned}$$

The NYU notes' version has four slips: it builds ``Encoder()`` and ``nn.Linear``
*inside* ``forward`` (fresh random weights on every call, so nothing is ever trained or
saved), returns ``torch.max(x, dim=1)`` (a ``(values, indices)`` tuple, not a tensor),
and takes the maximum over padding positions too, so the answer depends on how much
padding a batch has. Here the layers are built once in ``__init__``, the reduction is a
named ``max`` over $\mathsf{seq}$ that skips padding, and the result is a tensor of
logits.
"""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange, reduce
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import TokenEmbedding, embed_positions
from named_transformer.models.encoder import Encoder
from named_transformer.models.parameters import CountsParameters
from named_transformer.recording import tap

__all__ = ["TransformerClassifier", "masked_max"]


# --8<-- [start:masked_max]
@checked
def masked_max(
    states: Float[Tensor, "*batch seq layer"],
    mask: Bool[Tensor, "*batch seq"] | None = None,
) -> Float[Tensor, "*batch layer"]:
    r"""$\nfun{seq}{max}\, H$ over the positions where ``mask`` is True (real tokens).

    Padding is filled with the dtype's most negative number first, so it never wins; a
    sequence with no real token gives that number.
    """
    if mask is not None:
        padding = ~rearrange(mask, "... seq -> ... seq 1")
        states = states.masked_fill(padding, torch.finfo(states.dtype).min)
    return reduce(states, "... seq layer -> ... layer", "max")


# --8<-- [end:masked_max]


# --8<-- [start:TransformerClassifier]
class TransformerClassifier(CountsParameters, nn.Module):
    r"""Embeddings, an encoder, max over $\mathsf{seq}$ ignoring padding, a linear
    layer.

    Built from a :class:`~named_transformer.models.config.TransformerConfig`
    (``config.encoder_layers`` layers, its positions and every attention option) or
    from the sizes by name; defaults are the NYU notes': one layer, 32 wide, 2 heads,
    hidden 128.
    """

    def __init__(
        self,
        vocab: int,
        classes: int,
        config: TransformerConfig | None = None,
        *,
        num_layers: int = 1,
        layer: int = 32,
        heads: int = 2,
        hidden: int = 128,
        **options: Any,
    ) -> None:
        super().__init__()
        if config is None:
            config = TransformerConfig(
                encoder_layers=num_layers, layer=layer, heads=heads, hidden=hidden,
                **options,
            )  # fmt: skip
        elif options:
            raise TypeError(
                "a TransformerClassifier built from a TransformerConfig takes no "
                f"other options, got {', '.join(sorted(options))}"
            )
        if config.window is not None:
            raise ValueError(
                f"window={config.window} limits causal self-attention; a classifier "
                "reads the whole review both ways"
            )
        self.config = c = config
        self.embedding = TokenEmbedding(vocab, c.layer)
        self.positions = embed_positions(c.positions, c.layer, c.dropout)
        self.encoder = Encoder.of(c, c.encoder_layers)
        bound = c.layer**-0.5
        self.w_out = nn.Parameter(
            torch.empty(classes, c.layer).uniform_(-bound, bound)
        )
        self.b_out = nn.Parameter(torch.zeros(classes))

    @checked
    def forward(
        self,
        tokens: Int[Tensor, "*batch seq"],
        mask: Bool[Tensor, "*batch seq"] | None = None,
    ) -> Float[Tensor, "*batch classes"]:
        """Class logits. ``mask`` is True at real tokens, False at padding."""
        attend_mask = None if mask is None else rearrange(mask, "... seq -> ... 1 seq")
        embedded = self.positions(self.embedding(tokens))
        states = self.encoder(embedded, attend_mask)
        pooled = tap("pooled", masked_max(states, mask), "*batch layer")
        logits = (
            einsum(pooled, self.w_out, "... layer, classes layer -> ... classes")
            + self.b_out
        )
        return tap("logits", logits, "*batch classes")


# --8<-- [end:TransformerClassifier]
