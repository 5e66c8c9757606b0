r"""Axis names and runtime shape checking.

Every tensor in this library is annotated with the axis names of the named tensor
paper (Chiang, Rush & Barak, TMLR 2023). This module is the one place those names are
listed, each with the symbol the paper uses and what it means; a project test fails if
any annotation in the package uses a name that is not here.

A primed axis of the paper becomes a suffix naming its role: $\mathsf{seq'}$ is
`seq_q` (query positions), $\mathsf{hidden'}$ is `hidden_next`. jaxtyping and einops
reject the prime itself.

`checked` is the decorator on every public function and every `forward`:
`jaxtyped(typechecker=beartype)`. It binds each axis name to one size per call, so a
wrong size fails at the call where it entered, naming the argument and the axis.
`shape_checks(False)` turns checking off (for speed and for `torch.compile`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

import jaxtyping
from beartype import BeartypeConf, beartype
from jaxtyping import jaxtyped

__all__ = ["AXES", "Axis", "checked", "shape_checks", "shape_checks_enabled"]


class Axis(NamedTuple):
    """One axis name: how the paper writes it and what it indexes."""

    symbol: str
    meaning: str


# --8<-- [start:axes]
AXES: dict[str, Axis] = {
    "batch": Axis(
        r"\mathsf{batch}", "independent examples (any number of leading axes)"
    ),
    "seq": Axis(r"\mathsf{seq}", "positions attended over: the keys and values"),
    "seq_q": Axis(r"\mathsf{seq'}", "query positions (the paper's seq', renamed)"),
    "layer": Axis(r"\mathsf{layer}", "model width, d_model"),
    "key": Axis(r"\mathsf{key}", "query/key width of one head, d_k"),
    "key_q": Axis(r"\mathsf{key'}", "query width when it differs from the key width"),
    "val": Axis(r"\mathsf{val}", "value width of one head, d_v"),
    "heads": Axis(r"\mathsf{heads}", "attention heads"),
    "hidden": Axis(
        r"\mathsf{hidden}", "feed-forward width; the state of an RNN (§4.2)"
    ),
    "hidden_next": Axis(r"\mathsf{hidden'}", "the next RNN state, before renaming"),
    "input": Axis(r"\mathsf{input}", "width of an RNN's input vector"),
    "memory": Axis(
        r"\mathsf{memory}", "width of the memory (encoder output) in cross-attention"
    ),
    "vocab": Axis(r"\mathsf{vocab}", "token types of the vocabulary"),
    "classes": Axis(r"\mathsf{classes}", "output classes of a classifier"),
    "distance": Axis(
        r"\mathsf{distance}", "clipped relative distance, 2k+1 entries (Shaw et al.)"
    ),
    "qkv": Axis(
        r"\mathsf{qkv}", "rows of seed 04's stacked W_qkv (q, k, v of all heads)"
    ),
    "gates": Axis(
        r"\mathsf{gates}", "stacked gates of a GRU (r, z, n) or an LSTM (i, f, g, o)"
    ),
    "annotation": Axis(
        r"\mathsf{annotation}", "bidirectional annotation [fwd h_j; bwd h_j]"
    ),
}
# --8<-- [end:axes]

_F = TypeVar("_F", bound=Callable)

# --8<-- [start:checked]
# PEP 484's numeric tower: an int is accepted where a float is annotated (beta=2,
# eps=0).
_typechecker = beartype(conf=BeartypeConf(is_pep484_tower=True))


def checked(fn: _F) -> _F:
    """Check ``fn``'s jaxtyping annotations with beartype on every call.

    This is ``jaxtyped(typechecker=beartype)``, with beartype accepting an ``int`` where
    a ``float`` is annotated. Decorate functions and ``forward`` methods, never a class:
    a decorated class checks nothing. Honours :func:`shape_checks` at call time.
    """
    return jaxtyped(typechecker=_typechecker)(fn)


# --8<-- [end:checked]


def shape_checks_enabled() -> bool:
    """Whether :func:`checked` functions verify their shapes right now."""
    return not jaxtyping.config.jaxtyping_disable


@contextlib.contextmanager
def _restore(previous: bool) -> Iterator[None]:
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", not previous)


# --8<-- [start:shape_checks]
def shape_checks(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """Turn runtime shape checking on or off.

    Takes effect at once, for every checked function (jaxtyping reads its
    ``jaxtyping_disable`` flag on each call; the environment variable
    ``JAXTYPING_DISABLE=1`` sets the same flag at import). Use it as a statement
    (``shape_checks(False)``) or as a context manager that restores the previous state::

        with shape_checks(False):
            model(tokens)  # no checks: ~50-120 µs saved per checked call
    """
    previous = shape_checks_enabled()
    jaxtyping.config.update("jaxtyping_disable", not enabled)
    return _restore(previous)


# --8<-- [end:shape_checks]
