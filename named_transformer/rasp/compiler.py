r"""Compile a RASP program into the library's own modules, with hand-set weights.

Each s-op gets its directions in the residual stream
(:class:`~named_transformer.rasp.model.CompiledModel`) and the step it is computed at:
an attention step for ``aggregate`` and ``selector_width``, a feed-forward step for
``map`` and ``sequence_map``, as early as its inputs allow (operations of one step run
side by side: heads of one attention, hidden units of one feed-forward).

A ``select(keys, queries, predicate)`` becomes a head whose scores are the selector,
with the BOS key as a default at half the score of a match:

$$S = \beta \big( (W^Q \ndot{layer} X_{\mathsf{seq}\to\mathsf{seq'}})
  \ndot{key} (W^K \ndot{layer} X) \big), \qquad
  (W^Q \ndot{layer} X)_{\mathsf{seq'}(j),\,\mathsf{key}(v)}
  = \text{predicate}(v, x_j),$$

where $W^K$ gives the key at position $i$ the one-hot $\mathsf{key}$ vector of its
value $v = k_i$. The query at position $j$ then scores that key
$S_{\mathsf{seq'}(j),\,\mathsf{seq}(i)} = \beta\, \text{predicate}(k_i, x_j)$, so
$\nfun{seq}{softmax}(S) \approx \hat S$, the row-normalised selector, with an
inverse temperature $\beta$ (Tracr's *softmax coldness*, 100) folded into $W^Q$
(times $\sqrt{|\mathsf{key}|}$, which the library's attention divides by). ``aggregate``
is then $W^O \ndot{val} (\hat S \ndot{seq} W^V \ndot{layer} X)$, copying the values'
directions to the output's. ``selector_width`` attends to BOS as much as to every
selected key, reads the BOS direction, $1/(w+1)$, and a feed-forward step turns that
into $w$. A ``map`` is a table lookup: one ReLU per input value (per pair of values for
``sequence_map``); a map of a numerical s-op cuts its value set at midpoints with pairs
of ReLUs, $\operatorname{relu}(L(x-t)+\tfrac12) - \operatorname{relu}(L(x-t)-\tfrac12)$.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from named_transformer.rasp.model import CompiledModel, OutputVariable
from named_transformer.rasp.operations import (
    Head,
    Unit,
    aggregate_head,
    map_units,
    selector_width_parts,
    sequence_map_units,
)
from named_transformer.rasp.program import (
    Aggregate,
    Indices,
    Map,
    SelectorWidth,
    SequenceMap,
    SOp,
    Tokens,
)
from named_transformer.rasp.values import Layout, value_sets
from named_transformer.rasp.weights import attention_block, mlp_block

__all__ = ["compile_program"]


# --8<-- [start:compile_program]
def compile_program(
    program: SOp,
    vocabulary: Sequence[Any],
    max_length: int,
    *,
    bos: Any = "BOS",
    coldness: float = 100.0,
    dtype: torch.dtype = torch.float64,
) -> CompiledModel:
    r"""``program`` as a :class:`CompiledModel` for inputs of at most ``max_length``
    tokens of ``vocabulary``.

    ``coldness`` is $\beta$. ``dtype`` is float64 by default: in float32 the
    discretising ReLUs round a one-hot direction by ~2e-6, which the next ``select``
    multiplies by $\beta$ (5e-4 of attention weight where it should be 0).

    Raises ``ValueError`` naming the operation for what cannot be compiled (a
    ``select`` on a numerical s-op, a numerical ``sequence_map`` input, ...).
    """
    if max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    if bos in vocabulary:
        raise ValueError(f"the BOS token {bos!r} is also in the vocabulary")
    values = value_sets(program, list(vocabulary), max_length)
    layout = Layout(values, bos)
    steps: dict[int, list[Head] | list[list[Unit]]] = {}
    for sop, step in _schedule(values).items():
        for at, part in _parts(sop, step, layout):
            steps.setdefault(at, []).append(part)
    blocks, heads = [], []
    for at in sorted(steps):
        if at % 2 == 0:
            blocks.append(attention_block(steps[at], layout.width, coldness, dtype))
            heads.append([head.label for head in steps[at]])
        else:
            blocks.append(mlp_block(steps[at], layout.width, dtype))
    tokens_table, positions_table = layout.embeddings(max_length)
    categories = values[program] if program.encoding == "categorical" else None
    model = CompiledModel(
        tokens_table, positions_table, blocks,
        vocabulary=[bos, *layout.vocabulary], bos=bos, labels=layout.labels,
        output=OutputVariable(program.label, categories), heads=heads,
    )  # fmt: skip
    return model.to(dtype)


# --8<-- [end:compile_program]


# --8<-- [start:schedule]
def _schedule(values: dict[SOp, tuple]) -> dict[SOp, int]:
    """The step of every s-op: even steps attend, odd ones are feed-forward; an s-op
    comes at the first step of its kind after all its inputs (``values`` lists the
    s-ops inputs first). A ``selector_width`` takes an attention step and the next."""
    step: dict[SOp, int] = {}
    for sop in values:
        ready = max((step[c] for c in sop.children), default=-1)
        if isinstance(sop, Tokens | Indices):
            step[sop] = -1
        elif isinstance(sop, Aggregate):
            step[sop] = ready + 1 + (ready + 1) % 2  # the next even step
        elif isinstance(sop, SelectorWidth):
            step[sop] = ready + 2 + (ready + 1) % 2  # the MLP after that attention
        else:
            step[sop] = ready + 1 + ready % 2  # the next odd step
    return {sop: at for sop, at in step.items() if at >= 0}


# --8<-- [end:schedule]


def _parts(sop: SOp, step: int, layout: Layout) -> list[tuple]:
    """The heads and groups of hidden units that compute ``sop``, with their steps."""
    match sop:
        case Aggregate():
            return [(step, aggregate_head(sop, layout))]
        case SelectorWidth():
            head, units = selector_width_parts(sop, layout)
            return [(step - 1, head), (step, units)]
        case Map():
            return [(step, map_units(sop, layout))]
        case SequenceMap():
            return [(step, sequence_map_units(sop, layout))]
    raise TypeError(f"cannot compile {sop!r}")
