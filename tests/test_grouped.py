"""Grouped-query and multi-query attention: the named broadcasting over ``group`` equals
repeating K and V per group (written here with plain torch) and PyTorch's
``scaled_dot_product_attention(enable_gqa=True)``; values, weights and gradients; the
fused option; the key/value cache holds kv_heads heads (bytes per token exactly
kv_heads/heads of the full cache) and equals recomputation; compile; bad inputs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from jaxtyping import TypeCheckError

import named_transformer as nt
from named_transformer.core.attention import fused_attention
from named_transformer.decoding import IncrementalDecoder, beam_search, greedy
from named_transformer.decoding.compiled import CompiledDecoder
from named_transformer.interop.pytorch import from_torch, to_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.grouped import group_queries, grouped_attention
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import MultiHeadAttention, stacked_weights
from named_transformer.models.transformer import Transformer
from tests.test_multihead import attend_heads, multihead_attention, recorded

# distinct sizes: batch 2, seq_q 3, seq 5, key 4, val 7, heads 6, layer 12, memory 9
B, SEQ_Q, SEQ, KEY, VAL, HEADS, LAYER, MEMORY = 2, 3, 5, 4, 7, 6, 12, 9
D = torch.float64
VOCAB = 13


def reference_attention(q, k, v, mask=None, bias=None):
    """Grouped-query attention the long way: repeat each key/value head for its group
    (``repeat_interleave`` along the heads), then ordinary attention per head."""
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.unsqueeze(-3)
    if mask is not None:
        scores = scores.masked_fill(~mask.unsqueeze(-3), -torch.inf)
    weights = torch.softmax(scores, -1)
    return weights @ v, weights


def qkv(kv_heads, seq_q=SEQ_Q, dtype=D, generator=None):
    q = torch.randn(B, HEADS, seq_q, KEY, dtype=dtype, generator=generator)
    k = torch.randn(B, kv_heads, SEQ, KEY, dtype=dtype, generator=generator)
    v = torch.randn(B, kv_heads, SEQ, VAL, dtype=dtype, generator=generator)
    return q, k, v


MASK = torch.rand(B, SEQ_Q, SEQ, generator=torch.Generator().manual_seed(0)) > 0.3
MASK[:, :, 0] = True  # every query keeps one key: the reference softmax stays finite


@pytest.mark.parametrize("kv_heads", [1, 2, 3, 6])
@pytest.mark.parametrize("masked", [False, True])
def test_grouped_attention_equals_repeated_keys_and_values_and_sdpa(kv_heads, masked):
    q, k, v = qkv(kv_heads)
    mask = MASK if masked else None
    bias = torch.randn(B, SEQ_Q, SEQ, dtype=D)
    expected, _ = reference_attention(q, k, v, mask, bias)
    ours = grouped_attention(q, k, v, mask, score_bias=bias)
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)
    sdpa_mask = bias if mask is None else bias.masked_fill(~mask, -torch.inf)
    sdpa = F.scaled_dot_product_attention(
        q, k, v, attn_mask=sdpa_mask.unsqueeze(1), enable_gqa=True
    )
    torch.testing.assert_close(ours, sdpa, atol=1e-12, rtol=0)
    over_heads = None if mask is None else mask.unsqueeze(1)  # shared by the heads
    fused = fused_attention(q, k, v, over_heads, score_bias=bias.unsqueeze(1))
    torch.testing.assert_close(fused, sdpa, atol=1e-12, rtol=0)


def test_query_head_h_reads_key_value_head_h_over_group():
    q, k, v = qkv(2)
    grouped = group_queries(q, 2)
    assert grouped.shape == (B, 2, HEADS // 2, SEQ_Q, KEY)
    for h in range(HEADS):  # (kv_heads group): kv_heads is the outer axis
        torch.testing.assert_close(grouped[:, h // 3, h % 3], q[:, h])
    out = grouped_attention(q, k, v)
    for h in range(HEADS):
        alone, _ = reference_attention(q[:, h : h + 1], k[:, h // 3 : h // 3 + 1],
                                       v[:, h // 3 : h // 3 + 1])  # fmt: skip
        torch.testing.assert_close(out[:, h : h + 1], alone, atol=1e-12, rtol=0)


def test_fully_masked_rows_give_zeros_not_nan_named_and_fused():
    q, k, v = qkv(2)
    mask = MASK.clone()
    mask[1, 2] = False  # query 2 of row 1 may attend nothing
    fused = fused_attention(q, k, v, mask[:, None])  # the mask lifted over the heads
    for out in (grouped_attention(q, k, v, mask), fused):
        assert torch.isfinite(out).all()
        assert (out[1, :, 2] == 0).all()


def test_gradcheck_of_the_grouped_equation():
    q, k, v = (t.requires_grad_(True) for t in qkv(3, seq_q=2))
    bias = torch.randn(B, 2, SEQ, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda *t: grouped_attention(*t[:3], MASK[:, :2], score_bias=t[3]),
        (q, k, v, bias),
    )


def reference_module(m: MultiHeadAttention, inputs, memory=None, mask=None):
    """The module's equation in plain torch: project, repeat K and V, attend, W^O."""
    memory = inputs if memory is None else memory
    q = torch.einsum("bsl,hlk->bhsk", inputs, m.w_q) + m.b_q[:, None]
    k = torch.einsum("bsl,hlk->bhsk", memory, m.w_k) + m.b_k[:, None]
    v = torch.einsum("bsl,hlk->bhsk", memory, m.w_v) + m.b_v[:, None]
    heads_out, weights = reference_attention(q, k, v, mask)
    return torch.einsum("bhsv,hvl->bsl", heads_out, m.w_o) + m.b_o, weights


