"""Attention against torch's scaled_dot_product_attention, plus the properties the
course texts claim."""

import pytest
import torch
import torch.nn.functional as F
from einops import einsum
from hypothesis import given
from hypothesis import strategies as st

import named_transformer as nt

SEQ_Q, SEQ, KEY, VAL = 5, 7, 3, 4  # a distinct size for every axis


def qkv(*batch, dtype=torch.float32, requires_grad=False):
    def make(*shape):
        return torch.randn(*batch, *shape, dtype=dtype, requires_grad=requires_grad)

    return make(SEQ_Q, KEY), make(SEQ, KEY), make(SEQ, VAL)


@pytest.mark.parametrize(
    "batch", [(), (2,), (2, 3)], ids=["no-batch", "one-batch", "two-batch"]
)
def test_equals_sdpa_without_mask(batch):
    q, k, v = qkv(*batch)
    torch.testing.assert_close(
        nt.attention(q, k, v), F.scaled_dot_product_attention(q, k, v)
    )


@pytest.mark.parametrize(
    "batch", [(), (2,), (2, 3)], ids=["no-batch", "one-batch", "two-batch"]
)
def test_equals_sdpa_causal(batch):
    q, k, v = qkv(*batch)
    q = q[..., :SEQ, :] if SEQ_Q >= SEQ else torch.randn(*batch, SEQ, KEY)
    mask = nt.causal_mask(SEQ)
    torch.testing.assert_close(
        nt.attention(q, k, v, mask),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_equals_sdpa_with_padding_mask():
    q, k, v = qkv(3)
    lengths = torch.tensor([7, 2, 5])
    mask = nt.key_padding_mask(lengths, SEQ)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(nt.attention(q, k, v, mask), expected)


@pytest.mark.parametrize(
    "batch", [(), (2,), (2, 3)], ids=["no-batch", "one-batch", "two-batch"]
)
def test_equals_sdpa_with_arbitrary_boolean_mask(batch):
    q, k, v = qkv(*batch)
    mask = torch.rand(*batch, SEQ_Q, SEQ) > 0.4
    mask[..., 0] = True  # sdpa returns NaN on fully masked rows; ours returns zeros
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(nt.attention(q, k, v, mask), expected)


def test_fully_masked_query_row_returns_zeros_and_zero_gradient():
    q, k, v = qkv(2, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, SEQ_Q, SEQ, dtype=torch.bool)
    mask[1, 3] = False
    out = nt.attention(q, k, v, mask)
    assert torch.equal(out[1, 3], torch.zeros(VAL, dtype=torch.float64))
    out.sum().backward()
    assert torch.equal(q.grad[1, 3], torch.zeros(KEY, dtype=torch.float64))
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_gradcheck_attention():
    q, k, v = qkv(2, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(SEQ_Q, SEQ) > 0.3
    assert torch.autograd.gradcheck(lambda *t: nt.attention(*t, mask), (q, k, v))


def test_weights_sum_to_one_and_attend_gives_the_output():
    q, k, v = qkv(2)
    weights = nt.attention_weights(q, k)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, SEQ_Q))
    torch.testing.assert_close(nt.attend(weights, v), nt.attention(q, k, v))


def test_attention_from_scores_with_the_scaled_dot_score_is_attention():
    q, k, v = qkv(2)
    mask = nt.causal_mask(SEQ_Q, SEQ)
    scores = nt.scaled_dot_score(q, k)
    torch.testing.assert_close(
        nt.attention_from_scores(scores, v, mask), nt.attention(q, k, v, mask)
    )


def test_keys_with_a_size_one_heads_axis_are_multi_query_attention():
    heads = 6
    q = torch.randn(2, heads, SEQ_Q, KEY)
    k, v = torch.randn(2, 1, SEQ, KEY), torch.randn(2, 1, SEQ, VAL)
    expected = F.scaled_dot_product_attention(
        q, k.expand(-1, heads, -1, -1), v.expand(-1, heads, -1, -1)
    )
    torch.testing.assert_close(nt.attention(q, k, v), expected)


