r"""Axis names and runtime shape checking.

Every tensor in this library is annotated with the axis names of the named tensor
paper (Chiang, Rush & Barak, TMLR 2023). This module is the one place those names are
listed, each with the symbol the paper uses and what it means; a project test fails if
any annotation in the package, or any equation on a docs page or in a docstring, uses a
name that is not here.

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
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import jaxtyping
import torch
from beartype import BeartypeConf, beartype
from jaxtyping import TypeCheckError, jaxtyped

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
    "kv_heads": Axis(
        r"\mathsf{kv\_heads}",
        "key/value heads, each shared by a group of query heads (GQA; MQA when 1)",
    ),
    "group": Axis(
        r"\mathsf{group}", "query heads sharing one key/value head: heads / kv_heads"
    ),
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
    "qkv": Axis(r"\mathsf{qkv}", "rows of the stacked W_qkv (q, k, v of all heads)"),
    "gates": Axis(
        r"\mathsf{gates}", "stacked gates of a GRU (r, z, n) or an LSTM (i, f, g, o)"
    ),
    "annotation": Axis(
        r"\mathsf{annotation}", "bidirectional annotation [fwd h_i; bwd h_i]"
    ),
    "value_memory": Axis(
        r"\mathsf{memory_v}",
        "width of the values' own source when it differs from the keys' (vdim)",
    ),
    "layer_out": Axis(
        r"\mathsf{layer'}", "output of a position-wise affine map, renamed to layer"
    ),
    "layers": Axis(r"\mathsf{layers}", "a model's layers, stacked (attention maps)"),
    "sentences": Axis(r"\mathsf{sentences}", "sentences embedded together"),
    "pairs": Axis(
        r"\mathsf{pairs}", "pairs of key channels rotated together, |key|/2 (RoPE)"
    ),
    "rows": Axis(r"\mathsf{rows}", "rows of a stored weight matrix (GGUF)"),
    "columns": Axis(r"\mathsf{columns}", "columns of a stored weight matrix (GGUF)"),
    "bytes": Axis(r"\mathsf{bytes}", "bytes of a quantised row or block"),
    "blocks": Axis(r"\mathsf{blocks}", "quantisation blocks along a row (Q4_1, Q8_0)"),
    "weights": Axis(r"\mathsf{weights}", "the 32 weights of one quantisation block"),
    "two": Axis(
        r"\mathsf{two}", "the two channels of one rotated pair (llama.cpp's rows)"
    ),
    "three": Axis(
        r"\mathsf{three}",
        "query, key and value projections stacked in one matrix (GPT-2's c_attn)",
    ),
    "parts": Axis(
        r"\mathsf{parts}",
        "the heads of W^Q, then of W^K and W^V, stacked in one W_qkv (any kv_heads)",
    ),
    "types": Axis(
        r"\mathsf{types}", "token types (segments) of BERT's token-type table"
    ),
    "topic": Axis(
        r"\mathsf{topic}", "topics of the documents in the semantic-search example"
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
    a decorated class checks nothing. Honours :func:`shape_checks` at call time. A
    failed check raises jaxtyping's ``TypeCheckError`` whose first line says what is
    wrong, e.g. ``axis 'seq' is 8 in argument 'mask' but 9 in argument 'keys'``.
    """
    typed = jaxtyped(typechecker=_typechecker)(fn)

    @functools.wraps(fn)
    def check(*args: Any, **kwargs: Any) -> Any:
        if jaxtyping.config.jaxtyping_disable:  # off: no check, nothing to explain
            return fn(*args, **kwargs)
        try:
            return typed(*args, **kwargs)
        except TypeCheckError as error:
            fresh = _about_arguments(error) and not hasattr(error, "summary")
            summary = _summary(fn, args, kwargs) if fresh else None
            if summary is None:
                raise
            summarised = TypeCheckError(f"{summary}\n\n{error}")
            summarised.summary = summary
            raise summarised from None

    return check  # type: ignore[return-value]


# --8<-- [end:checked]


# `Float[Tensor, '*batch seq key']` in an annotation: the dtype kind and the axes
_ANNOTATION = re.compile(
    r"\b(Float|Int|Bool|Shaped)\[\s*Tensor\s*,\s*['\"]([^'\"]*)['\"]"
)
_KINDS = {
    "Float": torch.is_floating_point,
    "Bool": lambda t: t.dtype == torch.bool,
    "Int": lambda t: not t.is_floating_point() and t.dtype != torch.bool,
}


def _about_arguments(error: TypeCheckError) -> bool:
    return "checking the parameters" in str(error)


def _summary(fn: Callable, args: tuple, kwargs: dict) -> str | None:
    """One line naming the conflict of a failed check of ``fn``'s arguments.

    Reads the arguments in order, as the check does: the first argument to use an axis
    sets its size, and the first that disagrees is named with the one it disagrees
    with. A module's weights (parameters) are read first, so a wrong input is blamed,
    not the weight it meets.
    """
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    annotated = []
    for name, value in bound.arguments.items():
        match = _ANNOTATION.search(str(fn.__annotations__.get(name, "")))
        if match and isinstance(value, torch.Tensor):
            annotated.append((name, value, match[1], match[2].split()))
    # a module's weights first: they are right, and the input that disagrees is named
    annotated.sort(key=lambda item: not isinstance(item[1], torch.nn.Parameter))
    seen: dict[str, tuple[int, str]] = {}
    for name, value, kind, dims in annotated:
        if not _KINDS.get(kind, lambda t: True)(value):
            return f"argument '{name}' has dtype {value.dtype}, not {kind}"
        problem = _bind(name, tuple(value.shape), dims, seen)
        if problem:
            return problem
    return None


def _bind(
    name: str, shape: tuple[int, ...], dims: list[str], seen: dict[str, tuple[int, str]]
) -> str | None:
    """Bind the named axes of one argument; the first conflict, in words."""
    variadic = [i for i, d in enumerate(dims) if d.startswith(("*", "#*"))]
    fixed = len(dims) - len(variadic)
    if len(shape) < fixed or (not variadic and len(shape) != fixed):
        wanted = f"{fixed} or more" if variadic else str(fixed)
        axes = "axis" if len(shape) == 1 else "axes"
        return (f"argument '{name}' has {len(shape)} {axes} {shape}, but "
                f"'{' '.join(dims)}' needs {wanted}")  # fmt: skip
    split = variadic[0] if variadic else len(dims)
    after = len(dims) - split - 1 if variadic else 0
    positions = list(range(split)) + list(range(len(shape) - after, len(shape)))
    named = [d for i, d in enumerate(dims) if i not in variadic]
    for dim, position in zip(named, positions, strict=True):
        broadcast, axis = dim.startswith("#"), dim.lstrip("#")
        size = shape[position]
        if axis.isdigit() or axis == "_" or (broadcast and size == 1):
            continue
        if axis in seen and seen[axis][0] != size:
            if not (seen[axis][0] == 1 and broadcast):
                first, where = seen[axis]
                return (f"axis '{axis}' is {first} in argument '{where}' but {size} "
                        f"in argument '{name}'")  # fmt: skip
        seen.setdefault(axis, (size, name))
    return None


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
            model(tokens)  # no checks: each checked call's check time saved
    """
    previous = shape_checks_enabled()
    jaxtyping.config.update("jaxtyping_disable", not enabled)
    return _restore(previous)


# --8<-- [end:shape_checks]
