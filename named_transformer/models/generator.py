r"""The generator: from the last layer to log-probabilities over the vocabulary.

$$\log p(\mathsf{vocab} \mid X^L)
  = \nfun{vocab}{log\,softmax}(E' \ndot{layer} X^L + b),$$

with $E' \in \mathbb R^{\mathsf{vocab} \times \mathsf{layer}}$. *Tied* embeddings (paper
A.1, Press & Wolf 2017) reuse the input embedding table, $E' = E$, saving
$|\mathsf{vocab}|\cdot|\mathsf{layer}|$ parameters. Log-probabilities (not
probabilities) are returned: they are what `torch.nn.functional.nll_loss` expects and do
not underflow.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.contraction import einsum
from named_transformer.recording import tap

__all__ = ["Generator", "log_probabilities"]


# --8<-- [start:log_probabilities]
@checked
def log_probabilities(
    inputs: Float[Tensor, "*batch seq layer"],
    table: Float[Tensor, "vocab layer"],
    bias: Float[Tensor, " vocab"] | None = None,
) -> Float[Tensor, "*batch seq vocab"]:
    r"""$\nfun{vocab}{log\,softmax}(E' \ndot{layer} X + b)$."""
    logits = einsum(inputs, table, "... seq layer, vocab layer -> ... seq vocab")
    if bias is not None:
        logits = logits + bias
    logits = tap("logits", logits, "*batch seq vocab")
    return torch.log_softmax(  # allow-raw: normalise along vocab, the last axis
        logits, dim=-1
    )


# --8<-- [end:log_probabilities]


# --8<-- [start:Generator]
class Generator(nn.Module):
    r"""Log-probabilities over the vocabulary; pass ``table`` (an embedding's $E$) to
    tie."""

    def __init__(
        self,
        layer: int,
        vocab: int,
        *,
        table: nn.Parameter | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if table is None:
            bound = 1 / math.sqrt(layer)
            table = nn.Parameter(torch.empty(vocab, layer).uniform_(-bound, bound))
        elif tuple(table.shape) != (vocab, layer):
            shape = tuple(table.shape)
            raise ValueError(f"tied table has shape {shape}, expected {(vocab, layer)}")
        # the same Parameter object when tied: counted and trained once
        self.table = table
        self.bias = nn.Parameter(torch.zeros(vocab)) if bias else None

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch seq layer"]
    ) -> Float[Tensor, "*batch seq vocab"]:
        return log_probabilities(inputs, self.table, self.bias)


# --8<-- [end:Generator]
