"""The quick shape check gives jaxtyping's and beartype's verdict, faster.

``checked`` first runs :class:`~named_transformer.axes._QuickCheck`, its own reading of
the annotations; a call it rejects goes through ``jaxtyped(typechecker=beartype)``.
These tests draw annotations, shapes and dtypes at random and require the two verdicts
to agree, argument by argument and for the result, and require every checked function
in the package to be readable by the quick check (so that a jaxtyping that moves what
it reads is noticed here, not as a slowdown).
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import pkgutil
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Protocol, runtime_checkable

import numpy as np
import pytest
import torch
from beartype import beartype
from beartype.vale import Is
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import Bool, Float, Int, Shaped, TypeCheckError, jaxtyped
from torch import Tensor

import named_transformer
import named_transformer as nt
from named_transformer.axes import (
    _CONF,
    _REJECTED,
    _REMEMBERED,
    _broadcast,
    _FullCheck,
    _QuickCheck,
    checked,
)

KINDS = {"Float": Float, "Int": Int, "Bool": Bool, "Shaped": Shaped}
DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool]


@st.composite
def annotation(draw) -> tuple[str, str]:
    """A dtype kind and an axes string of the grammar the package uses: names (some
    broadcastable), numbers, ``_``, and at most one ``*name``, ``*#name`` or ``...``."""
    axes = draw(
        st.lists(
            st.sampled_from(["a", "b", "c", "#a", "#b", "1", "2", "_"]),
            max_size=3,
        )
    )
    variadic = draw(st.sampled_from([None, "*batch", "*#batch", "..."]))
    if variadic is not None:
        axes.insert(draw(st.integers(0, len(axes))), variadic)
    return draw(st.sampled_from(sorted(KINDS))), " ".join(axes)


@st.composite
def tensor(draw) -> torch.Tensor | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    shape = draw(st.lists(st.sampled_from([0, 1, 2, 3, 3]), max_size=5))
    return torch.zeros(shape, dtype=draw(st.sampled_from(DTYPES)))


def hint(kind: str, axes: str, optional: bool):
    array = KINDS[kind][torch.Tensor, axes]
    return array | None if optional else array


def function_of(hints: list, result) -> object:
    """``f(x0, x1, x2, out)`` returning ``out``, with ``hints`` on x0..x2 and
    ``result`` on its return."""

    def f(x0, x1, x2, out):
        return out

    f.__annotations__ = {"x0": hints[0], "x1": hints[1], "x2": hints[2]}
    f.__annotations__["return"] = result
    return f


def full_verdict(fn, *args) -> bool:
    try:
        jaxtyped(typechecker=beartype(conf=_CONF))(fn)(*args)
    except TypeCheckError:
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(annotation(), st.booleans(), tensor()), min_size=4, max_size=4)
)
def test_the_quick_verdict_is_jaxtypings(drawn):
    """Arguments and result together: the quick check accepts exactly what
    jaxtyping with beartype accepts; and ``checked`` raises exactly when they do."""
    hints = [hint(kind, axes, optional) for (kind, axes), optional, _ in drawn]
    args = [value for _, _, value in drawn]
    fn = function_of(hints[:3], hints[3])
    quick = _QuickCheck(fn)
    axes = quick.arguments(tuple(args), {})
    quick_accepts = axes is not None and quick.fits(args[3], axes)
    expected = full_verdict(fn, *args)
    assert quick_accepts == expected
    try:
        checked(fn)(*args)
    except TypeCheckError:
        assert not expected
    else:
        assert expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(annotation(), tensor()), min_size=3, max_size=3))
def test_the_quick_verdict_on_arguments_alone(drawn):
    """With no return annotation the verdict is the arguments' alone."""
    hints = [KINDS[kind][torch.Tensor, axes] for (kind, axes), _ in drawn]
    args = [value for _, value in drawn]

    def f(x0, x1, x2):
        return None

    f.__annotations__ = {"x0": hints[0], "x1": hints[1], "x2": hints[2]}
    quick = _QuickCheck(f)
    accepted = quick.arguments(tuple(args), {}) is not None
    assert accepted == full_verdict(f, *args)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(annotation(), st.booleans()), min_size=4, max_size=4),
    st.lists(st.lists(tensor(), min_size=4, max_size=4), min_size=1, max_size=5),
)
def test_a_remembered_verdict_is_jaxtypings(drawn, calls):
    """One checked function called again and again, each call twice: a call like an
    earlier one (the same types, dtypes and shapes) takes the remembered verdict,
    which must still be jaxtyping's with beartype's."""
    hints = [hint(kind, axes, optional) for (kind, axes), optional in drawn]
    fn = function_of(hints[:3], hints[3])
    remembering = checked(fn)
    assert remembering.quick_check().by_type
    for args in calls + calls:
        expected = full_verdict(fn, *args)
        try:
            remembering(*args)
        except TypeCheckError:
            assert not expected
        else:
            assert expected


