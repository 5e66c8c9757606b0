r"""Each RASP operation as weights: attention heads and groups of ReLU units.

A :class:`Head` lists the non-zero entries of its $W^Q, b^Q, W^K, W^V, W^O$, a
:class:`Unit` one hidden unit of a feed-forward network,
$\operatorname{relu}(w \ndot{layer} x + b)$ written to the directions ``outputs``.
Every s-op is 0 at the BOS position (the selects rely on it): a group of units whose
output at BOS is not 0 gets one more unit, reading the BOS direction, that cancels it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from named_transformer.rasp.program import (
    Aggregate,
    Map,
    Select,
    SelectorWidth,
    SequenceMap,
    SOp,
)
from named_transformer.rasp.values import Layout

__all__ = [
    "Head",
    "Unit",
    "aggregate_head",
    "map_units",
    "selector_width_parts",
    "sequence_map_units",
]


@dataclass
class Head:
    """One attention head's entries: ``query[(layer, key)]`` and so on (before the
    inverse temperature)."""

    label: str
    query: dict[tuple[int, int], float] = field(default_factory=dict)
    query_bias: dict[int, float] = field(default_factory=dict)
    key: dict[tuple[int, int], float] = field(default_factory=dict)
    value: dict[tuple[int, int], float] = field(default_factory=dict)
    output: dict[tuple[int, int], float] = field(default_factory=dict)


@dataclass
class Unit:
    """$\\operatorname{relu}(\\sum_d w_d x_d + b)$, added to ``outputs``."""

    inputs: dict[int, float]
    bias: float
    outputs: dict[int, float]


# --8<-- [start:select_head]
def _select_head(label: str, selector: Select, layout: Layout, bos: float) -> Head:
    """Scores $\\text{predicate}(k, q)$ (1 or 0) and ``bos`` for the BOS key."""
    keys, queries = selector.keys, selector.queries
    head, known = Head(label), layout.values[keys]
    for j, key in enumerate(known):
        head.key[layout.dim(keys, key), j] = 1.0
        for query in layout.values[queries]:
            try:
                selected = selector.predicate(key, query)
            except TypeError as error:
                raise ValueError(
                    f"select in '{label}': {selector.predicate.name} "
                    f"cannot compare {key!r} with {query!r}"
                ) from error
            if selected:
                head.query[layout.dim(queries, query), j] = 1.0
    head.key[layout.bos, len(known)] = 1.0  # the BOS key's own direction
    head.query_bias[len(known)] = bos  # every query scores it `bos`
    return head


# --8<-- [end:select_head]


# --8<-- [start:aggregate_head]
def aggregate_head(sop: Aggregate, layout: Layout) -> Head:
    """$W^V$ copies the values' directions into $\\mathsf{val}$, $W^O$ into the
    output's: the mean of one-hot vectors, or of one number."""
    head = _select_head(sop.label, sop.selector, layout, bos=0.5)
    if sop.encoding == "numerical":
        head.value[layout.dim(sop.values), 0] = 1.0
        head.output[0, layout.dim(sop)] = 1.0
        return head
    for j, value in enumerate(layout.values[sop.values]):
        head.value[layout.dim(sop.values, value), j] = 1.0
        head.output[j, layout.dim(sop, value)] = 1.0
    return head


# --8<-- [end:aggregate_head]


# --8<-- [start:selector_width]
def selector_width_parts(sop: SelectorWidth, layout: Layout) -> tuple[Head, list]:
    """A head attending to BOS as much as to each selected key, reading the BOS
    direction: $1/(w+1)$; then units turning $1/(w+1)$ back into $w$."""
    head = _select_head(sop.label, sop.selector, layout, bos=1.0)
    scratch = layout.scratch[sop]
    head.value[layout.bos, 0] = 1.0
    head.output[0, scratch] = 1.0
    widths = layout.values[sop]
    units = _discretise(
        scratch, [1 / (w + 1) for w in widths], [(w, 1 / (w + 1)) for w in widths],
        lambda w: _write(sop, w, layout),
    )  # fmt: skip
    return head, _clean_bos(units, layout, at_bos={scratch: 1.0}, extra={scratch: -1})


