"""ALiBi (Press, Smith & Lewis 2022): the paper's slopes and BLOOM's, the bias against a
loop, the module against an explicit computation, cached and compiled decoding."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from einops import einsum
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.core.alibi import alibi_bias, alibi_slopes
from named_transformer.decoding import IncrementalDecoder, greedy
from named_transformer.models.alibi import ALiBi, LinearBiases
from named_transformer.models.multihead import (
    Heads,
    MultiHeadAttention,
    attend_projected,
    merge_heads,
    multihead,
    project_heads,
)
from named_transformer.models.variants import AttentionVariant
from named_transformer.workflows.runner import build_model, make_spec
from tests.test_decoding import VOCAB
from tests.test_multihead import recorded
from tests.test_rotary import compiled_equals_cached, prompt_and_source

B, HEADS, SEQ_Q, SEQ, LAYER = 2, 3, 4, 6, 30  # key = 10


def test_eight_heads_have_the_papers_slopes():
    assert alibi_slopes(8).tolist() == [1 / 2**h for h in range(1, 9)]
    # 16 heads: the geometric sequence starting at 2^(-1/2)
    expected = [2 ** (-h / 2) for h in range(1, 17)]
    torch.testing.assert_close(alibi_slopes(16, dtype=torch.float64).tolist(), expected)


@pytest.mark.parametrize("heads", [8, 12, 6, 1, 2, 3, 5, 16, 24])
def test_slopes_equal_blooms_build_alibi_tensor(heads):
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    seq = 5
    theirs = build_alibi_tensor(torch.ones(1, seq), heads, torch.float32)
    # BLOOM's tensor is m_h · j, the key position: a row is m_h·(0, 1, 2, …)
    torch.testing.assert_close(alibi_slopes(heads), theirs[:, 0, 1], atol=0, rtol=1e-6)
    # ours, -m_h (i - j), differs from it by -m_h·i, a constant of each query row:
    # the same softmax under the causal mask
    scores = torch.randn(heads, seq, seq)
    causal = nt.causal_mask(seq)
    ours = nt.softmax(scores + alibi_bias(seq, seq, alibi_slopes(heads)), causal)
    torch.testing.assert_close(ours, nt.softmax(scores + theirs, causal))


def test_non_power_of_two_takes_every_other_slope_of_the_next_power():
    # 6 heads: the 4 slopes of 4 heads, then slopes 1 and 3 of 8 heads
    assert alibi_slopes(6).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    with pytest.raises(ValueError, match="at least one head"):
        alibi_slopes(0)


def loop_bias(slopes, seq_q, seq, offset=0, symmetric=False):
    bias = torch.empty(len(slopes), seq_q, seq, dtype=slopes.dtype)
    for h, m in enumerate(slopes.tolist()):
        for i in range(seq_q):
            for j in range(seq):
                distance = (offset + i) - j
                bias[h, i, j] = -m * (abs(distance) if symmetric else distance)
    return bias


@settings(deadline=None, max_examples=20)
@given(
    heads=st.integers(1, 9),
    seq_q=st.integers(1, 5),
    seq=st.integers(1, 7),
    offset=st.integers(0, 9),
    symmetric=st.booleans(),
)
def test_bias_equals_a_loop(heads, seq_q, seq, offset, symmetric):
    slopes = alibi_slopes(heads, dtype=torch.float64)
    got = alibi_bias(seq_q, seq, slopes, offset=offset, symmetric=symmetric)
    assert torch.equal(got, loop_bias(slopes, seq_q, seq, offset, symmetric))


def test_attention_with_the_bias_equals_an_explicit_loop():
    """softmax(q·k/sqrt(d) - m_h (i - j)) per head and query, written out."""
    slopes = alibi_slopes(HEADS, dtype=torch.float64)
    q = torch.randn(B, HEADS, SEQ_Q, 5, dtype=torch.float64)
    k = torch.randn(B, HEADS, SEQ, 5, dtype=torch.float64)
    v = torch.randn(B, HEADS, SEQ, 7, dtype=torch.float64)
    offset = SEQ - SEQ_Q
    mask = nt.causal_mask(SEQ_Q, SEQ, offset=offset)
    bias = alibi_bias(SEQ_Q, SEQ, slopes, offset=offset)
    got = nt.attention(q, k, v, mask, score_bias=bias)
    expected = torch.zeros_like(got)
    for b in range(B):
        for h in range(HEADS):
            for i in range(SEQ_Q):
                e = torch.full((SEQ,), -torch.inf, dtype=torch.float64)
                for j in range(offset + i + 1):  # the keys the causal mask allows
                    score = q[b, h, i] @ k[b, h, j] / math.sqrt(5)
                    e[j] = score - slopes[h] * ((offset + i) - j)
                expected[b, h, i] = torch.softmax(e, 0) @ v[b, h]
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    fused = nt.fused_attention(q, k, v, mask, score_bias=bias)
    torch.testing.assert_close(fused, expected, atol=1e-12, rtol=0)


def model(symmetric=False, **options):
    m = MultiHeadAttention(
        LAYER, HEADS, positions=ALiBi(symmetric), **options
    ).double()
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    return m


def explicit(m, inputs, memory, offset=0, mask=None):
    q = einsum(inputs, m.w_q, "b s l, h l k -> b h s k") + m.b_q[:, None]
    k = einsum(memory, m.w_k, "b s l, h l k -> b h s k") + m.b_k[:, None]
    v = einsum(memory, m.w_v, "b s l, h l k -> b h s k") + m.b_v[:, None]
    scores = q @ k.transpose(-1, -2) / math.sqrt(m.key)
    part = m.positions
    bias = loop_bias(
        part.slopes, inputs.shape[1], memory.shape[1], offset, part.symmetric
    )
    scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, -torch.inf)
    heads = torch.softmax(scores, -1) @ v
    return einsum(heads, m.w_o, "b h s v, h v l -> b s l") + m.b_o


@pytest.mark.parametrize(
    "seq_q, offset, causal, symmetric",
    [(SEQ, 0, True, False), (SEQ, 0, False, True), (SEQ_Q, SEQ - SEQ_Q, True, False),
     (SEQ_Q, 1, False, True)],
)  # fmt: skip
def test_module_equals_the_explicit_computation(seq_q, offset, causal, symmetric):
    m = model(symmetric=symmetric)
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    inputs = memory[:, offset : offset + seq_q]
    mask = nt.causal_mask(seq_q, SEQ, offset=offset) if causal else None
    got, weights = recorded(m, ["weights"], inputs, memory, mask, offset=offset)
    torch.testing.assert_close(
        got, explicit(m, inputs, memory, offset, mask), atol=1e-12, rtol=0
    )
    assert weights.shape == (B, HEADS, seq_q, SEQ)
    m.fused = True
    torch.testing.assert_close(
        m(inputs, memory, mask, offset=offset), got, atol=1e-12, rtol=0
    )


def test_multi_query_shares_keys_but_keeps_one_slope_per_query_head():
    m = model(kv_heads=1)  # one key/value head shared by the three query heads
    assert m.w_k.shape[0] == 1
    memory = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    mask = nt.causal_mask(SEQ_Q, SEQ, offset=SEQ - SEQ_Q)
    inputs = memory[:, SEQ - SEQ_Q :]
    got, weights = recorded(m, ["weights"], inputs, memory, mask,
                            offset=SEQ - SEQ_Q)  # fmt: skip
    expected = explicit(m, inputs, memory, SEQ - SEQ_Q, mask)  # broadcasts K and V
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    assert weights.shape == (B, HEADS, SEQ_Q, SEQ)
    m.fused = True
    torch.testing.assert_close(
        m(inputs, memory, mask, offset=SEQ - SEQ_Q), expected, atol=1e-12, rtol=0
    )


def test_a_score_bias_adds_to_the_linear_bias_and_the_last_row_is_a_cached_step():
    m = model()
    inputs = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    extra = torch.randn(B, SEQ, SEQ, dtype=torch.float64)
    mask = nt.causal_mask(SEQ)
    got = m(inputs, mask=mask, score_bias=extra)
    # the extra bias is shared by the heads, the linear bias is per head
    heads_extra = extra[:, None] + loop_bias(m.positions.slopes, SEQ, SEQ)
    q = project_heads(inputs, m.w_q, m.b_q)
    k = project_heads(inputs, m.w_k, m.b_k)
    v = project_heads(inputs, m.w_v, m.b_v)
    heads = nt.attention(q, k, v, mask, score_bias=heads_extra)
    expected = merge_heads(heads, m.w_o, m.b_o)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    full = m(inputs, mask=mask)
    last = m(inputs[:, -1:], inputs, offset=SEQ - 1)
    torch.testing.assert_close(last, full[:, -1:], atol=1e-12, rtol=0)


def test_no_new_parameters_and_no_new_checkpoint_entries():
    m = MultiHeadAttention(LAYER, HEADS, positions=ALiBi())
    plain = MultiHeadAttention(LAYER, HEADS)
    assert m.num_parameters() == plain.num_parameters()
    assert m.state_dict().keys() == plain.state_dict().keys()  # slopes: not stored
    # but they follow the module
    assert m.double().positions.slopes.dtype == torch.float64


def test_wrong_sizes_name_the_argument():
    with pytest.raises(TypeCheckError, match="parameter 'slopes'"):
        alibi_bias(SEQ_Q, SEQ, torch.ones(HEADS, 1))
    q = torch.randn(B, HEADS, SEQ_Q, 5)
    k, v = torch.randn(B, HEADS, SEQ, 5), torch.randn(B, HEADS, SEQ, 7)
    wrong = AttentionVariant(LinearBiases(HEADS + 1))
    with pytest.raises(TypeCheckError, match="parameter 'slopes'"):
        attend_projected(Heads(q, k, v), torch.randn(HEADS, 7, 4), variant=wrong)
    with pytest.raises(TypeCheckError, match="w_q"):
        model()(torch.randn(B, SEQ, LAYER + 1, dtype=torch.float64))


def test_gradcheck():
    d = torch.float64
    args = [
        torch.randn(1, 2, 6, dtype=d), torch.randn(1, 3, 6, dtype=d),
        torch.randn(2, 6, 4, dtype=d), torch.randn(2, 6, 4, dtype=d),
        torch.randn(2, 6, 3, dtype=d), torch.randn(2, 3, 6, dtype=d),
    ]  # fmt: skip
    for a in args:
        a.requires_grad_(True)
    variant = AttentionVariant(LinearBiases(2).double())
    assert torch.autograd.gradcheck(
        lambda x, m, *w: multihead(
            x, m, nt.AttentionWeights(*w), variant=variant, offset=1
        )[0],
        args,
    )


def test_bias_follows_the_slopes_device_and_dtype():
    slopes = alibi_slopes(HEADS, dtype=torch.float16, device="meta")
    bias = alibi_bias(SEQ_Q, SEQ, slopes, offset=2)
    assert bias.device.type == "meta" and bias.dtype == torch.float16
    assert bias.shape == (HEADS, SEQ_Q, SEQ)


def model_with(kind: str, norm_first: bool, seed: int, layers: int = 2, **config):
    """model_for, with extra config: grouped-query attention, a sliding window."""
    spec = make_spec("copy", kind, "tiny", vocab=VOCAB, positions="alibi")
    spec = replace(spec, config=replace(
        spec.config, norm_first=norm_first, dropout=0.0, encoder_layers=layers,
        decoder_layers=layers, **config,
    ))  # fmt: skip
    torch.manual_seed(seed)
    return build_model(spec).double().eval()


@pytest.mark.parametrize("kind", ["encoder-decoder", "decoder-only"])
@pytest.mark.parametrize(
    "norm_first, config",
    [(False, {}), (True, {}), (False, {"kv_heads": 1, "window": 3})],
)
def test_cached_decoding_equals_recomputing_the_prefix(kind, norm_first, config):
    model = model_with(kind, norm_first, 12, **config)
    found = [m for m in model.modules() if isinstance(m, LinearBiases)]
    # an encoder attends both ways, a decoder under the causal mask
    expected = [True] * 2 + [False] * 2 if kind == "encoder-decoder" else [False] * 2
    assert [m.symmetric for m in found] == expected
    start, args = prompt_and_source(kind)
    cached = greedy(IncrementalDecoder(model, *args), start, 8)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 8)
    assert torch.equal(cached.tokens, full.tokens)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-10  # float64
    model = model.float()
    cached = greedy(IncrementalDecoder(model, *args), start, 8)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 8)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-5


def test_compiled_decoding_equals_the_cache():
    """The compiled step (fullgraph, the position as a tensor) over the fixed cache
    gives the cache's tokens and log-probabilities (float64, 1e-10). One compile, on
    the richest configuration above (encoder-decoder, one key/value head, a window
    of 3); the tests above prove every configuration's cache against recomputation, and
    tests/test_compiled_decoding.py compiles the decoder-only step."""
    compiled_equals_cached(
        model_with("encoder-decoder", False, 12, kv_heads=1, window=3),
        "encoder-decoder",
    )


def test_a_model_with_alibi_compiles_with_fullgraph():
    """One encoder and one decoder layer: dynamo traces every layer's code, so a
    second layer would trace the same code again."""
    model = model_with("encoder-decoder", False, 2, layers=1).float()
    for attention in model.modules():
        if isinstance(getattr(attention, "positions", None), LinearBiases):
            attention.fused = True  # the bias as SDPA's float attn_mask
    source, target = torch.randint(4, VOCAB, (2, 7)), torch.randint(4, VOCAB, (2, 5))
    with nt.shape_checks(False):
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(source, target), model(source, target))
