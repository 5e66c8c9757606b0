r"""RASP, the Restricted Access Sequence Processing language, embedded in Python.

Weiss, Goldberg & Yahav ("Thinking Like Transformers", ICML 2021) describe what a
Transformer can compute with a handful of operations on sequences (*s-ops*):

- ``tokens`` and ``indices``, the inputs: the token and the position at each place;
- ``map(f, x)`` and ``sequence_map(f, x, y)``, position-wise functions (an MLP);
- ``select(keys, queries, predicate)``, a $\mathsf{seq'} \times \mathsf{seq}$
  boolean *selector* $S_{q,k} = \text{predicate}(\text{key}_k, \text{query}_q)$: an
  attention pattern;
- ``aggregate(S, values)``, the mean of the selected values at every query,
  $S \ndot{seq} V$ once $S$ is normalised: an attention head's output;
- ``selector_width(S)``, the number of selected keys at every query,
  $S \ndot{seq} 1$.

Every s-op carries an *encoding*, as in Tracr (Lindner et al. 2023): ``categorical``
values become one-hot directions in the residual stream, ``numerical`` values one
number. A program is the expression graph of its output s-op: immutable, built by these
functions, run by :func:`~named_transformer.rasp.interpreter.evaluate` and compiled by
:func:`~named_transformer.rasp.compiler.compile_program`.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = [
    "Aggregate",
    "Comparison",
    "Indices",
    "Map",
    "SOp",
    "Select",
    "SelectorWidth",
    "SequenceMap",
    "Tokens",
    "aggregate",
    "categorical",
    "indices",
    "map",
    "numerical",
    "select",
    "selector_width",
    "sequence_map",
    "tokens",
]

Encoding = Literal["categorical", "numerical"]
Value = Hashable
_labels = itertools.count(1)


# --8<-- [start:Comparison]
class Comparison(enum.Enum):
    """The predicate of a ``select``: $\\text{predicate}(\\text{key}, \\text{query})$,
    Tracr's names and meanings."""

    EQ = "=="
    LT = "<"
    LEQ = "<="
    GT = ">"
    GEQ = ">="
    NEQ = "!="
    TRUE = "True"
    FALSE = "False"

    def __call__(self, key: Value, query: Value) -> bool:
        return _PREDICATES[self](key, query)


_PREDICATES: dict[Comparison, Callable[[Any, Any], bool]] = {
    Comparison.EQ: lambda key, query: key == query,
    Comparison.LT: lambda key, query: key < query,
    Comparison.LEQ: lambda key, query: key <= query,
    Comparison.GT: lambda key, query: key > query,
    Comparison.GEQ: lambda key, query: key >= query,
    Comparison.NEQ: lambda key, query: key != query,
    Comparison.TRUE: lambda key, query: True,
    Comparison.FALSE: lambda key, query: False,
}
# --8<-- [end:Comparison]


# --8<-- [start:sops]
@dataclass(frozen=True, eq=False)  # eq=False: identity, so an s-op can key a dict
class SOp:
    """A sequence operation: one value per position. ``label`` names it in the
    residual stream; ``named`` and ``numerical``/``categorical`` return copies."""

    label: str
    encoding: Encoding

    def named(self, label: str) -> SOp:
        return replace(self, label=label)

    @property
    def children(self) -> tuple[SOp, ...]:
        """The s-ops this one reads (through its selector, for attention)."""
        return ()


@dataclass(frozen=True, eq=False)
class Tokens(SOp):
    """The input tokens."""


@dataclass(frozen=True, eq=False)
class Indices(SOp):
    """The positions $0, 1, \\dots, n-1$."""


@dataclass(frozen=True, eq=False)
class Map(SOp):
    """$f(x)$ at every position."""

    fn: Callable[[Any], Any]
    inner: SOp

    @property
    def children(self) -> tuple[SOp, ...]:
        return (self.inner,)


@dataclass(frozen=True, eq=False)
class SequenceMap(SOp):
    """$f(x, y)$ at every position."""

    fn: Callable[[Any, Any], Any]
    first: SOp
    second: SOp

    @property
    def children(self) -> tuple[SOp, ...]:
        return (self.first, self.second)


