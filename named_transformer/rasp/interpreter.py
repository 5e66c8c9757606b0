r"""The RASP interpreter: a program's meaning, in plain Python.

Each s-op is a list with one value per position; a selector is a
$\mathsf{seq'} \times \mathsf{seq}$ table of booleans, one row per query. Aggregate
and selector width read the selector row by row:

$$\text{aggregate}(S, V)_q = \frac{\sum_k S_{q,k} V_k}{\sum_k S_{q,k}}
  = \big(\hat S \ndot{seq} V\big)_q, \qquad
  \text{selector\_width}(S)_q = \sum_k S_{q,k} = (S \ndot{seq} 1)_q,$$

with $\hat S$ the row-normalised selector. This is the reference the compiled model is
tested against: no tensors, no weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from named_transformer.rasp.program import (
    Aggregate,
    Indices,
    Map,
    Select,
    SelectorWidth,
    SequenceMap,
    SOp,
    Tokens,
)

__all__ = ["evaluate", "selector_matrix"]


# --8<-- [start:evaluate]
def evaluate(program: SOp | Select, tokens: Sequence[Any]) -> list:
    """The value of ``program`` at every position of ``tokens`` (for a ``select``:
    its boolean matrix, one row per query).

    Raises ``ValueError`` naming the aggregate when a categorical aggregate selects
    different values for one query.
    """
    memo: dict[int, list] = {}
    return _run(program, list(tokens), memo)


def selector_matrix(selector: Select, tokens: Sequence[Any]) -> list[list[bool]]:
    """$S_{q,k}$ of a ``select`` on ``tokens``: row $q$ is the query, column $k$ the
    key."""
    return evaluate(selector, tokens)


def _run(expr: SOp | Select, xs: list, memo: dict[int, list]) -> list:
    if id(expr) in memo:
        return memo[id(expr)]
    match expr:
        case Tokens():
            out = xs
        case Indices():
            out = list(range(len(xs)))
        case Map(fn=fn, inner=inner):
            out = [None if x is None else fn(x) for x in _run(inner, xs, memo)]
        case SequenceMap(fn=fn, first=first, second=second):
            pairs = zip(_run(first, xs, memo), _run(second, xs, memo), strict=True)
            out = [None if None in (x, y) else fn(x, y) for x, y in pairs]
        case Select(keys=keys, queries=queries, predicate=predicate):
            ks, qs = _run(keys, xs, memo), _run(queries, xs, memo)
            out = [[predicate(k, q) for k in ks] for q in qs]
        case Aggregate(selector=selector, values=values):
            rows, vs = _run(selector, xs, memo), _run(values, xs, memo)
            out = [_mean(expr, q, row, vs) for q, row in enumerate(rows)]
        case SelectorWidth(selector=selector):
            out = [sum(row) for row in _run(selector, xs, memo)]
        case _:
            raise TypeError(f"not a RASP expression: {expr!r}")
    memo[id(expr)] = out
    return out


def _mean(expr: Aggregate, query: int, row: list[bool], values: list) -> Any:
    chosen = [v for v, s in zip(values, row, strict=True) if s]
    if expr.encoding == "numerical":
        return sum(chosen) / len(chosen) if chosen else 0
    if not chosen:
        return None
    if any(v != chosen[0] for v in chosen):
        raise ValueError(
            f"aggregate '{expr.label}': query {query} selects the categorical values "
            f"{chosen}, not one value: a categorical aggregate must be one-hot per "
            "query (make the values numerical to average them)"
        )
    return chosen[0]


# --8<-- [end:evaluate]