def module(kv_heads, memory=None, **options):
    torch.manual_seed(kv_heads)
    m = MultiHeadAttention(LAYER, HEADS, memory=memory, kv_heads=kv_heads, **options)
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    return m.double()


@pytest.mark.parametrize("kv_heads", [1, 2, 3])
@pytest.mark.parametrize("cross", [False, True])
def test_module_values_weights_and_gradients_equal_repeating_k_and_v(kv_heads, cross):
    m = module(kv_heads, memory=MEMORY if cross else None)
    assert m.w_k.shape == (kv_heads, MEMORY if cross else LAYER, LAYER // HEADS)
    assert m.b_v.shape == (kv_heads, LAYER // HEADS)
    assert m._stackable is (not cross)  # one W_qkv of (heads + 2 kv_heads) key rows
    inputs = torch.randn(B, SEQ_Q if cross else SEQ, LAYER, dtype=D, requires_grad=True)
    memory = torch.randn(B, SEQ, MEMORY, dtype=D, requires_grad=True) if cross else None
    mask = MASK if cross else nt.causal_mask(SEQ)
    ours, weights = recorded(m, ["weights"], inputs, memory, mask)
    expected, expected_weights = reference_module(m, inputs, memory, mask)
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)
    assert weights.shape == (B, HEADS, inputs.shape[1], SEQ)  # one per query head
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)
    leaves = [inputs, *([memory] if cross else []), *m.parameters()]
    grads = torch.autograd.grad(ours.square().sum(), leaves)
    reference_grads = torch.autograd.grad(expected.square().sum(), leaves)
    for got, want in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_a_grouped_module_is_a_multihead_module_with_k_and_v_tied_per_group():
    gqa = module(2)
    mha = MultiHeadAttention(LAYER, HEADS).double()
    with torch.no_grad():
        for name in ("w_q", "w_o", "b_q", "b_o"):
            getattr(mha, name).copy_(getattr(gqa, name))
        for name in ("w_k", "w_v", "b_k", "b_v"):  # each K/V head copied to its group
            getattr(mha, name).copy_(getattr(gqa, name).repeat_interleave(3, dim=0))
    assert mha._stackable  # the full-heads module keeps its stacked W_qkv
    inputs = torch.randn(B, SEQ, LAYER, dtype=D)
    mask = nt.causal_mask(SEQ)
    torch.testing.assert_close(gqa(inputs, mask=mask), mha(inputs, mask=mask))
    # and K/V weights are |group| times smaller
    assert mha.num_parameters() - gqa.num_parameters() == 2 * (HEADS - 2) * 2 * (
        LAYER + 1
    )


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_fused_option_equals_the_named_path_values_and_gradients(kv_heads):
    named = module(kv_heads)
    fused = module(kv_heads, fused=True)
    fused.load_state_dict(named.state_dict())
    inputs = torch.randn(B, SEQ, LAYER, dtype=D, requires_grad=True)
    mask = nt.causal_mask(SEQ) & MASK[:, :1, :]  # causal and padded keys
    a, b = named(inputs, mask=mask), fused(inputs, mask=mask)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    ga = torch.autograd.grad(a.sum(), [inputs, *named.parameters()])
    gb = torch.autograd.grad(b.sum(), [inputs, *fused.parameters()])
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=0)
    # recording the weights takes the named path even when fused
    _, weights = recorded(fused, ["weights"], inputs, mask=mask)
    _, expected = recorded(named, ["weights"], inputs, mask=mask)
    torch.testing.assert_close(weights, expected)


