"""The library's ``einsum`` (a remembered plan around one ``torch.matmul``) equals
``einops.einsum`` on random two-operand patterns: values and gradients, float64.

Patterns are drawn with every role an axis can take (batch: in both operands and the
output; contracted: in both, not the output; free: in one operand and the output), in
any order, with ``...`` on either side and size-1 axes that broadcast.
"""

import einops
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from named_transformer import contraction
from named_transformer.contraction import _plan, einsum

NAMES = ["a", "b", "c", "d", "e", "f"]


@st.composite
def contractions(draw):
    """A pattern, and two float64 operands that fit it (gradients wanted)."""
    names = draw(st.permutations(NAMES))
    roles = draw(st.lists(st.sampled_from("BCFG"), min_size=1, max_size=5))
    sizes = {n: draw(st.integers(1, 4)) for n in names}
    first, second, out = [], [], []
    for name, role in zip(names, roles, strict=False):
        if role == "B":  # batch
            first.append(name), second.append(name), out.append(name)
        elif role == "C":  # contracted
            first.append(name), second.append(name)
        elif role == "F":  # free, first operand
            first.append(name), out.append(name)
        else:  # free, second operand
            second.append(name), out.append(name)
    first, second, out = (draw(st.permutations(side)) for side in (first, second, out))
    dots = draw(st.sampled_from(["none", "first", "both"]))
    leading = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    first_shape = [sizes[n] for n in first]
    second_shape = [sizes[n] for n in second]
    if dots != "none":
        first, out = ["...", *first], ["...", *out]
        first_shape = leading + first_shape
    if dots == "both":
        second = ["...", *second]
        # broadcast: the second operand's leading axes may be of size 1, or fewer
        kept = draw(st.integers(0, len(leading)))
        ones = draw(st.lists(st.booleans(), min_size=kept, max_size=kept))
        tail = leading[len(leading) - kept :]
        second_shape = [1 if one else n for one, n in zip(ones, tail, strict=True)]
        second_shape += [sizes[n] for n in second[1:]]
    pattern = f"{' '.join(first)}, {' '.join(second)} -> {' '.join(out)}"
    operands = [
        torch.randn(shape, dtype=torch.float64, requires_grad=True)
        for shape in (first_shape, second_shape)
    ]
    return pattern, operands


@settings(max_examples=300)
@given(contractions())
def test_equals_einops_values_and_gradients(case):
    pattern, (first, second) = case
    assert _plan(pattern, first.ndim, second.ndim) is not None, pattern
    ours = einsum(first, second, pattern)
    theirs = einops.einsum(first, second, pattern)
    assert ours.shape == theirs.shape, pattern
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(theirs)
    ours_grads = torch.autograd.grad(ours, (first, second), grad)
    theirs_grads = torch.autograd.grad(theirs, (first, second), grad)
    for mine, reference in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


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
