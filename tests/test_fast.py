"""Each equation the pages show against the faster function that computes its calls.

``named_transformer/core/fast.py`` holds the speed tricks (tables written over, the
fused softmax and layer norm, gradients written out); an equation marked with
``fast.stand_in`` is checked by its own annotations and computed by the fast function.
Here the two meet on the same inputs: values and gradients in float64, fully masked
rows, no gradient recorded (where the tables are written over), autocast, and
``torch.compile``. The equation is the reference: it is the body the page shows, run as
written (``f.equation``).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import named_transformer as nt
from named_transformer.core import fast

SEQ_Q, SEQ, KEY, LAYER = 3, 5, 4, 6


def _masked(seed: int, dtype=torch.float64):
    """Scores with a mask whose first row is fully masked, and a bias whose last row
    is -inf everywhere (a row B alone hides) and -inf at one more key."""
    generator = torch.Generator().manual_seed(seed)
    queries = torch.randn(2, SEQ_Q, KEY, generator=generator, dtype=dtype)
    keys = torch.randn(2, SEQ, KEY, generator=generator, dtype=dtype)
    mask = torch.rand(SEQ_Q, SEQ, generator=generator) > 0.4
    mask[0] = False
    mask[1, 0] = True
    bias = torch.randn(SEQ_Q, SEQ, generator=generator, dtype=dtype)
    bias[-1] = -torch.inf
    bias[1, 1] = -torch.inf
    return queries, keys, mask, bias


def _cases(seed: int, dtype=torch.float64):
    """(name, function, arguments as a function of the differentiable tensors)."""
    queries, keys, mask, bias = _masked(seed, dtype)
    scores = torch.randn(2, SEQ_Q, SEQ, dtype=dtype,
                         generator=torch.Generator().manual_seed(seed + 1))  # fmt: skip
    inputs = torch.randn(2, SEQ_Q, LAYER, dtype=dtype,
                         generator=torch.Generator().manual_seed(seed + 2))  # fmt: skip
    generator = torch.Generator().manual_seed(seed + 3)

    def weight(*shape):
        return torch.randn(*shape, dtype=dtype, generator=generator)

    # W^Q, W^K, W^V, b^Q, b^K, b^V of 3 heads 2 wide (stackable), and of 1 key/value
    # head (grouped); W^O, which the projection does not read, stays out
    projections = (weight(3, LAYER, 2), weight(3, LAYER, 2), weight(3, LAYER, 2),
                   weight(3, 2), weight(3, 2), weight(3, 2))  # fmt: skip
    grouped_projections = (weight(3, LAYER, 2), weight(1, LAYER, 2),
                           weight(1, LAYER, 2), weight(3, 2), weight(1, 2),
                           weight(1, 2))  # fmt: skip
    w_o = weight(3, 2, LAYER)
    # attention in the shapes of the fused kernel (batch, heads, positions, features):
    # square for the causal rule, a padding mask whose second sequence shows no key
    # (every query of it fully masked), one key/value head for three query heads
    q4, k4, v4 = weight(2, 3, SEQ, KEY), weight(2, 3, SEQ, KEY), weight(2, 3, SEQ, 2)
    padding = nt.key_padding_mask(torch.tensor([3, 0]), SEQ)[:, None]

    def heads_of(x, w_q, w_k, w_v, b_q, b_k, b_v):
        return x, x, nt.AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v)

    return {
        "softmax": (nt.softmax, (scores,), lambda s: (s,)),
        "softmax, mask": (nt.softmax, (scores,), lambda s: (s, mask)),
        "softmax, beta": (nt.softmax, (scores,), lambda s: (s, mask, 2.5)),
        "softmax_, mask": (nt.softmax_, (scores,), lambda s: (s.clone(), mask)),
        "weights": (nt.attention_weights, (queries, keys), lambda q, k: (q, k)),
        "weights, mask": (
            nt.attention_weights, (queries, keys), lambda q, k: (q, k, mask)
        ),
        "weights, bias": (
            nt.attention_weights, (queries, keys, bias),
            lambda q, k, b: (q, k, None, {"score_bias": b}),
        ),
        "weights, mask and bias": (
            nt.attention_weights, (queries, keys, bias),
            lambda q, k, b: (q, k, mask, {"score_bias": b}),
        ),
        "project_qkv": (
            nt.project_qkv, (inputs, *projections), heads_of,
        ),
        "project_qkv, grouped": (
            nt.project_qkv, (inputs, *grouped_projections), heads_of,
        ),
        "attention": (nt.attention, (q4, k4, v4), lambda q, k, v: (q, k, v)),
        "attention, causal": (
            nt.attention, (q4, k4, v4), lambda q, k, v: (q, k, v, nt.causal_mask(SEQ))
        ),
        "attention, padding": (
            nt.attention, (q4, k4, v4), lambda q, k, v: (q, k, v, padding)
        ),
        "attention, grouped": (
            nt.attention, (q4, k4[:, :1], v4[:, :1]), lambda q, k, v: (q, k, v)
        ),
        "attention, a window (the equation)": (
            nt.attention, (q4, k4, v4),
            lambda q, k, v: (q, k, v, nt.sliding_window_mask(SEQ, SEQ, window=2)),
        ),
        "standardize": (nt.standardize, (inputs,), lambda x: (x,)),
        "relu": (nt.relu, (inputs,), lambda x: (x,)),
    }  # fmt: skip


def _call(function, arguments):
    """``arguments``, the last a dict of keywords where it is one; a tuple of tensors
    (the projected heads) as one flat tensor."""
    if arguments and isinstance(arguments[-1], dict):
        result = function(*arguments[:-1], **arguments[-1])
    else:
        result = function(*arguments)
    if isinstance(result, tuple):
        return torch.cat([part.flatten() for part in result])
    return result


CASES = list(_cases(0))


def test_every_stand_in_is_tested():
    """Each function of the package marked with a faster one is among the cases."""
    tested = {function for function, _, _ in _cases(0).values()}
    marked = {
        value for value in vars(nt).values()
        if callable(value) and hasattr(getattr(value, "equation", None), "faster")
    }  # fmt: skip
    assert marked == tested


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_in_float64(case):
    function, tensors, arguments = _cases(0)[case]
    leaves = [t.clone().requires_grad_() for t in tensors]
    twins = [t.clone().requires_grad_() for t in tensors]
    fast_result = _call(function, arguments(*leaves))
    equation = _call(function.equation, arguments(*twins))
    torch.testing.assert_close(fast_result, equation, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(equation)
    ours = torch.autograd.grad(fast_result, leaves, upstream)
    theirs = torch.autograd.grad(equation, twins, upstream)
    for a, b in zip(ours, theirs, strict=True):
        assert not a.isnan().any()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_without_a_gradient(case):
    """No gradient recorded: the fast functions write over their tables."""
    function, tensors, arguments = _cases(1)[case]
    with torch.no_grad():
        fast_result = _call(function, arguments(*[t.clone() for t in tensors]))
        equation = _call(function.equation, arguments(*[t.clone() for t in tensors]))
    torch.testing.assert_close(fast_result, equation, rtol=1e-12, atol=1e-12)


def test_fully_masked_rows_are_zeros_in_both():
    queries, keys, mask, bias = _masked(2)
    for weights in (
        nt.attention_weights(queries, keys, mask, score_bias=bias),
        nt.attention_weights.equation(queries, keys, mask, score_bias=bias),
    ):
        assert torch.equal(weights[:, 0], torch.zeros_like(weights[:, 0]))  # by M
        assert torch.equal(weights[:, -1], torch.zeros_like(weights[:, -1]))  # by B
        assert torch.equal(weights[:, 1, 1], torch.zeros_like(weights[:, 1, 1]))
    function, tensors, arguments = _cases(2)["attention, padding"]
    for attended in (
        function(*arguments(*tensors)),
        function.equation(*arguments(*tensors)),
    ):
        assert torch.equal(attended[1], torch.zeros_like(attended[1]))  # no key shown


@pytest.mark.parametrize("case", CASES)
def test_under_autocast(case):
    """Autocast (bfloat16 on the CPU): the same dtype, and the same numbers to its
    precision."""
    function, tensors, arguments = _cases(3, torch.float32)[case]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast_result = _call(function, arguments(*[t.clone() for t in tensors]))
        equation = _call(function.equation, arguments(*[t.clone() for t in tensors]))
    assert fast_result.dtype == equation.dtype
    torch.testing.assert_close(
        fast_result.float(), equation.float(), rtol=2e-2, atol=2e-2
    )


@pytest.mark.parametrize(
    "case",
    ["softmax, mask", "weights, mask and bias", "project_qkv", "standardize", "relu",
     "attention, causal", "attention, padding", "attention, a window (the equation)"],
)  # fmt: skip
def test_compiled(case):
    """Compiled (values and gradients): the graph traces the fast function."""
    function, tensors, arguments = _cases(4)[case]
    compiled = torch.compile(
        lambda *t: _call(function, arguments(*t)), backend="aot_eager", fullgraph=True
    )
    leaves = [t.clone().requires_grad_() for t in tensors]
    twins = [t.clone().requires_grad_() for t in tensors]
    result = compiled(*leaves)
    equation = _call(function.equation, arguments(*twins))
    torch.testing.assert_close(result, equation, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(equation)
    ours = torch.autograd.grad(result, leaves, upstream)
    theirs = torch.autograd.grad(equation, twins, upstream)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@settings(deadline=None, max_examples=40)
@given(
    rows=st.integers(1, 4),
    columns=st.integers(1, 6),
    seed=st.integers(0, 2**16),
    grad=st.booleans(),
)
def test_masked_softmax_on_drawn_masks(rows, columns, seed, grad):
    """Any mask, empty rows included, with and without a gradient recorded."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, columns, dtype=torch.float64, generator=generator) * 4
    mask = torch.rand(rows, columns, generator=generator) > 0.5
    with torch.set_grad_enabled(grad):
        given_scores = scores.clone().requires_grad_(grad)
        torch.testing.assert_close(
            nt.softmax_(given_scores.clone() if grad else given_scores, mask),
            nt.softmax.equation(scores, mask), rtol=1e-12, atol=1e-12,
        )  # fmt: skip