@pytest.mark.parametrize("kv_heads", [1, 2, 3])
@pytest.mark.parametrize("positions", ["none", "alibi", "rotary"])
def test_the_fused_core_takes_grouped_heads_as_they_are(kv_heads, positions):
    """The fused core hands heads and kv_heads to the kernel (enable_gqa, no split):
    equal to the materialising core's split, values and gradients, causal and padded
    masks, a fully masked row, a per-head score term (ALiBi)."""
    scheme = {"none": nt.PositionScheme(), "alibi": nt.ALiBi(), "rotary": nt.Rotary()}
    named = module(kv_heads, materialise=True, positions=scheme[positions])
    fused = module(kv_heads, fused=True, positions=scheme[positions])
    fused.load_state_dict(named.state_dict())
    inputs = torch.randn(B, SEQ, LAYER, dtype=D, requires_grad=True)
    mask = nt.causal_mask(SEQ) & MASK[:, :1, :]
    mask[1, 3] = False  # a query with no key: zeros, zero gradient
    a, b = named(inputs, mask=mask), fused(inputs, mask=mask)
    torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    ga = torch.autograd.grad(a.square().sum(), [inputs, *named.parameters()])
    gb = torch.autograd.grad(b.square().sum(), [inputs, *fused.parameters()])
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, atol=1e-10, rtol=0)


def test_functional_forms_agree():
    m = module(3)
    inputs = torch.randn(B, SEQ, LAYER, dtype=D)
    args = (m.w_q, m.w_k, m.w_v, m.w_o, nt.causal_mask(SEQ),
            m.b_q, m.b_k, m.b_v, m.b_o)  # fmt: skip
    out, weights = multihead_attention(inputs, inputs, *args)
    torch.testing.assert_close(out, m(inputs, mask=nt.causal_mask(SEQ)))
    q = nt.project_heads(inputs, m.w_q, m.b_q)
    k = nt.project_heads(inputs, m.w_k, m.b_k)
    v = nt.project_heads(inputs, m.w_v, m.b_v)
    again, _ = attend_heads(q, k, v, m.w_o, m.b_o, nt.causal_mask(SEQ))
    torch.testing.assert_close(again, out)
    assert weights.shape == (B, HEADS, SEQ, SEQ)


def test_kv_heads_must_divide_heads():
    with pytest.raises(ValueError, match=r"kv_heads=4 must divide heads=6"):
        MultiHeadAttention(LAYER, HEADS, kv_heads=4)
    with pytest.raises(ValueError, match=r"kv_heads=0 must divide heads=6"):
        MultiHeadAttention(LAYER, HEADS, kv_heads=0)
    with pytest.raises(ValueError, match=r"kv_heads=4 must divide heads=6"):
        TransformerConfig(layer=LAYER, heads=HEADS, kv_heads=4)
    q, k, _ = qkv(4)
    with pytest.raises(ValueError, match=r"kv_heads=4 must divide heads=6"):
        group_queries(q, 4)
    with pytest.raises(ValueError, match=r"kv_heads=4 must divide heads=6"):
        grouped_attention(q, k, k)
    with pytest.raises(ValueError, match=r"kv_heads=4 must divide heads=6"):
        fused_attention(q, k, k)
    assert MultiHeadAttention(LAYER, HEADS).kv_heads == HEADS  # default: multi-head


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda q, k, v: grouped_attention(q, k[..., :-1], v), "keys"),
        (lambda q, k, v: grouped_attention(q, k, v[:, :1]), "values"),
        (lambda q, k, v: grouped_attention(q, k, v, MASK[..., :-1]), "mask"),
        (lambda q, k, v: fused_attention(q, k, v[..., :-1, :]), "values"),
        (lambda q, k, v: group_queries(q[0, 0], 2), "queries"),
    ],
)  # fmt: skip
def test_wrong_shapes_name_the_argument(call, argument):
    with pytest.raises(TypeCheckError) as error:
        call(*qkv(2))
    assert f"'{argument}'" in str(error.value).splitlines()[0]