def test_gradcheck_basic_self_attention():
    x = torch.randn(2, SEQ, KEY, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(nt.basic_self_attention, (x,))


def test_basic_self_attention_matches_bloem():
    x = torch.randn(SEQ, KEY)
    bloem = torch.softmax(x @ x.T, dim=-1) @ x  # Bloem's basic_attention, written raw
    torch.testing.assert_close(nt.basic_self_attention(x), bloem)


@given(seed=st.integers(0, 10_000))
def test_basic_self_attention_is_permutation_equivariant(seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2, SEQ, KEY, generator=generator, dtype=torch.float64)
    perm = torch.randperm(SEQ, generator=generator)
    torch.testing.assert_close(
        nt.basic_self_attention(x[:, perm]), nt.basic_self_attention(x)[:, perm]
    )


@given(seed=st.integers(0, 10_000))
def test_qkv_self_attention_is_permutation_equivariant(seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SEQ, 6, generator=generator, dtype=torch.float64)
    w_q, w_k = (
        torch.randn(6, KEY, generator=generator, dtype=torch.float64) for _ in range(2)
    )
    w_v = torch.randn(6, VAL, generator=generator, dtype=torch.float64)
    perm = torch.randperm(SEQ, generator=generator)

    def self_attention(inputs):
        q, k, v = (
            einsum(inputs, w, "seq layer, layer d -> seq d") for w in (w_q, w_k, w_v)
        )
        return nt.attention(q, k, v)

    torch.testing.assert_close(self_attention(x[perm]), self_attention(x)[perm])


def test_large_logits_stay_finite():
    q, k, v = qkv(2)
    out = nt.attention(q * 1e4, k * 1e4, v, nt.causal_mask(SEQ_Q, SEQ))
    assert torch.isfinite(out).all()


def score_biases(*shape, dtype=torch.float32):
    """Random finite biases; a fifth of them the dtype's most negative number (Hugging
    Face's mask), and query row 1 all of it (a fully padded row there)."""
    bias = 3 * torch.randn(*shape, dtype=dtype)
    bias = bias.masked_fill(torch.rand(*shape) < 0.2, torch.finfo(dtype).min)
    bias[..., 1, :] = torch.finfo(dtype).min
    return bias


ATTEND = {"named": nt.attention, "fused": nt.fused_attention}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_mask", [False, True], ids=["bias", "bias-and-mask"])
@pytest.mark.parametrize(
    "batch", [(), (2,), (2, 3)], ids=["no-batch", "one-batch", "two-batch"]
)
@pytest.mark.parametrize("path", ATTEND)
def test_score_bias_equals_sdpa_with_a_float_mask(path, batch, with_mask, dtype):
    q, k, v = qkv(*batch, dtype=dtype)
    bias = score_biases(*batch, SEQ_Q, SEQ, dtype=dtype)
    mask, float_mask = None, bias
    if with_mask:  # one boolean mask for every batch entry: it broadcasts
        mask = torch.rand(SEQ_Q, SEQ) > 0.4
        mask[:, 0] = True
        float_mask = bias.masked_fill(~mask, -torch.inf)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
    got = ATTEND[path](q, k, v, mask, score_bias=bias)
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=0)


@pytest.mark.parametrize("path", ATTEND)
def test_a_broadcast_score_bias_equals_sdpa(path):
    q, k, v = qkv(2, 3)
    bias = 2 * torch.randn(1, SEQ)  # one bias per key (ALiBi-like), every query
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(ATTEND[path](q, k, v, score_bias=bias), expected)


