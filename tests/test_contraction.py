"""The library's ``einsum`` (a remembered plan around one ``torch.matmul``) equals
``einops.einsum`` on random two-operand patterns: values and gradients, float64.

Patterns are drawn with every role an axis can take (batch: in both operands and the
output; contracted: in both, not the output; free: in one operand and the output), in
any order, with ``...`` on either side and size-1 axes that broadcast.
"""

import dataclasses
import warnings

import einops
import pytest
import torch
from hypothesis import event, given, settings
from hypothesis import strategies as st

from named_transformer import contraction
from named_transformer.contraction import _plan, einsum

NAMES = ["a", "b", "c", "d", "e", "f"]


def _insert(draw, side: list[str], name: str) -> list[str]:
    at = draw(st.integers(0, len(side)))
    return [*side[:at], name, *side[at:]]


@st.composite
def contractions(draw):
    """A pattern, and two float64 operands that fit it (gradients wanted).

    A batch or contracted axis may be of size 1 in one operand (it broadcasts); ``...``
    may stand in either operand or both, anywhere in a side, with fewer dimensions (or
    size-1 ones) in one operand, and may be summed away when both have it.
    """
    names = draw(st.permutations(NAMES))
    roles = draw(st.lists(st.sampled_from("BCFG"), min_size=1, max_size=5))
    first, second, out = [], [], []
    first_size, second_size = {}, {}
    for name, role in zip(names, roles, strict=False):
        size = draw(st.integers(1, 4))
        first_size[name] = second_size[name] = size
        if role in "BC" and draw(st.integers(0, 4)) == 0:  # broadcast a size-1 axis
            (first_size if draw(st.booleans()) else second_size)[name] = 1
        if role in "BCF":
            first.append(name)
        if role in "BCG":
            second.append(name)
        if role in "BFG":
            out.append(name)
    first, second, out = (draw(st.permutations(side)) for side in (first, second, out))
    first_shape = [first_size[n] for n in first]
    second_shape = [second_size[n] for n in second]
    dots = draw(st.sampled_from(["none", "first", "second", "both"]))
    if dots != "none":
        longer = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
        kept = draw(st.integers(0, len(longer)))
        ones = draw(st.lists(st.booleans(), min_size=kept, max_size=kept))
        shorter = [1 if one else n for one, n in zip(ones, longer[len(longer) - kept :],
                                                     strict=True)]  # fmt: skip
        if draw(st.booleans()):
            longer, shorter = shorter, longer
        summed = dots == "both" and draw(st.integers(0, 3)) == 0
        if not summed:
            out = _insert(draw, out, "...")
        if dots in ("first", "both"):
            first = _insert(draw, first, "...")
            at = first.index("...")
            first_shape[at:at] = longer
        if dots in ("second", "both"):
            second = _insert(draw, second, "...")
            at = second.index("...")
            second_shape[at:at] = shorter if dots == "both" else longer
    pattern = f"{' '.join(first)}, {' '.join(second)} -> {' '.join(out)}"
    operands = [
        torch.randn(shape, dtype=torch.float64, requires_grad=True)
        for shape in (first_shape, second_shape)
    ]
    return pattern, operands


@settings(max_examples=300)
@given(contractions())
def test_equals_einops_values_and_gradients(case):
    """Through ``einsum``, and, for a plan that lifts, both of its ways called
    directly (``einsum`` would hide a way that raises by going to einops): each
    raises only where the plain plan does, for a size-1 contracted axis that einops
    broadcasts."""
    pattern, (first, second) = case
    theirs = einops.einsum(first, second, pattern)
    grad = torch.randn_like(theirs)
    expected = torch.autograd.grad(theirs, (first, second), grad)
    plan = _plan(pattern, first.ndim, second.ndim)
    ways = [lambda a, b: einsum(a, b, pattern)]
    if plan is not None and plan.linear:
        event("a projection by a weight, F.linear")
    if plan is not None and plan.lifted:
        event("a plan that lifts")
        ways += [dataclasses.replace(plan, unlifted=None), plan.unlifted]
    for way in ways:
        try:
            ours = way(first, second)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                plan.unlifted(first, second)  # the plain plan fails there too
            continue
        assert ours.shape == theirs.shape, pattern
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
        mine = torch.autograd.grad(ours, (first, second), grad)
        for got, reference in zip(mine, expected, strict=True):
            torch.testing.assert_close(got, reference, rtol=1e-12, atol=1e-12)


