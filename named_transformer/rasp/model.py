r"""A compiled RASP program: the library's own modules, run by the usual forward pass.

The residual stream's $\mathsf{layer}$ axis is a named concatenation of the program's
variables, as in Tracr: a categorical s-op $x$ with values $v_1 \dots v_m$ owns the
directions ``x:v1 … x:vm`` (one-hot), a numerical one a single direction ``x``.
Embedding writes the input variables, every block adds its output (no layer norm):

$$X^0 = E \ndot{vocab} I + P, \qquad X^{b+1} = X^b + f_b(X^b),$$

with each $f_b$ a :class:`~named_transformer.models.multihead.MultiHeadAttention`
(one head per ``aggregate`` or ``selector_width``) or a
:class:`~named_transformer.models.sublayers.FeedForward` (the ``map`` and
``sequence_map`` of one step, side by side). Position 0 holds the BOS token: every
query may attend to it, the default when its selector selects nothing. Decoding reads
the output variable's directions of the last residual stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.masks import causal_mask
from named_transformer.models.embedding import add_positions, embed
from named_transformer.models.multihead import MultiHeadAttention, multihead
from named_transformer.models.parameters import CountsParameters
from named_transformer.recording import scope

__all__ = ["CompiledModel", "OutputVariable"]


# --8<-- [start:CompiledModel]
@dataclass(frozen=True)
class OutputVariable:
    """The variable a compiled model's output is read from: its ``name`` (the prefix
    of its directions' labels, ``"sort"`` of ``"sort:a"``) and its categories
    ``values`` in the order of those directions, or None for a numerical variable
    (one direction, the number itself)."""

    name: str
    values: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.values is not None:  # any sequence, kept as a tuple
            object.__setattr__(self, "values", tuple(self.values))


class CompiledModel(CountsParameters, nn.Module):
    r"""Token and position embeddings into the named residual stream, then
    ``blocks`` (attention or feed-forward), each added to the stream.

    Args:
        token_table: $E \in \mathbb R^{\mathsf{vocab} \times \mathsf{layer}}$, one row
            per entry of ``vocabulary`` (which includes ``bos``).
        position_table: $P \in \mathbb R^{\mathsf{seq} \times \mathsf{layer}}$, row 0
            for the BOS position: at most ``len(position_table) - 1`` tokens.
        blocks: the ``MultiHeadAttention`` and ``FeedForward`` modules, in order.
        labels: the name of every direction of $\mathsf{layer}$ (``"tokens:a"``).
        output: the :class:`OutputVariable` decoding reads (kept as ``output``, its
            name, and ``output_values``, its categories or None).
        heads: for every attention block, the s-op each head computes.

    :attr:`causal` (False unless set): every attention block attends under the
    causal mask (a query sees only the keys at or before it), as a model Tracr
    compiles with ``causal=True`` does; its selectors then select among earlier
    positions only.
    """

    causal = False

    def __init__(
        self,
        token_table: Float[Tensor, "vocab layer"],
        position_table: Float[Tensor, "seq layer"],
        blocks: Sequence[nn.Module],
        *,
        vocabulary: Sequence[Any],
        bos: Any,
        labels: Sequence[str],
        output: OutputVariable,
        heads: Sequence[Sequence[str]],
    ) -> None:
        super().__init__()
        self.token_table = nn.Parameter(token_table, requires_grad=False)
        self.position_table = nn.Parameter(position_table, requires_grad=False)
        self.blocks = nn.ModuleList(blocks)
        self.vocabulary, self.bos = list(vocabulary), bos
        self.labels, self.output = list(labels), output.name
        self.output_values = None if output.values is None else list(output.values)
        self.heads = [list(h) for h in heads]
        self.max_length = position_table.shape[0] - 1
        names = [label.split(":")[0] for label in self.labels]
        dims = [i for i, name in enumerate(names) if name == output.name]
        if not dims or dims != list(range(dims[0], dims[-1] + 1)):
            raise ValueError(f"output '{output.name}' has no contiguous directions")
        self.output_dims = slice(dims[0], dims[-1] + 1)

    @checked
    def forward(
        self, tokens: Int[Tensor, "*batch seq"]
    ) -> tuple[
        list[Float[Tensor, "*batch seq layer"]],
        list[Float[Tensor, "*batch heads seq_q seq"]],
    ]:
        """The residual stream before and after every block, and the attention
        weights of every attention block."""
        length = tokens.shape[-1]
        if length > self.position_table.shape[0]:
            raise ValueError(
                f"{length - 1} tokens after BOS, but the model was compiled for at "
                f"most max_length={self.max_length}"
            )
        stream = embed(tokens, self.token_table, scale=False)
        stream = add_positions(stream, self.position_table[:length])
        residuals, weights = [stream], []
        mask = causal_mask(length, device=tokens.device) if self.causal else None
        for i, block in enumerate(self.blocks):
            if isinstance(block, MultiHeadAttention):
                # the block's weights by the pipeline itself (its forward returns
                # only the output), its taps named as the block's own
                with scope(f"blocks.{i}"):
                    update, pattern = multihead(stream, stream, block.named_weights(),
                                                mask)  # fmt: skip
                weights.append(pattern)
            else:
                update = block(stream)
            stream = stream + update
            residuals.append(stream)
        return residuals, weights

    # --8<-- [end:CompiledModel]

    # --8<-- [start:run]
    def encode(self, inputs: Sequence[Sequence[Any]]) -> Int[Tensor, "batch seq"]:
        """Token ids of inputs of one length, BOS first."""
        lengths = {len(x) for x in inputs}
        if len(lengths) != 1:
            raise ValueError(f"encode: inputs of one length, got lengths {lengths}")
        if max(lengths) > self.max_length:
            raise ValueError(
                f"an input of {max(lengths)} tokens is longer than max_length="
                f"{self.max_length} the model was compiled for"
            )
        ids = {token: i for i, token in enumerate(self.vocabulary)}
        rows = []
        for x in inputs:
            for token in x:
                if token not in ids or token == self.bos:
                    known = [t for t in self.vocabulary if t != self.bos]
                    raise ValueError(
                        f"token {token!r} is not in the vocabulary {known}"
                    )
            rows.append([ids[self.bos]] + [ids[token] for token in x])
        device = self.token_table.device
        return torch.tensor(rows, dtype=torch.long, device=device)

    def decode(self, stream: Float[Tensor, "batch seq layer"]) -> list[list[Any]]:
        """The output variable at every position after BOS: the category whose
        direction holds 1 (None where it is all 0: the aggregate's default), or the
        number."""
        rows = stream[:, 1:, self.output_dims].tolist()
        if self.output_values is None:
            return [[round(v[0], 6) for v in row] for row in rows]
        return [[self._category(v, i) for i, v in enumerate(row)] for row in rows]

    def _category(self, vector: list[float], position: int) -> Any:
        best = max(range(len(vector)), key=vector.__getitem__)
        rest = sum(abs(v) for v in vector) - abs(vector[best])
        if vector[best] < 0.5 and rest < 0.5:
            return None  # nothing selected: the aggregate's default
        if abs(vector[best] - 1) > 0.1 or rest > 0.1:
            shown = [round(v, 2) for v in vector]
            raise ValueError(
                f"'{self.output}' at position {position} is {shown}, not one-hot: "
                "an aggregate averaged different categories"
            )
        return self.output_values[best]

    def run_batch(self, inputs: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """The decoded outputs of inputs of one length, in one forward pass."""
        residuals, _ = self(self.encode(inputs))
        return self.decode(residuals[-1])

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        """The decoded output of one input (a list of tokens)."""
        return self.run_batch([list(inputs)])[0]

    # --8<-- [end:run]

    def summary(self) -> str:
        """Blocks, width and parameters, in one line."""
        attention = sum(isinstance(b, MultiHeadAttention) for b in self.blocks)
        return (
            f"{len(self.blocks)} blocks ({attention} attention, "
            f"{len(self.blocks) - attention} feed-forward), layer={len(self.labels)}, "
            f"{self.num_parameters():,} parameters"
            + (", causal" if self.causal else "")
        )
