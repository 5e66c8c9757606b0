r"""Token embeddings and positional encodings: what goes into the first layer.

A token $t$ is a one-hot vector $I \in \{0,1\}^{\mathsf{vocab}}$; its embedding is a
row of $E \in \mathbb R^{\mathsf{vocab} \times \mathsf{layer}}$, scaled by
$\sqrt{|\mathsf{layer}|}$ (paper A.1):

$$W = (E \ndot{vocab} I)\sqrt{|\mathsf{layer}|}, \qquad X^0 = W + P.$$

BERT and GPT-2 do not scale (``scale=False``): $W = E \ndot{vocab} I$.

Contracting with a one-hot vector is indexing, so the code looks the row up
(``table[tokens]``) instead of building $I$. The output layer may reuse $E$ (*tied*
embeddings): $\nfun{vocab}{softmax}(E \ndot{layer} X^L)$, see
:mod:`named_transformer.models.generator`.

$P$ is the fixed sinusoidal table
(:func:`named_transformer.core.positions.sinusoidal_positions`) or a learned table with
one row per position (BERT, GPT-2), which cannot go beyond the longest position it was
built for. Dropout follows the sum, as in the paper.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked, shape_checks_enabled
from named_transformer.core.dropout import dropout as drop
from named_transformer.core.positions import sinusoidal_positions
from named_transformer.models.variants import PositionScheme, register_scheme
from named_transformer.recording import tap

__all__ = [
    "Learned",
    "LearnedPositions",
    "NoPositions",
    "Sinusoidal",
    "SinusoidalPositions",
    "TokenEmbedding",
    "add_positions",
    "embed",
    "embed_positions",
]


# --8<-- [start:embed]
@checked
def embed(
    tokens: Int[Tensor, "*batch seq"],
    table: Float[Tensor, "vocab layer"],
    scale: bool = True,
    padding: int | None = None,
) -> Float[Tensor, "*batch seq layer"]:
    r"""$(E \ndot{vocab} I)\sqrt{|\mathsf{layer}|}$, computed as a row lookup
    (without the factor when ``scale=False``).

    ``padding``: the id whose row receives no gradient (BERT's ``padding_idx``: the
    padding token is masked everywhere, so its row should not learn). The values are
    the same.

    With shape checks on, a token id outside ``0 … |vocab| - 1`` raises ``ValueError``
    naming it (a one-hot vector $I$ has no row for it).
    """
    # A compiled or exported graph cannot read token values while it is traced.
    looks = not torch.compiler.is_compiling()
    if shape_checks_enabled() and looks and tokens.numel():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= table.shape[0]:
            bad = low if low < 0 else high
            raise ValueError(
                f"token id {bad} in argument 'tokens' is outside the vocabulary of "
                f"{table.shape[0]} tokens (ids 0 to {table.shape[0] - 1})"
            )
    if padding is None:
        rows = table[tokens]
    else:  # the same lookup, with the padding row's gradient left out
        rows = F.embedding(tokens, table, padding_idx=padding)
    rows = rows * math.sqrt(table.shape[-1]) if scale else rows
    return tap("embedded", rows, "*batch seq layer")


# --8<-- [end:embed]


# --8<-- [start:TokenEmbedding]
class TokenEmbedding(nn.Module):
    r"""$E \in \mathbb R^{\mathsf{vocab} \times \mathsf{layer}}$, its rows scaled by
    $\sqrt{|\mathsf{layer}|}$ (not with ``scale=False``: BERT, GPT-2).

    Initialised $\mathcal N(0, 1/|\mathsf{layer}|)$: after scaling, unit variance.
    """

    def __init__(
        self, vocab: int, layer: int, *, scale: bool = True, padding: int | None = None
    ) -> None:
        super().__init__()
        if padding is not None and not 0 <= padding < vocab:
            raise ValueError(f"padding id {padding} is outside 0 … {vocab - 1}")
        self.scale, self.padding = scale, padding
        self.table = nn.Parameter(torch.randn(vocab, layer) / math.sqrt(layer))

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"]
    ) -> Float[Tensor, "*batch seq layer"]:
        return embed(tokens, self.table, self.scale, self.padding)


# --8<-- [end:TokenEmbedding]


# --8<-- [start:add_positions]
@checked
def add_positions(
    inputs: Float[Tensor, "*batch seq layer"],
    positions: Float[Tensor, "seq layer"],
    dropout: float = 0.0,
    training: bool = False,
) -> Float[Tensor, "*batch seq layer"]:
    r"""$X^0 = \text{Dropout}(W + P)$: the same table for every example of the batch."""
    positions = tap("table", positions, "seq layer")
    return drop(inputs + positions, dropout, training)


# --8<-- [end:add_positions]


# --8<-- [start:SinusoidalPositions]
class SinusoidalPositions(nn.Module):
    r"""$X^0 = W + P$ with the fixed sinusoidal $P$, then dropout. No parameters.

    The table is computed in the inputs' dtype and on their device, for positions
    ``offset`` … ``offset + |seq| - 1`` (``offset`` = cache length when decoding step
    by step). It is kept once computed (per dtype and device, growing when a longer one
    is asked for): a decoder asks for one new position per step, and computing a row
    costs forty times more than reading it.
    """

    def __init__(self, layer: int, *, dropout: float = 0.1) -> None:
        super().__init__()
        self.layer, self.dropout = layer, dropout
        self._tables: dict[tuple[int, torch.dtype, torch.device], Tensor] = {}

    def _table(self, length: int, like: Tensor) -> Tensor:
        """Rows 0 … ``length - 1`` (at least) of the table in ``like``'s dtype and
        device."""
        key = (like.shape[-1], like.dtype, like.device)
        table = self._tables.get(key)
        if table is None or table.shape[0] < length:
            rows = max(length, 64 if table is None else 2 * table.shape[0])
            table = sinusoidal_positions(
                rows, like.shape[-1], dtype=like.dtype, device=like.device
            )
            self._tables[key] = table
        return table

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch seq layer"], offset: int = 0
    ) -> Float[Tensor, "*batch seq layer"]:
        seq, layer = inputs.shape[-2], inputs.shape[-1]
        # no Python state in a compiled graph: compute it
        if torch.compiler.is_compiling():
            positions = sinusoidal_positions(
                seq, layer, offset=offset, dtype=inputs.dtype, device=inputs.device
            )
        else:
            positions = self._table(offset + seq, inputs)[offset : offset + seq]
        return add_positions(inputs, positions, self.dropout, self.training)


# --8<-- [end:SinusoidalPositions]


# --8<-- [start:LearnedPositions]
class LearnedPositions(nn.Module):
    r"""$X^0 = W + P$ with a learned $P$ (one row per position, ``max_positions``
    rows), dropout."""

    def __init__(self, max_positions: int, layer: int, *, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = dropout
        # GPT-2's scale
        self.table = nn.Parameter(torch.randn(max_positions, layer) * 0.02)

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch seq layer"], offset: int = 0
    ) -> Float[Tensor, "*batch seq layer"]:
        seq = inputs.shape[-2]
        if offset + seq > self.table.shape[0]:
            raise ValueError(
                f"positions up to {offset + seq - 1} requested, but the learned "
                f"table has {self.table.shape[0]} rows (max_positions)"
            )
        return add_positions(
            inputs, self.table[offset : offset + seq], self.dropout, self.training
        )


# --8<-- [end:LearnedPositions]


# --8<-- [start:NoPositions]
class NoPositions(nn.Module):
    """Dropout only: with relative, rotary or ALiBi positions (a scheme of the
    attention) nothing is added to the embeddings."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        self.dropout = dropout

    @checked
    def forward(
        self, inputs: Float[Tensor, "*batch seq layer"], offset: int = 0
    ) -> Float[Tensor, "*batch seq layer"]:
        del offset
        return drop(inputs, self.dropout, self.training)