def test_minus_infinity_in_the_bias_blocks_like_the_mask_zeros_never_nan():
    q, k, v = qkv(2, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(2, SEQ_Q, SEQ, dtype=torch.float64, requires_grad=True)
    blocked = torch.rand(2, SEQ_Q, SEQ) < 0.3
    blocked[0, 2] = True  # a row the bias blocks entirely
    mask = torch.ones(SEQ_Q, SEQ, dtype=torch.bool)
    mask[3] = False  # a row the mask blocks entirely
    mask[4, 1:] = False  # and a row the two block together
    blocked[:, 4, 0] = True
    minus_inf = bias.masked_fill(blocked, -torch.inf)
    named = nt.attention(q, k, v, mask, score_bias=minus_inf)
    fused = nt.fused_attention(q, k, v, mask, score_bias=minus_inf)
    sdpa = F.scaled_dot_product_attention(
        q, k, v, attn_mask=minus_inf.masked_fill(~mask, -torch.inf)
    )
    for rows in (named[0, 2], named[:, 3], named[:, 4]):
        assert torch.equal(rows, torch.zeros_like(rows))
    torch.testing.assert_close(named, sdpa, atol=1e-12, rtol=0)
    torch.testing.assert_close(fused, named, atol=1e-12, rtol=0)
    inputs = (q, k, v, bias)
    grads = [
        torch.autograd.grad(out.square().sum(), inputs, retain_graph=True)
        for out in (named, fused)
    ]
    for got, want in zip(grads[1], grads[0], strict=True):
        assert torch.isfinite(want).all()
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    assert torch.equal(grads[0][3][blocked], torch.zeros(int(blocked.sum())).double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_biased_weights_without_a_gradient_equal_those_with_one(dtype):
    # without a gradient the bias, the mask and the softmax go over the scores' table
    q, k = qkv(2, dtype=dtype)[:2]
    bias = score_biases(2, SEQ_Q, SEQ, dtype=dtype)
    bias[0, 2] = -torch.inf  # a row the bias blocks entirely: zeros
    bias[1, 3, 0] = torch.nan  # a NaN stays a NaN row, as in SDPA
    mask = torch.rand(SEQ_Q, SEQ) > 0.3
    mask[4] = False  # a row the mask blocks entirely: zeros
    with torch.no_grad():
        fast = nt.attention_weights(q, k, mask, score_bias=bias)
    slow = nt.attention_weights(
        q.requires_grad_(), k, mask, score_bias=bias.requires_grad_()
    )
    torch.testing.assert_close(fast, slow.detach(), atol=0, rtol=0, equal_nan=True)
    assert torch.equal(fast[0, 2], torch.zeros(SEQ, dtype=dtype))
    assert torch.equal(fast[:, 4], torch.zeros(2, SEQ, dtype=dtype))
    assert fast[1, 3].isnan().all() and not fast[1, :3].isnan().any()
    scores = nt.scaled_dot_score(q.detach(), k) + bias
    expected = torch.softmax(scores.masked_fill(~mask, -torch.inf), dim=-1)
    alive = ~(expected.isnan().all(dim=-1))  # the empty rows: NaN in plain softmax
    torch.testing.assert_close(fast[alive], expected[alive], equal_nan=True)


def test_a_score_bias_over_no_keys_gives_no_weights():
    q, k = torch.randn(2, 3, 4), torch.randn(2, 0, 4)
    weights = nt.attention_weights(q, k, score_bias=torch.zeros(3, 0))
    assert weights.shape == (2, 3, 0)


def test_gradcheck_attention_with_a_score_bias():
    q, k, v = qkv(2, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(SEQ_Q, SEQ, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(SEQ_Q, SEQ) > 0.3

    def output(q, k, v, bias):
        return nt.attention(q, k, v, mask, score_bias=bias)

    assert torch.autograd.gradcheck(output, (q, k, v, bias))


@pytest.mark.parametrize("path", ["weights", *ATTEND])
def test_a_score_bias_of_the_wrong_size_names_the_axis(path):
    from jaxtyping import TypeCheckError

    q, k, v = qkv(2)
    call = {
        "weights": lambda bias: nt.attention_weights(q, k, score_bias=bias),
        **{name: lambda bias, f=f: f(q, k, v, score_bias=bias)
           for name, f in ATTEND.items()},
    }[path]  # fmt: skip
    with pytest.raises(TypeCheckError, match="score_bias") as error:
        call(torch.randn(2, SEQ_Q, SEQ + 1))
    assert "'seq'" in str(error.value)
    with pytest.raises(TypeCheckError, match="score_bias") as error:
        call(torch.randn(SEQ_Q + 1, SEQ))
    assert "'seq_q'" in str(error.value)