# --8<-- [end:selector_width]


# --8<-- [start:map_units]
def map_units(sop: Map, layout: Layout) -> list[Unit]:
    """A lookup table: one unit per input value (categorical input), or steps at
    the midpoints of the input's values (numerical input)."""
    inner = sop.inner
    if inner.encoding == "numerical":
        found = layout.values[inner]
        pairs = [(_value(sop.fn, x), x) for x in found]
        units = _discretise(
            layout.dim(inner), found, pairs, lambda y: _write(sop, y, layout)
        )
        return _clean_bos(units, layout)
    return [
        Unit({layout.dim(inner, x): 1.0}, 0.0, _write(sop, _value(sop.fn, x), layout))
        for x in layout.values[inner]
    ]


def sequence_map_units(sop: SequenceMap, layout: Layout) -> list[Unit]:
    """One unit per pair of input values, $\\operatorname{relu}(x_i + y_j - 1)$:
    1 exactly when both are present."""
    units = []
    for x in layout.values[sop.first]:
        for y in layout.values[sop.second]:
            inputs: dict[int, float] = {}
            for side, value in ((sop.first, x), (sop.second, y)):
                where = layout.dim(side, value)
                inputs[where] = inputs.get(where, 0.0) + 1.0
            output = _write(sop, _value(sop.fn, x, y), layout)
            units.append(Unit(inputs, -1.0, output))
    return units


# --8<-- [end:map_units]


# --8<-- [start:discretise]
def _discretise(
    where: int, inputs: list[float], pairs: list[tuple[Any, float]], write: Any
) -> list[Unit]:
    r"""$f$ of a number $x$ known to be one of ``inputs``: $f(x_1)$ plus, at each
    midpoint $t$ where $f$ changes, a step
    $\operatorname{relu}(L(x-t)+\frac12) - \operatorname{relu}(L(x-t)-\frac12)$
    (0 below $t - \frac1{2L}$, 1 above $t + \frac1{2L}$) times the change."""
    ordered = sorted((x, y) for y, x in pairs)
    gaps = [b[0] - a[0] for a, b in zip(ordered, ordered[1:], strict=False)]
    steep = 2.0 / min(gaps) if gaps else 1.0  # the step is done half a gap away
    units = [Unit({}, 1.0, write(ordered[0][1]))]  # a constant 1: f(x_1)
    for (x0, y0), (x1, y1) in zip(ordered, ordered[1:], strict=False):
        if y0 == y1:
            continue
        change = _minus(write(y1), write(y0))
        middle = (x0 + x1) / 2
        units.append(Unit({where: steep}, 0.5 - steep * middle, change))
        units.append(Unit({where: steep}, -0.5 - steep * middle, _minus({}, change)))
    return units


# --8<-- [end:discretise]


def _value(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ArithmeticError:
        return None


def _write(sop: SOp, value: Any, layout: Layout) -> dict[int, float]:
    """The directions that encode ``value`` of ``sop``."""
    if value is None:
        return {}
    if sop.encoding == "numerical":
        return {layout.dim(sop): float(value)}
    return {layout.dim(sop, value): 1.0}


def _minus(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    return {d: a.get(d, 0.0) - b.get(d, 0.0) for d in a.keys() | b.keys()}


def _clean_bos(
    units: list[Unit],
    layout: Layout,
    at_bos: dict[int, float] | None = None,
    extra: dict[int, float] | None = None,
) -> list[Unit]:
    """``units`` and one more unit, firing at BOS only, that cancels what they write
    there (where the inputs are ``at_bos``, 0 elsewhere), and ``extra``."""
    at_bos, total = at_bos or {}, dict(extra or {})
    for unit in units:
        fired = max(0.0, unit.bias + sum(w * at_bos.get(d, 0.0)
                                         for d, w in unit.inputs.items()))  # fmt: skip
        for d, w in unit.outputs.items():
            total[d] = total.get(d, 0.0) - fired * w
    if all(abs(w) < 1e-12 for w in total.values()):
        return units
    return [*units, Unit({layout.bos: 1.0}, 0.0, total)]