@settings(max_examples=200)
@given(contractions())
def test_out_receives_the_result(case):
    """With ``out`` (no gradient recorded) ``einsum`` writes the result into that
    table and returns it, equal to einops', whichever way the pattern takes: one
    product written in place, a product moved or merged afterwards, ``F.linear``, a
    lifting plan, or einops itself. Each way of a lifting plan, called directly,
    either writes its product into ``out`` or leaves ``out`` alone (``einsum`` then
    copies the product in)."""
    pattern, operands = case
    first, second = (operand.detach() for operand in operands)
    theirs = einops.einsum(first, second, pattern)
    out = torch.full_like(theirs, torch.nan)
    assert einsum(first, second, pattern, out=out) is out, pattern
    torch.testing.assert_close(out, theirs, rtol=1e-12, atol=1e-12)
    plan = _plan(pattern, first.ndim, second.ndim)
    if plan is None or not plan.lifted:
        return
    for way in (dataclasses.replace(plan, unlifted=None), plan.unlifted):
        out = torch.full_like(theirs, torch.nan)
        try:
            product = way(first, second, out)
        except RuntimeError:
            continue  # the plain plan's broadcast case, as in the test above
        torch.testing.assert_close(product, theirs, rtol=1e-12, atol=1e-12)
        assert product is out or out.isnan().all(), pattern


def test_out_is_written_by_the_product_itself(monkeypatch):
    """The contraction of a tile of scores writes its product into ``out`` directly
    (no second table copied over), for the block loop that reuses one table."""
    queries, keys = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4)
    out = torch.empty(2, 3, 5, 6)
    copies = []
    monkeypatch.setattr(contraction, "_into", lambda out, result: copies.append(
        result is not out) or result)  # fmt: skip
    einsum(queries, keys, "... seq_q key, ... seq key -> ... seq_q seq", out=out)
    assert copies == [False]
    torch.testing.assert_close(out, queries @ keys.transpose(-1, -2))


SCORES = "... seq_q key, ... seq key -> ... seq_q seq"


def test_out_refuses_a_gradient_and_a_table_that_does_not_fit():
    """As PyTorch's ``out=``: no gradient through it (one line, not a silent copy
    that autograd records); and a table of another shape or dtype than the result
    is refused in one line, whichever way the product takes (a plan that writes
    into it, one that copies, einops), and never resized by ``matmul``."""
    queries, keys = torch.randn(2, 5, 4, requires_grad=True), torch.randn(2, 6, 4)
    with pytest.raises(RuntimeError, match="records no gradient"):
        einsum(queries, keys, SCORES, out=torch.empty(2, 5, 6))
    queries = queries.detach()
    for pattern in (SCORES, "... seq_q key, ... seq key -> ... seq seq_q",
                    "b seq_q key, b seq key, b seq -> b seq_q seq"):  # fmt: skip
        operands = (queries, keys, torch.randn(2, 6))[: pattern.count(",") + 1]
        good = einsum(*operands, pattern)
        narrow = torch.empty(1, *good.shape[1:])
        with warnings.catch_warnings():  # matmul would warn as it resized the table
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="einsum's out is a"):
                einsum(*operands, pattern, out=narrow)
        assert narrow.shape == (1, *good.shape[1:])  # left as it was given
        wide = good.new_empty(good.shape, dtype=torch.float64)
        with pytest.raises(ValueError, match="of torch.float64, but the result"):
            einsum(*operands, pattern, out=wide)