def test_a_grouped_module_blames_its_input():
    m = MultiHeadAttention(LAYER, HEADS, kv_heads=2)
    with pytest.raises(TypeCheckError) as error:
        m(torch.randn(B, SEQ, LAYER + 1))
    first = str(error.value).splitlines()[0]
    assert first.startswith("axis 'layer'") and "'inputs'" in first.rsplit(" but ")[-1]


def test_to_torch_refuses_grouped_attention_and_from_torch_gives_multihead():
    with pytest.raises(ValueError, match="grouped-query attention.*kv_heads=2"):
        to_torch(MultiHeadAttention(LAYER, HEADS, kv_heads=2))
    with pytest.raises(ValueError, match="no nn.MultiheadAttention counterpart"):
        to_torch(nt.EncoderLayer(LAYER, HEADS, 20, kv_heads=3))
    ours = from_torch(torch.nn.MultiheadAttention(LAYER, HEADS, batch_first=True))
    assert ours.kv_heads == ours.heads == HEADS


# ------------------------------------------------------------------ models and cache


def config(kv_heads, layers=2, **options):
    return TransformerConfig(
        encoder_layers=layers, decoder_layers=layers, layer=LAYER, heads=HEADS,
        hidden=20, dropout=0.0, kv_heads=kv_heads, **options,
    )  # fmt: skip


def language_model(kv_heads, seed=0, **options):
    torch.manual_seed(seed)
    return LanguageModel(VOCAB, config(kv_heads, **options)).double().eval()


def transformer(kv_heads, seed=0, **options):
    torch.manual_seed(seed)
    return Transformer(11, VOCAB, config(kv_heads, **options)).double().eval()


def test_the_config_reaches_every_self_attention_and_no_cross_attention():
    model = transformer(2)
    stacks = model.stacks
    for layer in [*stacks.encoder.layers, *stacks.decoder.layers]:
        assert layer.self_attention.kv_heads == 2
    for layer in stacks.decoder.layers:
        assert layer.cross_attention.kv_heads == HEADS
    assert all(b.self_attention.kv_heads == 1 for b in language_model(1).blocks.layers)
    assert language_model(None).blocks.layers[0].self_attention.kv_heads == HEADS