def test_a_remembered_call_is_not_checked_again_but_a_new_result_is():
    @checked
    def first(x: Float[Tensor, " n"], k: int) -> Float[Tensor, " n"]:
        return x[:k]

    quick, x = first.quick_check(), torch.zeros(3)
    first(x, 3)
    read = []
    original = quick.arguments
    quick.arguments = lambda *args: read.append(args) or original(*args)
    first(x, 3)
    assert read == []  # from memory
    with pytest.raises(TypeCheckError, match="return value"):
        first(x, 2)  # arguments like the first call's, a result never seen
    assert len(read) == 1


def test_values_that_beartype_reads_are_never_remembered():
    @checked
    def positive(x: Float[Tensor, " n"], k: Annotated[int, Is[lambda k: k > 0]]):
        return x

    assert not positive.quick_check().by_type
    positive(torch.ones(3), 2)
    with pytest.raises(TypeCheckError):
        positive(torch.ones(3), -2)


def test_a_callable_is_remembered_by_its_type():
    """beartype checks ``Callable[...]`` with ``callable()``, which the value's type
    decides: remembered, and a value that is not callable still rejected."""

    @checked
    def apply(x: Float[Tensor, " n"], f: Callable[[Tensor], Tensor]):
        return f(x)

    quick = apply.quick_check()
    assert quick.by_type
    apply(torch.ones(3), torch.relu)
    read = []
    original = quick.arguments
    quick.arguments = lambda *args: read.append(args) or original(*args)
    apply(torch.ones(3), torch.sigmoid)  # another function: the same fingerprint
    assert read == []
    with pytest.raises(TypeCheckError):
        apply(torch.ones(3), 3)


class _Entries(Mapping):
    """A mapping that is not a dict: its fingerprint would not show its entries."""

    def __init__(self, **entries):
        self.entries = entries

    def __getitem__(self, key):
        return self.entries[key]

    def __iter__(self):
        return iter(self.entries)

    def __len__(self):
        return len(self.entries)


@runtime_checkable
class _Sized(Protocol):
    size: int


def test_what_a_fingerprint_cannot_show_is_checked_every_time():
    """A mapping that is not a dict, a dict's keys (by type), a protocol (its
    isinstance reads attributes), an array type other than a tensor, a nested
    tensor: no verdict is remembered that a later call could wrongly share."""

    @checked
    def entries(xs: Mapping[str, Float[Tensor, " n"]], y: Float[Tensor, " n"]):
        return y

    three, four = torch.zeros(3), torch.zeros(4)
    entries(_Entries(a=three), three)
    with pytest.raises(TypeCheckError):
        entries(_Entries(a=four), three)

    @checked
    def keyed(xs: dict[int, Float[Tensor, " n"]]):
        return xs

    keyed({1: three})
    with pytest.raises(TypeCheckError):
        keyed({1.5: three})

    def sized(x: _Sized):
        return x

    def numpy_array(x: Float[np.ndarray, " n"]):
        return x

    for fn in (sized, numpy_array):
        assert not checked(fn).quick_check().by_type, fn.__name__

    @checked
    def flat(x: Tensor) -> Tensor:
        return x

    jagged = torch.nested.nested_tensor([three, four], layout=torch.jagged)
    for _ in range(2):
        assert flat(jagged) is jagged


def test_remembered_lists_are_remembered_item_by_item():
    """A list like a remembered one but for one item is checked again, and rejected
    by the quick check (the full check then decides: beartype draws one item)."""

    @checked
    def listed(xs: list[Float[Tensor, " n"]], y: Float[Tensor, " n"]):
        return y

    three, four = torch.zeros(3), torch.zeros(4)
    listed([three, three], three)
    listed([three, three], three)
    quick = listed.quick_check()
    assert quick.run(listed.__wrapped__, ([three, four], three), {}) is _REJECTED


def test_remembered_verdicts_are_bounded():
    @checked
    def same(x: Float[Tensor, " n"]) -> Float[Tensor, " n"]:
        return x

    for n in range(2 * _REMEMBERED):
        same(torch.zeros(n))
    assert 0 < len(same.quick_check().passed) <= _REMEMBERED


def test_broadcast_shapes_as_numpy_does():
    """``*#batch`` records the shape its sizes broadcast to: NumPy's rule, which
    jaxtyping calls."""
    shapes = [s for n in range(4) for s in itertools.product([0, 1, 2, 3], repeat=n)]
    for first, second in itertools.product(shapes, repeat=2):
        try:
            expected = tuple(int(n) for n in np.broadcast_shapes(first, second))
        except ValueError:
            expected = None
        assert _broadcast(first, second) == expected, (first, second)