@dataclass(frozen=True, eq=False)
class Select:
    """The selector $S_{q,k} = \\text{predicate}(\\text{keys}_k,
    \\text{queries}_q)$."""

    keys: SOp
    queries: SOp
    predicate: Comparison


@dataclass(frozen=True, eq=False)
class Aggregate(SOp):
    """The mean of the selected values at every query."""

    selector: Select
    values: SOp

    @property
    def children(self) -> tuple[SOp, ...]:
        return (self.selector.keys, self.selector.queries, self.values)


@dataclass(frozen=True, eq=False)
class SelectorWidth(SOp):
    """The number of selected keys at every query."""

    selector: Select

    @property
    def children(self) -> tuple[SOp, ...]:
        return (self.selector.keys, self.selector.queries)


# --8<-- [end:sops]


def _label(kind: str) -> str:
    return f"{kind}_{next(_labels)}"


def _sop(operation: str, argument: str, value: Any) -> SOp:
    if not isinstance(value, SOp):
        raise TypeError(
            f"{operation}: {argument} must be a RASP s-op (tokens, indices or one "
            f"built from them), got {value!r}: an undefined variable?"
        )
    return value


def _encoding(operation: str, encoding: str) -> Encoding:
    if encoding not in ("categorical", "numerical"):
        raise ValueError(
            f"{operation}: encoding must be 'categorical' or 'numerical', "
            f"got {encoding!r}"
        )
    return encoding  # type: ignore[return-value]


# --8<-- [start:primitives]
tokens = Tokens("tokens", "categorical")
indices = Indices("indices", "categorical")


def map(  # RASP's name; it shadows the builtin in this module only
    fn: Callable[[Any], Any], sop: SOp, encoding: Encoding = "categorical"
) -> Map:
    """$f(x)$ at every position: an MLP once compiled."""
    inner = _sop("map", "its input", sop)
    return Map(_label("map"), _encoding("map", encoding), fn, inner)


def sequence_map(
    fn: Callable[[Any, Any], Any],
    first: SOp,
    second: SOp,
    encoding: Encoding = "categorical",
) -> SequenceMap:
    """$f(x, y)$ at every position, from two s-ops: an MLP once compiled."""
    x = _sop("sequence_map", "its first input", first)
    y = _sop("sequence_map", "its second input", second)
    return SequenceMap(_label("sequence_map"), _encoding("sequence_map", encoding),
                       fn, x, y)  # fmt: skip


def select(keys: SOp, queries: SOp, predicate: Comparison) -> Select:
    """The selector $S_{q,k} = \\text{predicate}(\\text{keys}_k,
    \\text{queries}_q)$: a $\\mathsf{seq'} \\times \\mathsf{seq}$ attention pattern."""
    if not isinstance(predicate, Comparison):
        raise TypeError(f"select: predicate must be a Comparison, got {predicate!r}")
    return Select(_sop("select", "keys", keys), _sop("select", "queries", queries),
                  predicate)  # fmt: skip


def aggregate(selector: Select, values: SOp) -> Aggregate:
    """The mean of the values selected at every query: an attention head.

    Numerical values are averaged; a categorical aggregate must select one value per
    query (a mean of different categories is not a category). The encoding is the
    values'. Where nothing is selected the default is None (categorical) or 0.
    """
    if not isinstance(selector, Select):
        raise TypeError(f"aggregate: selector must be a select(...), got {selector!r}")
    sop = _sop("aggregate", "values", values)
    return Aggregate(_label("aggregate"), sop.encoding, selector, sop)


def selector_width(selector: Select) -> SelectorWidth:
    """The number of keys selected at every query (categorical $0 \\dots n$)."""
    if not isinstance(selector, Select):
        raise TypeError(
            f"selector_width: selector must be a select(...), got {selector!r}"
        )
    return SelectorWidth(_label("selector_width"), "categorical", selector)


def numerical(sop: SOp) -> SOp:
    """The same s-op, encoded as one number in the residual stream."""
    return replace(_sop("numerical", "its argument", sop), encoding="numerical")


def categorical(sop: SOp) -> SOp:
    """The same s-op, encoded one-hot: one direction per value."""
    return replace(_sop("categorical", "its argument", sop), encoding="categorical")


# --8<-- [end:primitives]
