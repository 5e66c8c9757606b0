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
`shape_checks(False)` turns checking off (for speed); `torch.compile` traces a checked
function without its check.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import operator
import re
import types
import typing
from collections import abc
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TypeVar

import jaxtyping
import torch
from beartype import BeartypeConf, beartype
from beartype.door import is_bearable
from jaxtyping import TypeCheckError, jaxtyped

try:  # jaxtyping's parsed annotations, which the quick check reads
    from jaxtyping._array_types import (
        AbstractArray,
        _anonymous_dim,
        _anonymous_variadic_dim,
        _any_dtype,
        _FixedDim,
        _NamedDim,
        _NamedVariadicDim,
    )
except ImportError:  # a jaxtyping that moved them: every call takes the full check
    AbstractArray = None

__all__ = ["AXES", "Axis", "checked", "shape_checks", "shape_checks_enabled"]


# --8<-- [start:axes]
class Axis(NamedTuple):
    """One axis name: how the paper writes it and what it indexes."""

    symbol: str
    meaning: str


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
    # ... and every other name in the table above, each with its symbol and meaning
    # --8<-- [end:axes]
    "kv_heads": Axis(
        r"\mathsf{kv\_heads}",
        "key/value heads, each shared by a group of query heads (GQA; MQA when 1)",
    ),
    "group": Axis(
        r"\mathsf{group}", "query heads sharing one key/value head: heads / kv_heads"
    ),
    "kv_batch": Axis(
        r"\mathsf{batch}",
        "the keys' and values' leading axes: the queries', or kv_heads for heads",
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
    "layer_q": Axis(
        r"\mathsf{layer_q}", "the stream a QK circuit's queries read (Elhage et al.)"
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

_F = TypeVar("_F", bound=Callable)

# --8<-- [start:checked]
# PEP 484's numeric tower: an int is accepted where a float is annotated (beta=2,
# eps=0).
_CONF = BeartypeConf(is_pep484_tower=True)
_typechecker = beartype(conf=_CONF)


def checked(fn: _F) -> _F:
    """Check ``fn``'s jaxtyping annotations with beartype on every call.

    This is ``jaxtyped(typechecker=beartype)``, with beartype accepting an ``int`` where
    a ``float`` is annotated. Decorate functions and ``forward`` methods, never a class:
    a decorated class checks nothing. Honours :func:`shape_checks` at call time. A
    failed check raises jaxtyping's ``TypeCheckError`` whose first line says what is
    wrong, e.g. ``axis 'seq' is 8 in argument 'mask' but 9 in argument 'keys'``, or
    for a wrong result ``axis 'seq_q' is 3 in argument 'queries' but 5 in the return
    value``.

    A call whose arguments pass the quick check (:class:`_QuickCheck`: the same rules,
    read once from the annotations; a call like one that passed, remembered) runs
    without jaxtyping's and beartype's wrappers, and its result is checked against the
    axes its arguments bound. Any other call goes through them, which accept it or
    raise their error; so does a call whose result the quick check rejects, run a
    second time to get their error. While ``torch.compile`` traces, calls run
    unchecked: check shapes with an eager call. An equation marked with a faster
    equal function (``fn.faster``, :func:`~named_transformer.core.fast.stand_in`) is
    checked by its own annotations, and the faster function computes the call.
    """
    typed = jaxtyped(typechecker=_typechecker)(fn)
    read_quick = _QuickCheck.later(fn)
    runs = getattr(fn, "faster", fn)  # what computes a call: fn, or its stand-in

    @functools.wraps(fn)
    def check(*args: Any, **kwargs: Any) -> Any:
        # off: no check, nothing to explain. While torch.compile traces, none either:
        # the compiled graph could not run one (it replays the tensor operations
        # alone), and the full check's own Python does not trace (beartype's verdict
        # on a traced mask's result is its error path, which graph-breaks)
        if jaxtyping.config.jaxtyping_disable or torch.compiler.is_compiling():
            return runs(*args, **kwargs)
        result = read_quick().run(runs, args, kwargs)
        if result is not _REJECTED and type(result) is not _WrongResult:
            return result
        # rejected arguments, or a wrong result (a bug in fn: the call again), for
        # the full check's verdict and its error
        try:
            return typed(*args, **kwargs)
        except TypeCheckError as error:
            summary = None
            if hasattr(error, "summary"):  # an inner call's, summarised there
                raise
            if _about_arguments(error):
                summary = _summary(fn, args, kwargs)
            elif type(result) is _WrongResult and _about_result(error):
                summary = _result_summary(fn, args, kwargs, result.value)
            if summary is None:
                raise
            summarised = TypeCheckError(f"{summary}\n\n{error}")
            summarised.summary = summary
            raise summarised from None

    check.quick_check = read_quick  # type: ignore[attr-defined]  # for the tests
    check.equation = fn  # type: ignore[attr-defined]  # the body the docs show
    return check  # type: ignore[return-value]


# --8<-- [end:checked]


# --8<-- [start:quick]
class _QuickCheck:
    """jaxtyping's and beartype's verdict on one function's calls, from its annotations
    read once.

    jaxtyping with beartype binds the signature, pushes a table of axis sizes, checks
    every argument through beartype's generated code, calls the function, then checks
    the arguments again together with the result: a checked ``layer_norm`` on 64 × 512
    took 67 µs more than an unchecked one, a third to a half of its arithmetic. This
    check reads each annotation once, into the axes and dtypes jaxtyping parsed from it,
    and on each call applies jaxtyping's shape rule (:class:`_ArrayCheck`) argument by
    argument, in the signature's order as beartype does, to a fresh table of sizes.
    Arguments it rejects go to the full check, which raises its error (or accepts them:
    this check never accepts what the full one rejects; a test draws annotations and
    shapes to show the verdicts agree). A list, tuple or mapping of tensors is checked
    item by item, where beartype checks one item it draws. A function whose annotations
    it cannot read takes the full check: an axis written as an expression of others, an
    ``Annotated`` or ``Iterable`` hint with tensors inside, annotated ``**kwargs``, a
    union of tensors with different axes, names that do not resolve at the first call.
    No jaxtyping table is open while the function runs: an ``isinstance`` against a
    jaxtyping annotation inside it binds its own axes (the package makes none). Calls
    like earlier ones that passed take their remembered verdict (:meth:`run`).
    """

    def __init__(self, fn: Callable) -> None:
        hints = _hints(fn) if AbstractArray is not None else None
        if hints is None:
            raise _Unreadable
        parameters = list(inspect.signature(fn).parameters.values())
        kinds = {p.kind: p.name for p in parameters}
        if hints.get(kinds.get(_P.VAR_KEYWORD), Any) is not Any:
            raise _Unreadable  # **keywords annotated: beartype checks each of them
        self.more_keywords = _P.VAR_KEYWORD in kinds
        self.more_positions = _P.VAR_POSITIONAL in kinds
        self.positional = tuple(p.name for p in parameters if p.kind in _POSITIONAL)
        self.names = frozenset(p.name for p in parameters if p.kind not in _STARRED)
        #: (position, or _REST for *args, or None; name; check) of each annotated
        #: parameter, in the signature's order; *args checked item by item
        self.checks = [
            (_REST, p.name, functools.partial(_each, _check_of(hints[p.name])))
            if p.kind is _P.VAR_POSITIONAL else
            (self.positional.index(p.name) if p.name in self.positional else None,
             p.name, _check_of(hints[p.name]))
            for p in parameters if p.name in hints and p.kind is not _P.VAR_KEYWORD
        ]  # fmt: skip
        self.returns = _check_of(hints["return"]) if "return" in hints else None
        #: whether types, dtypes and shapes decide every verdict, and the fingerprints
        #: of the arguments (and of arguments with results) that passed
        self.by_type = all(_by_type(hints[name]) for name in hints)
        self.passed: set[tuple] = set()

    @classmethod
    def later(cls, fn: Callable) -> Callable[[], _QuickCheck | _FullCheck]:
        """The check of ``fn``, read at its first call (its annotations may name what
        its module defines after it)."""

        @functools.cache
        def read() -> _QuickCheck | _FullCheck:
            try:
                return cls(fn)
            except _Unreadable:
                return _FULL

        return read

    def run(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        """``fn``'s result if the arguments and the result pass, else ``_REJECTED``
        (or, for a result that does not fit, the result in a ``_WrongResult``).

        A verdict depends only on what :func:`_fingerprint` keeps of the checked
        values (types, dtypes, shapes) when every hint is decided by them, as arrays
        and classes are: a call like one that passed (the same fingerprints) passes
        without being checked again.
        """
        key = self.key(args, kwargs)
        axes = None
        if not self._known(key):
            axes = self.arguments(args, kwargs)
            if axes is None:
                return _REJECTED
            self._remember(key)
        result = fn(*args, **kwargs)
        outcome = None if key is None else _fingerprint_of(result)
        outcome = None if outcome is None else (key, outcome)
        if self._known(outcome):
            return result
        if axes is None:  # arguments seen before: their sizes again, for the result
            axes = self.arguments(args, kwargs)
        if axes is None:
            return _REJECTED
        if not self.fits(result, axes):
            return _WrongResult(result)  # kept for the one-line summary
        self._remember(outcome)
        return result

    def key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The fingerprint of the arguments the verdict depends on, or None where it
        may depend on more (a hint that beartype decides from the value, a value
        whose contents a fingerprint does not show)."""
        if not self.by_type:
            return None
        given = [len(args), *kwargs]
        given += [_fingerprint_of(value) for _, value in self._values(args, kwargs)]
        return None if None in given else tuple(given)

    def _values(self, args: tuple, kwargs: dict) -> Iterator[tuple[_Check, Any]]:
        """Each annotated parameter's check and value (``_MISSING``: its default)."""
        for position, name, check in self.checks:
            if position == _REST:
                yield check, args[len(self.positional) :]
            elif position is not None and position < len(args):
                yield check, args[position]
            else:
                yield check, kwargs.get(name, _MISSING)

    def _known(self, verdict: tuple | None) -> bool:
        try:
            return verdict is not None and verdict in self.passed
        except TypeError:  # a size that cannot be hashed (a symbolic one)
            return False

    def _remember(self, verdict: tuple | None) -> None:
        if verdict is None:
            return
        if len(self.passed) >= _REMEMBERED:  # shapes that keep changing: start over
            self.passed.clear()
        with contextlib.suppress(TypeError):
            self.passed.add(verdict)

    def arguments(self, args: tuple, kwargs: dict) -> _Axes | None:
        """The axis sizes the arguments bind, or None where the full check decides."""
        if len(args) > len(self.positional) and not self.more_positions:
            return None  # too many: the full check raises the binding's error
        for name in kwargs:
            if name in self.positional[: len(args)] or (
                name not in self.names and not self.more_keywords
            ):
                return None
        axes = _Axes({}, {})
        for check, value in self._values(args, kwargs):
            # left to its default (unchecked), or missing: Python says
            if value is not _MISSING and not check(value, axes):
                return None
        return axes

    def fits(self, value: Any, axes: _Axes) -> bool:
        """Whether the result fits the return annotation with ``axes`` bound."""
        return self.returns is None or self.returns(value, axes)


# --8<-- [end:quick]


class _FullCheck:
    """A function the quick check cannot read: every call goes to the full check (so
    it needs no ``fits``)."""

    def run(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        return _REJECTED


class _Unreadable(Exception):
    """An annotation beyond the quick check."""


class _Axes(NamedTuple):
    """The sizes a call has bound: jaxtyping's two tables."""

    single: dict[str, int]
    variadic: dict[str, tuple[bool, tuple[int, ...]]]


_FULL = _FullCheck()
_REJECTED = object()  # what the quick check cannot pass: the full check decides


class _WrongResult(NamedTuple):
    """A result the quick check rejected, for the summary of the full check's error."""

    value: Any


class _Default:
    """An argument left to its default (in a fingerprint)."""

    def __repr__(self) -> str:
        return "default"


_MISSING = _Default()
_REMEMBERED = 256  # verdicts kept per function
_REST = -1  # the position of *args
_P = inspect.Parameter
_STARRED = (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_Check = Callable[[Any, _Axes], bool]


def _each(check: _Check, values: tuple, axes: _Axes) -> bool:
    return all(check(value, axes) for value in values)


def _hints(fn: Callable) -> dict[str, Any] | None:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a name that does not resolve: beartype's problem, not ours
        return None


def _is_array(hint: Any) -> bool:
    return (
        AbstractArray is not None
        and isinstance(hint, type)
        and issubclass(hint, AbstractArray)
    )


def _mentions_array(hint: Any) -> bool:
    return _is_array(hint) or any(_mentions_array(a) for a in typing.get_args(hint))


def _check_of(hint: Any) -> _Check:
    """The check of one annotation: an array; a union, tuple, list or mapping with
    arrays in it; or a hint with no array in it (beartype's own verdict)."""
    if _is_union(hint):
        return _UnionCheck(typing.get_args(hint))
    if _is_array(hint):
        return _ArrayCheck(hint)
    if not _mentions_array(hint):
        return _plain_check(hint)
    origin, items = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and Ellipsis not in items:  # several results
        checks = [_check_of(item) for item in items]
        return lambda value, axes: (
            isinstance(value, tuple)
            and len(value) == len(checks)
            and all(check(v, axes) for check, v in zip(checks, value, strict=False))
        )
    if origin in (tuple, list, abc.Sequence):  # every item (beartype draws one)
        check = _check_of(items[0])
        return lambda value, axes: (
            isinstance(value, origin) and all(check(item, axes) for item in value)
        )
    if origin in (dict, abc.Mapping):  # every entry (beartype draws one)
        key, entry = _plain_check(items[0]), _check_of(items[1])
        return lambda value, axes: (
            isinstance(value, origin)
            and all(key(k, axes) and entry(v, axes) for k, v in value.items())
        )
    if origin is abc.Iterator:  # beartype cannot look inside without consuming it
        return lambda value, axes: isinstance(value, origin)
    raise _Unreadable  # Annotated, Iterable (beartype checks an item of a list)...


def _by_type(hint: Any) -> bool:
    """Whether the quick check decides ``hint`` from types, dtypes and shapes alone:
    tensors' arrays, classes, and unions and containers of them (not a value that
    beartype's ``is_bearable`` reads, nor a protocol, whose ``isinstance`` reads the
    value's attributes)."""
    if _is_array(hint):
        return hint.array_type is torch.Tensor
    if hint in (Any, object, None, type(None)):
        return True
    if _is_union(hint):
        return all(_by_type(member) for member in typing.get_args(hint))
    if not _mentions_array(hint):  # isinstance for a class, else is_bearable
        origin = typing.get_origin(hint)
        if origin is abc.Callable:  # beartype checks it by callable(): by the type
            return True
        protocol = getattr(hint, "_is_protocol", False)
        return isinstance(hint, type) and origin is None and not protocol
    items = [item for item in typing.get_args(hint) if item is not Ellipsis]
    return all(_by_type(item) for item in items)  # the containers _check_of reads


class _Unprintable(Exception):
    """A value whose fingerprint would not show all that its check reads."""


def _fingerprint(value: Any, depth: int = 0) -> Any:
    """What a check by type, dtype and shape sees of ``value``: a tensor's type, dtype
    and shape; the type and the items' fingerprints of a tuple, list or dict (the
    keys by type), up to a few levels and 64 items; another value's type. Raises
    :class:`_Unprintable` for other collections, whose items a check may read."""
    if isinstance(value, torch.Tensor):
        return type(value), value.dtype, value.shape
    if isinstance(value, tuple | list | dict):
        if depth > 3 or len(value) > 64:
            raise _Unprintable
        if isinstance(value, dict):
            items = [(type(k), _fingerprint(v, depth + 1)) for k, v in value.items()]
        else:
            items = [_fingerprint(item, depth + 1) for item in value]
        return type(value), *items
    if isinstance(value, abc.Iterable) and not isinstance(value, str | bytes):
        raise _Unprintable
    return value if value is _MISSING else type(value)


def _fingerprint_of(value: Any) -> Any:
    """:func:`_fingerprint`, or None where there is none (a nested tensor has no
    shape)."""
    try:
        return _fingerprint(value)
    except (_Unprintable, RuntimeError):
        return None


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


class _UnionCheck:
    """``A | B | None``: None, then the array members for a tensor (alike but for their
    dtypes), the one member with arrays inside for a value of its container's type,
    then the plain members (``Tensor``)."""

    def __init__(self, members: tuple[Any, ...]) -> None:
        self.none = type(None) in members
        arrays = [m for m in members if _is_array(m)]
        inside = [m for m in members if not _is_array(m) and _mentions_array(m)]
        plain = [m for m in members if not _mentions_array(m) and m is not type(None)]
        if len({a.dim_str for a in arrays}) > 1 or len(inside) > 1:
            raise _Unreadable  # which member binds the axes would matter
        self.arrays = [_ArrayCheck(a) for a in arrays]
        self.inside = _check_of(inside[0]) if inside else None
        self.container = typing.get_origin(inside[0]) if inside else None
        union = functools.reduce(operator.or_, plain) if plain else None
        self.plain = None if union is None else _plain_check(union)

    def __call__(self, value: Any, axes: _Axes) -> bool:
        if value is None and self.none:
            return True
        if self.arrays and isinstance(value, torch.Tensor):
            if self.plain is None:
                return any(array(value, axes) for array in self.arrays)
            before = _Axes(dict(axes.single), dict(axes.variadic))
            if any(array(value, axes) for array in self.arrays):
                return True
            axes.single.clear(), axes.variadic.clear()  # what the arrays bound: gone
            axes.single.update(before.single), axes.variadic.update(before.variadic)
        if self.inside is not None and isinstance(value, self.container):
            return self.inside(value, axes)
        return self.plain is not None and self.plain(value, axes)


# PEP 484's tower, as beartype applies it (the conf above)
_TOWER = {float: (float, int), complex: (complex, float, int)}


def _plain_check(hint: Any) -> _Check:
    """A hint with no array in it: an ``isinstance`` for classes (and unions of them),
    beartype's ``is_bearable`` for anything else."""
    members = typing.get_args(hint) if _is_union(hint) else (hint,)
    members = tuple(type(None) if m is None else m for m in members)
    if Any in members or object in members:
        return lambda value, axes: True
    if all(isinstance(m, type) and typing.get_origin(m) is None for m in members):
        classes = tuple(c for m in members for c in _TOWER.get(m, (m,)))
        return lambda value, axes: isinstance(value, classes)
    return lambda value, axes: is_bearable(value, hint, conf=_CONF)


# --8<-- [start:array_check]
class _ArrayCheck:
    """``Float[Tensor, "*batch seq key"]``: its dtype, then its axes by jaxtyping's
    rule (``_check_shape`` in ``jaxtyping._array_types``), against the call's table of
    sizes.

    The rule is written out here for the common case, which it decides in a fraction
    of jaxtyping's time: each named axis bound once (``#name`` of size 1 passes), each
    number equal, a variadic ``*batch`` bound the first time and equal to it after;
    ``*#batch`` may differ where the two broadcast, jaxtyping then recording the
    broadcast shape.
    """

    def __init__(self, array: type) -> None:
        if array.array_type is Any or not isinstance(array.array_type, type):
            raise _Unreadable  # Float[Any, ...]: anything with a shape and a dtype
        self.array, self.rank = array, len(array.dims)
        self.split = array.index_variadic  # where *batch or ... sits, if anywhere
        #: (position, name or None for a number, size, may broadcast) of each axis
        #: that is not variadic or anonymous; positions after *batch count from the end
        self.axes: list[tuple[int, str | None, int, bool]] = []
        self.variadic: tuple[str, bool] | None = None
        for index, axis in enumerate(array.dims):
            if axis is _anonymous_dim or axis is _anonymous_variadic_dim:
                continue
            if not isinstance(axis, _NamedDim | _NamedVariadicDim | _FixedDim):
                raise _Unreadable  # an expression of other axes
            if getattr(axis, "treepath", None):
                raise _Unreadable  # axes bound per tree path
            if isinstance(axis, _NamedVariadicDim):
                self.variadic = (axis.name, axis.broadcastable)
                continue
            after = self.split is not None and index > self.split
            position = index - self.rank if after else index
            name, size = (None, axis.size) if isinstance(axis, _FixedDim) else (
                axis.name, 0)  # fmt: skip
            self.axes.append((position, name, size, axis.broadcastable))
        self.dtypes: dict[torch.dtype, bool] = {}

    def __call__(self, value: Any, axes: _Axes) -> bool:
        if not isinstance(value, self.array.array_type):
            return False
        fits = self.dtypes.get(value.dtype)
        if fits is None:
            fits = self.dtypes[value.dtype] = self._dtype_fits(value.dtype)
        shape = value.shape
        if not fits or len(shape) < self.rank - (self.split is not None):
            return False
        if self.split is None and len(shape) != self.rank:
            return False
        single = axes.single
        for position, name, size, broadcastable in self.axes:
            got = shape[position]
            if broadcastable and got == 1:
                continue
            if got != (size if name is None else single.setdefault(name, got)):
                return False
        if self.variadic is None:
            return True
        name, broadcastable = self.variadic
        part = tuple(shape[self.split : len(shape) - (self.rank - self.split - 1)])
        bound = axes.variadic.get(name)
        if bound is None:
            axes.variadic[name] = (broadcastable, part)
            return True
        was_broadcastable, before = bound
        if part == before:  # the common case: the same batch axes again
            if was_broadcastable:
                axes.variadic[name] = (broadcastable, part)  # as jaxtyping records it
            return True
        if not (was_broadcastable or broadcastable):
            return False
        joint = _broadcast(part, before)
        if was_broadcastable:  # *#batch before: the joint shape, which *batch must be
            if joint is None or (not broadcastable and joint != part):
                return False
            axes.variadic[name] = (broadcastable, joint)
            return True
        return joint == before  # *batch before: *#batch must broadcast to it

    def _dtype_fits(self, dtype: torch.dtype) -> bool:
        """jaxtyping's dtype rule: the dtype's name (``float32``) among the hint's."""
        if self.array.dtypes is _any_dtype:
            return True
        name = repr(dtype).rsplit(".", 1)[-1]
        return any(
            name == wanted if isinstance(wanted, str) else bool(wanted.match(name))
            for wanted in self.array.dtypes
        )


def _broadcast(
    first: tuple[int, ...], second: tuple[int, ...]
) -> tuple[int, ...] | None:
    """The shape both broadcast to (NumPy's rule, as jaxtyping uses), or None."""
    joint = []
    for a, b in itertools.zip_longest(reversed(first), reversed(second), fillvalue=1):
        if a != b and 1 not in (a, b):
            return None
        joint.append(b if a == 1 else a)
    return tuple(reversed(joint))


# --8<-- [end:array_check]


def _fits(table: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether ``other`` broadcasts into ``table`` as it is: an in-place update cannot
    grow ``table`` to axes that ``other`` has more of. (In Python: on the CPU
    ``torch.broadcast_shapes`` costs about 30 µs a call.)"""
    return _broadcast(table.shape, other.shape) == table.shape


def _records_gradient(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd records a call on ``tensors``: gradients are enabled and one
    of them wants one (then a result autograd may need must not be written over)."""
    if not torch.is_grad_enabled():  # decoding, evaluation: the common early exit
        return False
    return any(tensor is not None and tensor.requires_grad for tensor in tensors)


def _autocast(device: torch.device) -> bool:
    """Whether autocast is on for ``device`` (never for a device it does not know,
    such as ``meta``): it does not cast a result given ``out=``, so a result written
    into a table of one's own would escape it."""
    try:
        return torch.is_autocast_enabled(device.type)
    except RuntimeError:
        return False


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


def _about_result(error: TypeCheckError) -> bool:
    return "checking the return value" in str(error)


_Annotated = tuple[str, torch.Tensor, str, list[str]]  # label, value, kind, axes


def _arguments(fn: Callable, args: tuple, kwargs: dict) -> list[_Annotated] | None:
    """The annotated tensor arguments, a module's weights (parameters) first: they
    are right, and the input that disagrees with one is named."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return None
    annotated = []
    for name, value in bound.arguments.items():
        hint = str(fn.__annotations__.get(name, ""))
        match = _ANNOTATION.search(hint)
        if match and isinstance(value, torch.Tensor):
            annotated.append((f"argument '{name}'", value, match[1], match[2].split()))
        elif match and hint.strip() == f"{match[0]}]":  # a tensor, and nothing else
            annotated.insert(0, (f"argument '{name}'", value, match[1], []))
    annotated.sort(key=lambda item: not isinstance(item[1], torch.nn.Parameter))
    return annotated


def _conflict(annotated: list[_Annotated], seen: dict) -> str | None:
    """The first tensor of ``annotated`` whose dtype or axes disagree, in words."""
    for label, value, kind, dims in annotated:
        if not isinstance(value, torch.Tensor):
            return f"{label} is {type(value).__name__} {value!r:.40}, not a tensor"
        if not _KINDS.get(kind, lambda t: True)(value):
            return f"{label} has dtype {value.dtype}, not {kind}"
        problem = _bind(label, tuple(value.shape), dims, seen)
        if problem:
            return problem
    return None


def _summary(fn: Callable, args: tuple, kwargs: dict) -> str | None:
    """One line naming the conflict of a failed check of ``fn``'s arguments.

    Reads the arguments in order, as the check does: the first argument to use an axis
    sets its size, and the first that disagrees is named with the one it disagrees
    with. A module's weights (parameters) are read first, so a wrong input is blamed,
    not the weight it meets.
    """
    annotated = _arguments(fn, args, kwargs)
    return None if annotated is None else _conflict(annotated, {})


def _result_summary(
    fn: Callable, args: tuple, kwargs: dict, result: Any
) -> str | None:
    """One line naming the conflict of ``fn``'s result with the axes its arguments
    bound: ``axis 'seq' is 5 in argument 'keys' but 3 in the return value``.

    The tensors of the return annotation are read in order: one for a tensor
    result, as many in a row as a tuple result has items (the first such row that
    does not fit is named). None where no reading explains the rejection."""
    annotated = _arguments(fn, args, kwargs)
    seen: dict = {}
    if annotated is None or _conflict(annotated, seen) is not None:
        return None
    returned = _ANNOTATION.findall(str(fn.__annotations__.get("return", "")))
    items = result if isinstance(result, tuple) else (result,)
    labels = (
        [f"item {i} of the return value" for i in range(len(items))]
        if isinstance(result, tuple)
        else ["the return value"]
    )
    first = None
    for start in range(len(returned) - len(items) + 1):
        reading = [
            (label, value, kind, axes.split())
            for label, value, (kind, axes) in zip(
                labels, items, returned[start : start + len(items)], strict=True
            )
            if isinstance(value, torch.Tensor)
        ]
        problem = _conflict(reading, dict(seen))
        if problem is None:
            return None  # a reading that fits: the rejection is not about axes
        first = first or problem
    return first


def _bind(
    label: str, shape: tuple[int, ...], dims: list[str], seen: dict[str, tuple]
) -> str | None:
    """Bind the named axes of one tensor (``label``: ``argument 'keys'``); the first
    conflict, in words. ``*batch`` binds the sizes it covers as one."""
    variadic = [i for i, d in enumerate(dims) if d.startswith(("*", "#*"))]
    fixed = len(dims) - len(variadic)
    if len(shape) < fixed or (not variadic and len(shape) != fixed):
        wanted = f"{fixed} or more" if variadic else str(fixed)
        axes = "axis" if len(shape) == 1 else "axes"
        return (f"{label} has {len(shape)} {axes} {shape}, but "
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
                return (f"axis '{axis}' is {first} in {where} but {size} "
                        f"in {label}")  # fmt: skip
        seen.setdefault(axis, (size, label))
    if variadic and dims[split][1:].isidentifier():  # *batch, not *#batch or ...
        sizes, star = shape[split : len(shape) - after], dims[split]
        if star in seen and seen[star][0] != sizes:
            first, where = seen[star]
            return (f"axes '{star}' are {first} in {where} but {sizes} "
                    f"in {label}")  # fmt: skip
        seen.setdefault(star, (sizes, label))
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