def test_keywords_defaults_and_plain_hints():
    """Arguments by keyword, a default left out, a float given an int (PEP 484's
    tower), a union with a plain class, a tuple of results."""

    def f(
        x: Float[torch.Tensor, "*batch a"],
        scale: float = 1.0,
        extra: Any = None,
        *,
        offset: int | Int[torch.Tensor, " 1"] = 0,
        mask: Bool[torch.Tensor, "*#batch a"] | None = None,
    ) -> tuple[Float[torch.Tensor, "*batch a"], Float[torch.Tensor, " a"]]:
        return x, x[(0,) * (x.ndim - 1)]

    quick = _QuickCheck(f)
    x = torch.zeros(2, 3, 4)
    cases = [
        ((x,), {}),
        ((x, 2), {"offset": torch.tensor([1])}),
        ((x,), {"scale": 0.5, "mask": torch.ones(1, 3, 4, dtype=torch.bool)}),
        ((x, 1.0, object()), {}),
        ((x,), {"mask": torch.ones(3, 5, dtype=torch.bool)}),  # a: 5, not 4
        ((x, "2"), {}),  # a string for a float
        ((x,), {"offset": torch.tensor([1, 2])}),  # two entries, not one
    ]
    for args, kwargs in cases:
        axes = quick.arguments(args, kwargs)
        accepted = axes is not None and quick.fits(f(*args, **kwargs), axes)
        try:
            jaxtyped(typechecker=beartype(conf=_CONF))(f)(*args, **kwargs)
        except TypeCheckError:
            assert not accepted, (args, kwargs)
        else:
            assert accepted, (args, kwargs)


def test_hints_beyond_the_quick_check_get_the_full_verdict():
    """``Annotated`` validators, an ``Iterable`` of tensors (beartype checks an item of
    a list), ``Float[Any, ...]``, a union with ``Tensor``: the same verdict as the
    full check, and the function runs once."""
    calls = []

    def positive(x: Float[torch.Tensor, " n"], k: Annotated[int, Is[lambda k: k > 0]]):
        return x

    def items(xs: Iterable[Float[torch.Tensor, " n"]]) -> int:
        return len(list(xs))

    def anything(x: Float[Any, " n"]) -> Float[Any, " n"]:
        return x

    def either(x: Float[torch.Tensor, " n"]) -> Float[torch.Tensor, " n"] | Tensor:
        calls.append(x)
        return torch.zeros(4)

    cases = [
        (positive, (torch.ones(3), -2)),
        (positive, (torch.ones(3), 2)),
        (items, ([torch.ones(3, dtype=torch.int64)],)),
        (items, ([torch.ones(3)],)),
        (anything, (torch.zeros(2),)),
        (either, (torch.zeros(3),)),
    ]
    for fn, args in cases:
        try:
            checked(fn)(*args)
        except TypeCheckError:
            assert not full_verdict(fn, *args), fn.__name__
        else:
            assert full_verdict(fn, *args), fn.__name__
    assert len(calls) == 2  # once through checked, once through the full check


def test_containers_are_checked_item_by_item_and_some_hints_take_the_full_check():
    """The docstring's promises: every item of a list (beartype checks one it draws),
    and the full check for annotated ``**kwargs`` and names that do not resolve."""

    def listed(xs: list[Float[torch.Tensor, " n"]], y: Float[torch.Tensor, " n"]):
        return y

    quick = _QuickCheck(listed)
    three, four = torch.zeros(3), torch.zeros(4)
    assert quick.arguments(([three, three], three), {}) is not None
    assert quick.arguments(([three, four], three), {}) is None  # the second item
    assert quick.arguments(([three], four), {}) is None  # n bound by the list

    def keywords(x: Float[torch.Tensor, " n"], **rest: int):
        return x

    def unresolved(x: NotDefinedAnywhere):  # noqa: F821
        return x

    for fn in (keywords, unresolved):
        assert isinstance(checked(fn).quick_check(), _FullCheck), fn.__name__


def test_a_wrong_result_is_named():
    @checked
    def wrong(x: Float[torch.Tensor, "a b"]) -> Float[torch.Tensor, "b a"]:
        return x

    assert wrong(torch.zeros(2, 2)).shape == (2, 2)  # right by size, as in jaxtyping
    with pytest.raises(TypeCheckError, match="return value of .*wrong") as caught:
        wrong(torch.zeros(2, 3))
    assert "Expected type: Float[Tensor, 'b a']" in str(caught.value)  # jaxtyping's


def test_a_wrong_argument_still_gets_the_full_message():
    with pytest.raises(TypeCheckError) as caught:
        nt.attention(torch.randn(3, 4), torch.randn(5, 6), torch.randn(5, 2))
    first = str(caught.value).splitlines()[0]
    assert first == "axis 'key' is 4 in argument 'queries' but 6 in argument 'keys'"


def _checked_in_package():
    """Every ``checked`` function and method of the package, by name."""
    found = {}
    for info in pkgutil.walk_packages(named_transformer.__path__, "named_transformer."):
        if info.name.endswith("__main__"):  # the command line, which runs on import
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            members = [(name, value)]
            if inspect.isclass(value) and value.__module__ == module.__name__:
                members += [(f"{name}.{k}", v) for k, v in vars(value).items()]
            for label, member in members:
                if hasattr(member, "quick_check"):
                    found[f"{module.__name__}.{label}"] = member
    return found


def test_every_checked_function_in_the_package_is_read_by_the_quick_check():
    found = _checked_in_package()
    assert len(found) > 100
    unread = [
        name for name, fn in found.items() if isinstance(fn.quick_check(), _FullCheck)
    ]
    assert unread == []
