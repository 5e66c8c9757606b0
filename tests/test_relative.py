"""Relative multi-head attention (Shaw et al. 2018) against a loop written from the
paper."""

import math

import pytest
import torch
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.models.multihead import MultiHeadAttention, multihead
from named_transformer.models.relative import (
    Relative,
    RelativeTables,
    relative_attend,
    relative_attention_weights,
)
from named_transformer.models.variants import AttentionVariant

B, SEQ_Q, SEQ, LAYER, HEADS, K = 2, 3, 6, 8, 2, 2  # key = 4, distance = 5


def shaw_loop(inputs, memory, m, offset=0, mask=None):
    """e_ij = q_i (k_j + a^K_clip(j-i)) / sqrt(d),
    z_i = sum_j a_ij (v_j + a^V_clip(j-i))."""
    batch, seq_q, seq = inputs.shape[0], inputs.shape[1], memory.shape[1]
    out = torch.zeros(batch, seq_q, m.layer, dtype=inputs.dtype)
    a_k, a_v, k_max = m.positions.a_k, m.positions.a_v, m.positions.max_distance
    for b in range(batch):
        for h in range(m.heads):
            q = inputs[b] @ m.w_q[h] + m.b_q[h]
            k = memory[b] @ m.w_k[h] + m.b_k[h]
            v = memory[b] @ m.w_v[h] + m.b_v[h]
            for i in range(seq_q):
                e = torch.empty(seq, dtype=inputs.dtype)
                for j in range(seq):
                    d = max(-k_max, min(k_max, j - (i + offset)))
                    e[j] = q[i] @ (k[j] + a_k[d + k_max]) / math.sqrt(m.key)
                    if mask is not None and not mask[i, j]:
                        e[j] = -torch.inf
                alpha = torch.softmax(e, 0)
                z = sum(
                    alpha[j] * (v[j] + a_v[
                        max(-k_max, min(k_max, j - i - offset)) + k_max
                    ])
                    for j in range(seq)
                )  # fmt: skip
                out[b, i] += z @ m.w_o[h]
    return out + m.b_o


def model(**options):
    m = MultiHeadAttention(LAYER, HEADS, positions=Relative(K), **options).double()
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    return m


@pytest.mark.parametrize(
    "seq_q, offset, causal",
    [(SEQ, 0, False), (SEQ, 0, True), (SEQ_Q, SEQ - SEQ_Q, True), (SEQ_Q, 1, False)],
)
def test_equals_shaw_loop(seq_q, offset, causal):
    m = model()
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    inputs = memory[:, offset : offset + seq_q]
    mask = nt.causal_mask(seq_q, SEQ, offset=offset) if causal else None
    got = m(inputs, memory, mask, offset=offset)
    torch.testing.assert_close(
        got, shaw_loop(inputs, memory, m, offset, mask), atol=1e-10, rtol=0
    )


def test_cross_attention_with_a_wider_memory():
    m = model(memory=5)
    inputs, memory = (
        torch.randn(B, SEQ_Q, LAYER).double(),
        torch.randn(B, SEQ, 5).double(),
    )
    torch.testing.assert_close(
        m(inputs, memory), shaw_loop(inputs, memory, m), atol=1e-10, rtol=0
    )


def test_cached_step_equals_the_last_row_of_the_full_pass():
    m = model()
    inputs = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    full = m(inputs, mask=nt.causal_mask(SEQ))
    last = m(
        inputs[:, -1:], inputs, offset=SEQ - 1
    )  # one new query over all keys so far
    torch.testing.assert_close(last, full[:, -1:], atol=1e-10, rtol=0)


def test_extra_parameters_are_two_tables():
    m = MultiHeadAttention(LAYER, HEADS, positions=Relative(K))
    plain = MultiHeadAttention(LAYER, HEADS)
    assert m.num_parameters() == plain.num_parameters() + 2 * (2 * K + 1) * (
        LAYER // HEADS
    )
    assert m.positions.a_k.shape == m.positions.a_v.shape == (2 * K + 1, LAYER // HEADS)


def test_zero_tables_give_plain_multihead_attention():
    m = model()
    with torch.no_grad():
        m.positions.a_k.zero_()
        m.positions.a_v.zero_()
    inputs = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    plain = MultiHeadAttention(LAYER, HEADS).double()
    plain.load_state_dict(m.state_dict(), strict=False)  # all but the tables
    torch.testing.assert_close(m(inputs), plain(inputs))


def test_gradcheck():
    d = torch.float64
    args = [
        torch.randn(1, 2, 4, dtype=d), torch.randn(1, 3, 4, dtype=d),
        torch.randn(2, 4, 3, dtype=d), torch.randn(2, 4, 3, dtype=d),
        torch.randn(2, 4, 3, dtype=d), torch.randn(2, 3, 4, dtype=d),
        torch.randn(3, 3, dtype=d), torch.randn(3, 3, dtype=d),
    ]  # fmt: skip
    for a in args:
        a.requires_grad_(True)
    def relative(x, m, w_q, w_k, w_v, w_o, a_k, a_v):
        part = RelativeTables(1, 3, 3).double()
        del part.a_k, part.a_v  # the tables as the checked inputs instead
        part.a_k, part.a_v = a_k, a_v
        weights = nt.AttentionWeights(w_q, w_k, w_v, w_o)
        return multihead(x, m, weights, variant=AttentionVariant(part), offset=1)[0]

    assert torch.autograd.gradcheck(relative, args)


def test_bad_configuration_and_wrong_sizes():
    with pytest.raises(ValueError, match="max_distance"):
        Relative(-1)
    with pytest.raises(ValueError, match="max_distance"):
        RelativeTables(-1, 4, 4)
    m = MultiHeadAttention(LAYER, HEADS, positions=Relative(K))
    with pytest.raises(TypeCheckError, match="w_q"):
        m(torch.randn(B, SEQ, LAYER + 1))
    q, k = torch.randn(B, SEQ_Q, 4), torch.randn(B, SEQ, 4)
    index = nt.relative_position_index(SEQ_Q, SEQ, K)
    with pytest.raises(TypeCheckError, match="a_k"):
        relative_attention_weights(q, k, torch.randn(2 * K + 1, 5), index)
    with pytest.raises(TypeCheckError, match="index"):
        relative_attend(
            torch.randn(B, SEQ_Q, SEQ), k, torch.randn(2 * K + 1, 4), index[:, :-1]
        )