# --8<-- [end:NoPositions]


# --8<-- [start:embedding_schemes]
@register_scheme
@dataclass(frozen=True)
class Sinusoidal(PositionScheme):
    """The paper's positions: the fixed sinusoidal table added to the embeddings."""

    kind: ClassVar[str] = "sinusoidal"

    def embedding(self, layer: int, dropout: float) -> SinusoidalPositions:
        return SinusoidalPositions(layer, dropout=dropout)


@register_scheme
@dataclass(frozen=True)
class Learned(PositionScheme):
    """GPT-2's and BERT's positions: a learned table of ``max_positions`` rows added
    to the embeddings (no position beyond it)."""

    max_positions: int = 1024
    kind: ClassVar[str] = "learned"

    def __post_init__(self) -> None:
        if self.max_positions < 1:
            raise ValueError(
                f"max_positions must be positive, got {self.max_positions}"
            )

    def embedding(self, layer: int, dropout: float) -> LearnedPositions:
        return LearnedPositions(self.max_positions, layer, dropout=dropout)


def embed_positions(scheme: PositionScheme, layer: int, dropout: float) -> nn.Module:
    """What a model adds to its embeddings under ``scheme``: the scheme's module, or
    dropout alone (:class:`NoPositions`) when its positions live in the attention."""
    module = scheme.embedding(layer, dropout)
    return NoPositions(dropout) if module is None else module


# --8<-- [end:embedding_schemes]