FUSED = ["attention", "attention, causal", "attention, padding", "attention, grouped"]


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("attention")])
def test_the_fused_kernel_takes_the_calls_it_computes(case, monkeypatch):
    """``scaled_dot_product_attention`` runs for the plain calls it computes (no bias;
    no mask, a padding mask or the causal rule, as ``is_causal=True``), and not for a
    window, whose hidden tiles the equation's blockwise core skips."""
    function, tensors, arguments = _cases(5)[case]
    calls = []
    original = fast.F.scaled_dot_product_attention
    monkeypatch.setattr(
        fast.F, "scaled_dot_product_attention",
        lambda *a, **k: calls.append(k["is_causal"]) or original(*a, **k),
    )  # fmt: skip
    _call(function, arguments(*tensors))
    assert calls == ([case == "attention, causal"] if case in FUSED else [])


def test_a_causal_rule_with_fewer_queries_than_keys_runs_the_kernel():
    """``causal_mask(seq_q, seq)`` with seq_q < seq, the first query at position 0:
    the kernel's ``is_causal=True`` (its top-left triangle) equals the equation."""
    q, k, v = (torch.randn(2, 3, SEQ, KEY, dtype=torch.float64) for _ in range(3))
    mask = nt.causal_mask(3, SEQ)
    assert fast.fused_kernel_computes(q[:, :, :3], k, v, mask)
    torch.testing.assert_close(
        nt.attention(q[:, :, :3], k, v, mask),
        nt.attention.equation(q[:, :, :3], k, v, mask), rtol=1e-12, atol=1e-12,
    )  # fmt: skip


def test_the_fused_kernel_takes_no_other_call():
    """A bias, three axes, a key batch that broadcasts, or a causal rule shifted by an
    offset: the equation runs."""
    q, k, v = (torch.randn(2, 3, SEQ, KEY) for _ in range(3))
    assert fast.fused_kernel_computes(q, k, v, nt.causal_mask(SEQ))
    assert not fast.fused_kernel_computes(q, k, v, score_bias=torch.zeros(SEQ, SEQ))
    assert not fast.fused_kernel_computes(q[0], k[0], v[0])
    assert not fast.fused_kernel_computes(q, k[:1], v[:1])
    assert not fast.fused_kernel_computes(q, k, v, nt.causal_mask(SEQ, offset=1))
    assert not fast.fused_kernel_computes(q, k, v.double())


def test_the_fast_functions_are_the_ones_that_run(monkeypatch):
    """A call of the equation computes by its stand-in (not the body shown)."""
    calls = []
    original = fast.normalise
    monkeypatch.setattr(
        fast, "normalise", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    nt.softmax(torch.randn(SEQ_Q, SEQ))
    assert calls