def test_out_under_autocast_holds_the_autocast_product():
    """Autocast does not cast a product given ``out=``: ``einsum`` computes the
    autocast product and copies it in, so the result is what it is without ``out``
    (and a table of the uncast dtype is refused)."""
    queries, keys = torch.randn(2, 5, 4), torch.randn(2, 6, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = einsum(queries, keys, SCORES)
        out = torch.empty(2, 5, 6, dtype=torch.bfloat16)
        assert einsum(queries, keys, SCORES, out=out) is out
        with pytest.raises(ValueError, match="einsum's out"):
            einsum(queries, keys, SCORES, out=torch.empty(2, 5, 6))
    assert expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_the_plan_takes_the_package_s_patterns():
    """The contractions the modules make have a plan (einops is the exception)."""
    for pattern, ranks in [
        ("... layer, hidden layer -> ... hidden", (3, 2)),
        ("... seq layer, heads layer key -> ... heads seq key", (3, 3)),
        ("... seq_q key, ... seq key -> ... seq_q seq", (4, 4)),
        ("... heads seq_q val, heads val layer -> ... seq_q layer", (4, 3)),
    ]:
        assert _plan(pattern, *ranks) is not None, pattern
    # a weight (hidden layer) as it lies: PyTorch's linear
    assert _plan("... layer, hidden layer -> ... hidden", 3, 2).linear
    assert not _plan("... seq layer, heads layer key -> ... heads seq key", 3, 3).linear


@pytest.mark.parametrize(
    "pattern, first_shape",
    [
        ("... layer, hidden layer -> ... hidden", (2, 3, 4)),
        ("layer, hidden layer -> hidden", (4,)),
        ("seq layer, hidden layer -> seq hidden", (3, 4)),
        ("layer seq, hidden layer -> seq hidden", (4, 3)),  # permuted, then linear
        ("... layer, hidden layer -> ... hidden", (2, 3, 1)),  # 1: einops broadcasts
    ],
)
def test_a_projection_by_a_weight_equals_einops(pattern, first_shape):
    first = torch.randn(first_shape, dtype=torch.float64, requires_grad=True)
    second = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert _plan(pattern, first.ndim, second.ndim).linear
    ours, theirs = einsum(first, second, pattern), einops.einsum(first, second, pattern)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(theirs)
    for got, reference in zip(
        torch.autograd.grad(ours, (first, second), grad),
        torch.autograd.grad(theirs, (first, second), grad),
        strict=True,
    ):
        torch.testing.assert_close(got, reference, rtol=1e-12, atol=1e-12)
    if 1 not in first_shape:  # a contracted axis of another size, not 1: refused
        with pytest.raises(RuntimeError):
            einsum(first, torch.randn(5, 3, dtype=torch.float64), pattern)


def test_unequal_contracted_axes_are_refused_as_einops_refuses_them():
    """Two contracted axes of sizes (2, 3) and (3, 2) have equal products: merged,
    they would pair up wrongly. The plan checks them, and einops raises."""
    first, second = torch.randn(2, 3, 4), torch.randn(2, 3, 5)
    with pytest.raises(RuntimeError):
        einops.einsum(first, second, "a b c, b a d -> c d")
    with pytest.raises(RuntimeError):
        einsum(first, second, "a b c, b a d -> c d")


@pytest.mark.parametrize(
    "pattern, shapes",
    [
        ("a b, b c, c d -> a d", [(2, 3), (3, 4), (4, 5)]),  # three operands
        ("a b, c -> a c", [(2, 3), (4,)]),  # b summed within one operand
        ("a a, a -> a", [(3, 3), (3,)]),  # a diagonal
        ("(a b) c, c -> a b", [(6, 4), (4,)]),  # a composition
    ],
)
def test_what_the_plan_does_not_cover_goes_to_einops(pattern, shapes):
    operands = [torch.randn(shape, dtype=torch.float64) for shape in shapes]
    if len(operands) == 2:
        assert _plan(pattern, *(o.ndim for o in operands)) is None
    try:
        expected = einops.einsum(*operands, pattern)
    except Exception as error:  # einops refuses it: so do we, with its message
        with pytest.raises(type(error)):
            einsum(*operands, pattern)
        return
    torch.testing.assert_close(einsum(*operands, pattern), expected)


def test_a_compiled_graph_gets_einops(monkeypatch):
    """While torch.compile records the graph, the call goes to einops (so to
    torch.einsum, which the compiler lowers as one contraction); eager, to the plan."""
    patterns = []

    def spy(*tensors_and_pattern):
        patterns.append(tensors_and_pattern[-1])
        return einops_einsum(*tensors_and_pattern)

    einops_einsum = einops.einsum
    monkeypatch.setattr(contraction.einops, "einsum", spy)
    pattern = "... layer, hidden layer -> ... hidden"

    def project(inputs, weight):
        return einsum(inputs, weight, pattern)

    inputs, weight = torch.randn(2, 3, 4), torch.randn(5, 4)
    expected = einops_einsum(inputs, weight, pattern)
    torch.testing.assert_close(project(inputs, weight), expected)
    assert patterns == []  # eager: the plan
    compiled = torch.compile(project, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(inputs, weight), expected)
    assert patterns == [pattern]


def test_leading_free_axes_of_the_second_operand_are_read_as_they_lie():
    """``heads layer key``: the heads become batch axes the first operand broadcasts
    over, so the weight is not copied into (layer, heads·key) order, unless the first
    operand is the larger (then the plan as it was); both ways, the result and its
    gradients are einops' (also with ``...`` and more free axes after)."""
    plan = _plan("... seq layer, heads layer key -> ... heads seq key", 3, 3)
    assert plan.lifted == 1 and plan.second_order is None
    assert plan.unlifted.lifted == 0
    assert _plan("... layer, hidden layer -> ... hidden", 3, 2).lifted == 0
    cases = {
        "... seq layer, heads layer key -> ... heads seq key": [(2, 5, 4), (3, 4, 2)],
        "b s l, g h l k -> h b g s k": [(2, 5, 4), (3, 2, 4, 2)],
        "s l, h l k -> k h s": [(5, 4), (3, 4, 2)],
    }
    for pattern, shapes in cases.items():
        first, second = (
            torch.randn(shape, dtype=torch.float64, requires_grad=True)
            for shape in shapes
        )
        plan = _plan(pattern, len(shapes[0]), len(shapes[1]))
        assert plan.lifted > 0, pattern
        theirs = einops.einsum(first, second, pattern)
        grad = torch.randn_like(theirs)
        expected = torch.autograd.grad(theirs, (first, second), grad)
        for way in (dataclasses.replace(plan, unlifted=None), plan.unlifted):
            ours = way(first, second)
            torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
            for mine, reference in zip(
                torch.autograd.grad(ours, (first, second), grad), expected, strict=True
            ):
                torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


def test_a_lifting_plan_hands_many_rows_and_gradients_to_the_plain_plan():
    """The lifted way while the second operand is the larger and no gradient is
    recorded; else the plain plan (``unlifted``), as the docstring says."""
    pattern = "... seq layer, heads layer key -> ... heads seq key"
    plain = []
    plan = dataclasses.replace(
        _plan(pattern, 3, 3), unlifted=lambda a, b, out=None: plain.append(1) or "plain"
    )
    weight = torch.randn(3, 4, 5)
    assert isinstance(plan(torch.randn(1, 2, 4), weight), torch.Tensor)
    assert plain == []
    assert plan(torch.randn(2, 8, 4), weight) == "plain"  # 64 >= 60 numbers
    assert plan(torch.randn(1, 2, 4), weight.requires_grad_()) == "plain"
    with torch.no_grad():
        assert isinstance(plan(torch.randn(1, 2, 4), weight), torch.Tensor)
    assert plain == [1, 1]