@settings(deadline=None, max_examples=8)
@given(
    kind=st.sampled_from(["decoder-only", "encoder-decoder"]),
    kv_heads=st.sampled_from([1, 2, 3]),
    norm_first=st.booleans(),
    seed=st.integers(0, 2**16),
    prefix=st.integers(1, 4),
    steps=st.integers(1, 6),
)
def test_cached_grouped_decoding_equals_recomputing(
    kind, kv_heads, norm_first, seed, prefix, steps
):
    build = language_model if kind == "decoder-only" else transformer
    model = build(kv_heads, seed, norm_first=norm_first)
    generator = torch.Generator().manual_seed(seed)
    start = torch.randint(4, VOCAB, (2, prefix), generator=generator)
    args = () if kind == "decoder-only" else (torch.randint(4, 11, (2, 6)),)
    cached = greedy(IncrementalDecoder(model, *args), start, steps)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, steps)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.log_probs, full.log_probs, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_cached_grouped_decoding_in_float32_is_within_1e_5(kind):
    build = language_model if kind == "decoder-only" else transformer
    model = build(2, 5).float()
    start = torch.randint(4, VOCAB, (3, 2))
    args = () if kind == "decoder-only" else (torch.randint(4, 11, (3, 7)),)
    cached = greedy(IncrementalDecoder(model, *args), start, 20)
    full = greedy(IncrementalDecoder(model, *args, cache=False), start, 20)
    beams = [beam_search(IncrementalDecoder(model, *args, cache=c), start, 8, eos=2,
                         width=3) for c in (True, False)]  # fmt: skip
    assert torch.equal(cached.tokens, full.tokens)
    assert (cached.log_probs - full.log_probs).abs().max() <= 1e-5
    assert torch.equal(beams[0].tokens, beams[1].tokens)


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_the_cache_holds_kv_heads_heads_and_its_bytes_per_token_shrink_exactly(kind):
    build = language_model if kind == "decoder-only" else transformer
    start = torch.randint(4, VOCAB, (2, 3))
    args = () if kind == "decoder-only" else (torch.randint(4, 11, (2, 6)),)
    sizes = {}
    for kv_heads in (HEADS, 2, 1):
        decoder = IncrementalDecoder(build(kv_heads), *args)
        greedy(decoder, start, 7)  # 3 + 6 positions fed: the last token is not
        assert decoder.caches[0].keys.shape[:2] == (2, kv_heads)
        assert decoder.caches[0].keys.shape[-1] == LAYER // HEADS
        sizes[kv_heads] = decoder.cache_bytes() / decoder.length
        allocated = decoder.cache_bytes(allocated=True)
        assert allocated >= decoder.cache_bytes()
        # layers x (keys, values) x batch x kv_heads x key x 8 bytes (float64)
        assert sizes[kv_heads] == 2 * 2 * 2 * kv_heads * (LAYER // HEADS) * 8
    assert sizes[2] / sizes[HEADS] == 2 / HEADS and sizes[1] / sizes[HEADS] == 1 / HEADS


def test_compiled_decoding_supports_grouped_attention():
    model = language_model(2, 3)
    start = torch.randint(4, VOCAB, (2, 3))
    compiled = CompiledDecoder(model, capacity=10, backend="eager")
    ours = greedy(compiled, start, 7)
    reference = greedy(IncrementalDecoder(model), start, 7)
    assert compiled.caches[0].keys.shape == (2, 2, 10, LAYER // HEADS)
    assert torch.equal(ours.tokens, reference.tokens)
    torch.testing.assert_close(ours.log_probs, reference.log_probs, rtol=0, atol=1e-10)
    # the fixed buffers are capacity-sized; the positions seen are what is held
    per_position = 2 * 2 * 2 * 2 * (LAYER // HEADS) * 8  # layers, k/v, batch, kv_heads
    assert compiled.length == 9  # the last token chosen is not fed back
    assert compiled.cache_bytes() == per_position * 9
    assert compiled.cache_bytes(allocated=True) == per_position * 10


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_a_model_with_grouped_attention_compiles_with_fullgraph(kind):
    """One layer a stack: dynamo traces every layer's code, so a second layer would
    trace the same code again."""
    tokens = torch.randint(0, VOCAB, (2, 7))
    if kind == "decoder-only":  # multi-query
        model, args = language_model(1, layers=1), (tokens,)
    else:  # grouped-query and a sliding window
        model = transformer(2, layers=1, window=3)
        args = (torch.randint(0, 11, (2, 5)), tokens)
    with nt.shape_checks(False):
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(*args), model(*args))


def test_fused_grouped_attention_compiles_with_fullgraph():
    q, k, v = qkv(2)
    with nt.shape_checks(False):
        compiled = torch.compile(fused_attention, backend="eager",
                                 fullgraph=True)  # fmt: skip
        torch.testing.assert_close(
            compiled(q, k, v, MASK[:, None]), grouped_attention(q, k, v, MASK)
        )


def test_tensors_follow_the_inputs_device():
    q, k, v = (t.to("meta") for t in qkv(2))
    assert grouped_attention(q, k, v).device.type == "meta"
    m = MultiHeadAttention(LAYER, HEADS, kv_heads=3).to("meta")
    assert m(torch.empty(B, SEQ, LAYER, device="meta")).device.type == "meta"


@pytest.mark.parametrize("positions", ["rotary", "alibi", "relative"])
def test_model_kinds_keep_kv_heads(positions):
    # relative positions too, since the one pipeline (0.5.0): the terms follow the
    # query heads
    from named_transformer.workflows.runner import build_model, make_spec

    spec = make_spec("copy", "encoder-decoder", "tiny", vocab=14, positions=positions)
    spec = replace(spec, config=replace(spec.config, kv_heads=1))
    model = build_model(spec)
    layers = [*model.stacks.encoder.layers, *model.stacks.decoder.layers]
    assert all(layer.self_attention.kv_heads == 1 for layer in layers)


@pytest.mark.parametrize("kv_heads", [1, 2, 3])
def test_stacked_w_qkv_of_grouped_weights_is_the_same_computation(kv_heads):
    """The stacked W_qkv with fewer key/value heads, (heads + 2 kv_heads) key rows,
    projects exactly what the three weights do, biases included."""
    m = module(kv_heads)
    x = torch.randn(B, SEQ, LAYER, dtype=D)
    w_qkv, b_qkv = stacked_weights(m.named_weights())
    assert w_qkv.shape == ((HEADS + 2 * kv_heads) * (LAYER // HEADS), LAYER)
    heads = nt.stacked_projection(x, w_qkv, HEADS, b_qkv, kv_heads=kv_heads)
    weights = ((m.w_q, m.b_q), (m.w_k, m.b_k), (m.w_v, m.b_v))
    for got, (weight, bias) in zip(heads, weights, strict=True):
        torch.testing.assert_close(got, nt.project_heads(x, weight, bias))
