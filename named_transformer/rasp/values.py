r"""What a compiled program's residual stream holds: value sets and the layout.

The compiler needs every value an s-op can take, as Tracr's basis inference does:
the vocabulary for ``tokens``, $0 \dots n_{\max}-1$ for ``indices``, $f$ of every
input value for a ``map``, $0 \dots n_{\max}$ for ``selector_width``, and every mean
of at most $n_{\max}$ values for a numerical ``aggregate``. A categorical s-op owns
one direction of $\mathsf{layer}$ per value; the layout is their named concatenation.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import torch

from named_transformer.rasp.program import (
    Aggregate,
    Indices,
    Map,
    SelectorWidth,
    SequenceMap,
    SOp,
    Tokens,
    tokens,
)

__all__ = ["Layout", "value_sets"]

_MAX_VALUES = 5000


def _ordered(values: Iterable[Any]) -> tuple:
    found = {v for v in values if v is not None}
    try:
        return tuple(sorted(found))
    except TypeError:  # values of mixed types: a fixed order all the same
        return tuple(sorted(found, key=repr))


def _number(value: Any) -> float:
    return round(float(value), 9)  # the same mean, summed in another order


def _apply(sop: SOp, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ArithmeticError:  # a value the program never meets (Tracr skips it too)
        return None
    except Exception as error:
        raise ValueError(f"{type(sop).__name__.lower()} '{sop.label}': {fn} fails "
                         f"on {args}: {error}") from error  # fmt: skip


def _topological(program: SOp) -> list[SOp]:
    order: list[SOp] = []
    seen: set[int] = set()

    def visit(sop: SOp) -> None:
        if id(sop) in seen:
            return
        seen.add(id(sop))
        for child in sop.children:
            visit(child)
        order.append(sop)

    visit(program)
    return order


def _check(sop: SOp) -> None:
    name = f"'{sop.label}'"
    if isinstance(sop, Aggregate | SelectorWidth):
        kind = "aggregate" if isinstance(sop, Aggregate) else "selector_width"
        for role in ("keys", "queries"):
            side = getattr(sop.selector, role)
            if side.encoding != "categorical":
                raise ValueError(
                    f"select in {kind} {name}: {role} '{side.label}' is numerical; "
                    "a select compares categorical values"
                )
    if isinstance(sop, Aggregate) and sop.encoding != sop.values.encoding:
        raise ValueError(
            f"aggregate {name} is {sop.encoding} but its values "
            f"'{sop.values.label}' are {sop.values.encoding}"
        )
    if isinstance(sop, SequenceMap) and "numerical" in (
        sop.first.encoding,
        sop.second.encoding,
    ):
        raise ValueError(f"sequence_map {name}: both inputs must be categorical")


# --8<-- [start:value_sets]
def value_sets(program: SOp, vocabulary: list, max_length: int) -> dict[SOp, tuple]:
    """Every value of every s-op of ``program``, the s-ops inputs first."""
    values: dict[SOp, tuple] = {}
    labels: dict[str, SOp] = {}
    order = _topological(program)
    if not any(isinstance(sop, Tokens) for sop in order):
        order.insert(0, tokens)  # the embedding writes the tokens all the same
    # the inputs first, tokens then indices: the embedding's directions lead
    order.sort(key=lambda sop: 0 if isinstance(sop, Tokens) else
               1 if isinstance(sop, Indices) else 2)  # fmt: skip
    for sop in order:
        _check(sop)
        if labels.setdefault(sop.label, sop) is not sop:
            raise ValueError(f"two different s-ops are named '{sop.label}'")
        match sop:
            case Tokens():
                found: Iterable = vocabulary
            case Indices():
                found = range(max_length)
            case Map(fn=fn, inner=inner):
                found = [_apply(sop, fn, x) for x in values[inner]]
            case SequenceMap(fn=fn, first=first, second=second):
                pairs = itertools.product(values[first], values[second])
                found = [_apply(sop, fn, x, y) for x, y in pairs]
            case SelectorWidth():
                found = range(max_length + 1)
            case Aggregate(values=inner) if sop.encoding == "numerical":
                found = _means(sop, values[inner], max_length)
            case Aggregate(values=inner):
                found = values[inner]
            case _:
                raise TypeError(f"not a RASP s-op: {sop!r}")
        if sop.encoding == "numerical":
            found = [_number(v) for v in found if v is not None]
        values[sop] = _ordered(found)
    return values


def _means(sop: SOp, inputs: tuple, max_length: int) -> set[float]:
    """Every mean of 1 to ``max_length`` values of ``inputs``, and the default 0."""
    means, sums = {0.0}, {0.0}
    for count in range(1, max_length + 1):
        sums = {_number(s + v) for s in sums for v in inputs}
        means |= {_number(s / count) for s in sums}
        if len(means) > _MAX_VALUES:
            raise ValueError(f"aggregate '{sop.label}': more than {_MAX_VALUES} "
                             "possible means; use fewer distinct values")  # fmt: skip
    return means


# --8<-- [end:value_sets]


# --8<-- [start:Layout]
class Layout:
    """The directions of $\\mathsf{layer}$: ``tokens:BOS``, ``tokens:v`` … then each
    s-op's, named ``label:value`` (categorical) or ``label`` (numerical);
    a ``selector_width`` adds ``label_attention``, its attention's output."""

    def __init__(self, values: dict[SOp, tuple], bos: Any) -> None:
        self.values, self.labels = values, []
        self.start: dict[SOp, int] = {}
        self.scratch: dict[SOp, int] = {}
        for sop, found in values.items():
            if isinstance(sop, Tokens):
                self.vocabulary, self.bos = found, len(self.labels)
                self.labels.append(f"{sop.label}:{bos}")
            self.start[sop] = len(self.labels)
            if sop.encoding == "numerical":
                self.labels.append(sop.label)
            else:
                self.labels += [f"{sop.label}:{v}" for v in found]
            if isinstance(sop, SelectorWidth):
                self.scratch[sop] = len(self.labels)
                self.labels.append(f"{sop.label}_attention")
        self.width = len(self.labels)

    def dim(self, sop: SOp, value: Any = None) -> int:
        """The direction of ``value`` of ``sop`` (of ``sop`` if numerical)."""
        if sop.encoding == "numerical":
            return self.start[sop]
        return self.start[sop] + self.values[sop].index(value)

    def embeddings(self, max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """$E$, one row per token of ``vocabulary`` (BOS first), and $P$, one row per
        position (BOS first)."""
        inputs = next(s for s in self.values if isinstance(s, Tokens))
        table = torch.zeros(len(self.vocabulary) + 1, self.width)
        table[0, self.bos] = 1.0
        for row, token in enumerate(self.vocabulary, start=1):
            table[row, self.dim(inputs, token)] = 1.0
        positions = torch.zeros(max_length + 1, self.width)
        place = next((s for s in self.values if isinstance(s, Indices)), None)
        for index in range(max_length if place is not None else 0):
            positions[index + 1, self.dim(place, index)] = 1.0
        return table, positions


# --8<-- [end:Layout]
