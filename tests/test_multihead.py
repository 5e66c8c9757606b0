"""Multi-head attention: equal to nn.MultiheadAttention, to a per-head loop, to the NYU
notes' stacked W_qkv."""

import math

import pytest
import torch
from einops import rearrange
from jaxtyping import TypeCheckError
from torch import nn

import named_transformer as nt
from named_transformer.interop.pytorch import from_torch, mask_from_torch, to_torch
from named_transformer.models.multihead import (
    Heads,
    MultiHeadAttention,
    attend_projected,
    project_heads,
    project_qkv,
    stack_qkv,
    stacked_projection,
)


# The pipeline called with every weight an argument, as 0.4.0's functional forms were
# (the forms went in 0.9.0): project_qkv, then attend_projected.
def multihead_attention(
    inputs, memory, w_q, w_k, w_v, w_o, mask=None, b_q=None, b_k=None, b_v=None,
    b_o=None, dropout=0.0, training=False, fused=False, *, values_from=None,
    score_bias=None, block=None,
):  # fmt: skip
    weights = nt.AttentionWeights(w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o)
    heads = project_qkv(inputs, memory, weights, values_from=values_from)
    return attend_heads(
        heads.queries, heads.keys, heads.values, w_o, b_o, mask, dropout, training,
        fused, score_bias=score_bias, block=block,
    )  # fmt: skip


def multihead_self_attention(inputs, *weights, **options):
    return multihead_attention(inputs, inputs, *weights, **options)


def attend_heads(
    queries, keys, values, w_o, b_o=None, mask=None, dropout=0.0, training=False,
    fused=False, *, score_bias=None, block=None,
):  # fmt: skip
    core = nt.Fused() if fused else nt.Blockwise(block) if block else nt.Materialise()
    return attend_projected(
        Heads(queries, keys, values), w_o, b_o, mask,
        variant=nt.AttentionVariant(core=core), score_bias=score_bias,
        dropout=dropout if training else 0.0,
    )  # fmt: skip

# distinct sizes: batch 2, seq_q 3, seq 5, layer 12, heads 3 (key 4), memory 7
def recorded(module, names, *args, **kwargs):
    """``module(*args, **kwargs)``, then the values recorded under each of ``names``
    while it ran (a name with ``{}``: one tensor per layer). Forwards return only
    their output: the attention weights are recorded."""
    with nt.record(module, list(names)) as found:
        output = module(*args, **kwargs)

    def value(name):
        if "{}" in name:
            return [v.tensor for v in found.each(name)]
        return found[name].tensor

    return output, *map(value, names)


B, SEQ_Q, SEQ, LAYER, HEADS, MEMORY = 2, 3, 5, 12, 3, 7
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
PADDING = torch.tensor(
    [[False] * SEQ, [False] * (SEQ - 2) + [True] * 2]
)  # PyTorch: True = pad


def torch_pair(dtype, memory=LAYER, **options):
    theirs = (
        nn.MultiheadAttention(
            LAYER, HEADS, kdim=memory, vdim=memory, batch_first=True, **options
        )
        .to(dtype)
        .eval()
    )
    return theirs, from_torch(theirs)


CASES = {
    "self": dict(seq_q=SEQ, memory=LAYER, causal=False, padding=False),
    "self-causal": dict(seq_q=SEQ, memory=LAYER, causal=True, padding=False),
    "self-causal-padding": dict(seq_q=SEQ, memory=LAYER, causal=True, padding=True),
    "cross": dict(seq_q=SEQ_Q, memory=LAYER, causal=False, padding=True),
    "cross-memory-width": dict(seq_q=SEQ_Q, memory=MEMORY, causal=False, padding=True),
    "cross-causal-offset": dict(seq_q=SEQ_Q, memory=MEMORY, causal=True, padding=False),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_equals_torch_multihead_attention(dtype, case):
    c = CASES[case]
    theirs, ours = torch_pair(dtype, c["memory"])
    inputs = torch.randn(B, c["seq_q"], LAYER, dtype=dtype)
    memory = (
        inputs
        if c["seq_q"] == SEQ and c["memory"] == LAYER
        else torch.randn(B, SEQ, c["memory"], dtype=dtype)
    )
    causal = (
        nt.causal_mask(c["seq_q"], SEQ, offset=SEQ - c["seq_q"])
        if c["causal"]
        else None
    )
    padding = PADDING if c["padding"] else None
    expected, expected_weights = theirs(
        inputs, memory, memory, key_padding_mask=padding,
        attn_mask=None if causal is None else ~causal, average_attn_weights=False,
    )  # fmt: skip
    outputs, weights = recorded(ours, ["weights"], inputs, memory, mask_from_torch(
        None if causal is None else ~causal, padding))  # fmt: skip
    assert outputs.shape == (B, c["seq_q"], LAYER) and weights.shape == (
        B,
        HEADS,
        c["seq_q"],
        SEQ,
    )
    torch.testing.assert_close(outputs, expected, atol=TOL[dtype], rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=TOL[dtype], rtol=0)


def test_gradients_equal_torch_in_float64():
    theirs, ours = torch_pair(torch.float64, MEMORY)
    inputs = torch.randn(B, SEQ_Q, LAYER, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(B, SEQ, MEMORY, dtype=torch.float64, requires_grad=True)
    mine = ours(inputs, memory, mask_from_torch(None, PADDING))
    grads = torch.autograd.grad(
        mine.square().sum(), [inputs, memory, ours.w_q, ours.w_k, ours.w_o]
    )
    reference, _ = theirs(inputs, memory, memory, key_padding_mask=PADDING)
    expected = torch.autograd.grad(
        reference.square().sum(),
        [
            inputs,
            memory,
            theirs.q_proj_weight,
            theirs.k_proj_weight,
            theirs.out_proj.weight,
        ],
    )
    as_named = [
        expected[0],
        expected[1],
        rearrange(expected[2], "(heads key) layer -> heads layer key", heads=HEADS),
        rearrange(expected[3], "(heads key) memory -> heads memory key", heads=HEADS),
        rearrange(expected[4], "layer (heads val) -> heads val layer", heads=HEADS),
    ]
    for got, want in zip(grads, as_named, strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


def test_functional_gradcheck():
    d = torch.float64
    args = [
        torch.randn(1, 2, 4, dtype=d), torch.randn(1, 3, 5, dtype=d),
        torch.randn(2, 4, 3, dtype=d), torch.randn(2, 5, 3, dtype=d),
        torch.randn(2, 5, 2, dtype=d), torch.randn(2, 2, 4, dtype=d),
    ]  # fmt: skip
    for a in args:
        a.requires_grad_(True)
    mask = torch.tensor([[True, True, False], [True, False, True]])

    def output(*tensors):
        return multihead_attention(*tensors, mask)[0]

    assert torch.autograd.gradcheck(output, args)


def reference_loop(
    inputs, memory, m: MultiHeadAttention, mask=None, bias=None, xv=None
):
    """Bloem's equations, one head at a time, with the paper's softmax and scaling."""
    heads = []
    for h in range(m.heads):
        q = inputs @ m.w_q[h] + m.b_q[h]
        k = memory @ m.w_k[h] + m.b_k[h]
        v = (memory if xv is None else xv) @ m.w_v[h] + m.b_v[h]
        scores = q @ k.transpose(-1, -2) / math.sqrt(m.key)
        if bias is not None:
            scores = scores + bias
        if mask is not None:
            scores = scores.masked_fill(~mask, -torch.inf)
        heads.append(torch.softmax(scores, -1) @ v @ m.w_o[h])
    return sum(heads) + m.b_o


@pytest.mark.parametrize("wide", [False, True])
def test_equals_a_loop_over_heads_narrow_and_wide(wide):
    m = MultiHeadAttention(LAYER, HEADS, memory=MEMORY, wide=wide).double()
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    assert m.key == (LAYER if wide else LAYER // HEADS)
    inputs, memory = (
        torch.randn(B, SEQ_Q, LAYER).double(),
        torch.randn(B, SEQ, MEMORY).double(),
    )
    mask = nt.causal_mask(SEQ_Q, SEQ, offset=2)
    torch.testing.assert_close(
        m(inputs, memory, mask), reference_loop(inputs, memory, m, mask)
    )


def test_parameter_counts():
    narrow = MultiHeadAttention(LAYER, HEADS)
    assert narrow.num_parameters() == 4 * LAYER**2 + 4 * LAYER
    assert narrow.num_parameters() == sum(
        p.numel() for p in nn.MultiheadAttention(LAYER, HEADS).parameters()
    )
    assert MultiHeadAttention(LAYER, HEADS, bias=False).num_parameters() == 4 * LAYER**2
    wide = MultiHeadAttention(LAYER, HEADS, wide=True, bias=False)
    assert (
        wide.num_parameters() == 4 * HEADS * LAYER**2
    )  # W in R^{d x hd}: h times more
    cross = MultiHeadAttention(LAYER, HEADS, memory=MEMORY)
    theirs = nn.MultiheadAttention(LAYER, HEADS, kdim=MEMORY, vdim=MEMORY)
    assert cross.num_parameters() == 2 * LAYER**2 + 2 * LAYER * MEMORY + 4 * LAYER
    assert cross.num_parameters() == sum(p.numel() for p in theirs.parameters())


def test_narrow_heads_need_a_divisible_width():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(10, 3)
    assert MultiHeadAttention(10, 3, wide=True).key == 10
    assert MultiHeadAttention(10, 3, key=4).key == 4


def test_nyu_stacked_w_qkv_is_the_same_computation():
    m = MultiHeadAttention(LAYER, HEADS)
    inputs = torch.randn(B, SEQ, LAYER)
    w_qkv = stack_qkv(m.w_q, m.w_k, m.w_v)
    assert w_qkv.shape == (3 * LAYER, LAYER)
    q, k, v = stacked_projection(inputs, w_qkv, HEADS)
    for got, weight in zip((q, k, v), (m.w_q, m.w_k, m.w_v), strict=True):
        torch.testing.assert_close(got, project_heads(inputs, weight))
    torch.testing.assert_close(w_qkv, to_torch(m).in_proj_weight)  # PyTorch's layout


def test_self_attention_through_stacked_w_qkv_equals_the_general_equation():
    m = MultiHeadAttention(LAYER, HEADS).double()
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    x, mask = torch.randn(B, SEQ, LAYER).double(), nt.causal_mask(SEQ)
    weights = (m.w_q, m.w_k, m.w_v, m.w_o, mask, m.b_q, m.b_k, m.b_v, m.b_o)
    stacked = multihead_self_attention(x, *weights)
    general = multihead_attention(x, x, *weights)
    for got, want in zip(stacked, general, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        m(x, mask=mask), general[0], atol=1e-12, rtol=0
    )  # module path


@pytest.mark.parametrize("case", CASES)
def test_fused_option_equals_the_named_equations_and_their_gradients(case):
    c = CASES[case]
    named = MultiHeadAttention(LAYER, HEADS, memory=c["memory"]).double()
    fused = MultiHeadAttention(LAYER, HEADS, memory=c["memory"], fused=True).double()
    fused.load_state_dict(named.state_dict())
    inputs = torch.randn(B, c["seq_q"], LAYER, dtype=torch.float64, requires_grad=True)
    memory = (
        None
        if c["seq_q"] == SEQ and c["memory"] == LAYER
        else torch.randn(B, SEQ, c["memory"], dtype=torch.float64)
    )
    mask = (
        nt.causal_mask(c["seq_q"], SEQ, offset=SEQ - c["seq_q"])
        if c["causal"]
        else None
    )
    if c["padding"]:
        mask = mask_from_torch(None if mask is None else ~mask, PADDING)
        mask[0, 0] = False  # and one query that may attend nothing: zeros in both
    results = [m(inputs, memory, mask) for m in (named, fused)]
    torch.testing.assert_close(results[1], results[0], atol=1e-12, rtol=0)
    grads = [torch.autograd.grad(r.square().sum(), [inputs, m.w_q, m.w_k, m.w_v, m.w_o])
             for r, m in zip(results, (named, fused), strict=True)]  # fmt: skip
    for ours, reference in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(ours, reference, atol=1e-12, rtol=0)


def test_fused_option_gives_way_to_the_named_path_when_weights_are_recorded():
    fused = MultiHeadAttention(LAYER, HEADS, fused=True)
    inputs = torch.randn(B, SEQ, LAYER)
    outputs, weights = recorded(fused, ["weights"], inputs)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, HEADS, SEQ))
    torch.testing.assert_close(outputs, fused(inputs), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="fused"):
        MultiHeadAttention(LAYER, HEADS, positions=nt.Relative(2), fused=True)


def test_fused_option_reaches_the_fused_kernel_not_the_materialising_fallback():
    from torch.profiler import profile

    fused = MultiHeadAttention(LAYER, HEADS, fused=True)
    inputs = torch.randn(B, SEQ, LAYER, requires_grad=True)
    with profile() as trace:  # a (seq_q, seq) mask, lifted to the queries' four axes
        fused(inputs, mask=nt.causal_mask(SEQ)).sum().backward()
    kernels = {event.key for event in trace.key_averages()}
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in kernels
    assert "aten::_scaled_dot_product_attention_math" not in kernels


def test_fully_masked_query_gives_zeros_where_torch_gives_nan():
    theirs, ours = torch_pair(torch.float64)
    inputs = torch.randn(B, SEQ, LAYER, dtype=torch.float64)
    blocked = torch.zeros(SEQ, SEQ, dtype=torch.bool)
    blocked[0] = True  # query 0 may attend nothing
    expected, _ = theirs(inputs, inputs, inputs, attn_mask=blocked)
    outputs = ours(inputs, mask=mask_from_torch(blocked))
    assert expected[:, 0].isnan().all()
    torch.testing.assert_close(
        outputs[:, 0], ours.b_o.expand(B, LAYER)
    )  # zeros, then b^O
    torch.testing.assert_close(outputs[:, 1:], expected[:, 1:], atol=1e-10, rtol=0)


def test_to_torch_round_trip_and_batch_second():
    ours = MultiHeadAttention(LAYER, HEADS, memory=MEMORY).eval()
    theirs = to_torch(ours, batch_first=False)
    inputs, memory = torch.randn(B, SEQ_Q, LAYER), torch.randn(B, SEQ, MEMORY)
    as_seq_first = [
        rearrange(x, "batch seq layer -> seq batch layer") for x in (inputs, memory)
    ]
    expected, _ = theirs(as_seq_first[0], as_seq_first[1], as_seq_first[1])
    expected = rearrange(expected, "seq batch layer -> batch seq layer")
    torch.testing.assert_close(ours(inputs, memory), expected, atol=1e-5, rtol=0)
    back = from_torch(theirs)
    torch.testing.assert_close(back(inputs, memory), ours(inputs, memory))


def test_attention_dropout_only_while_training():
    m = MultiHeadAttention(LAYER, HEADS, dropout=0.5)
    inputs = torch.randn(B, SEQ, LAYER)
    out1, weights = recorded(m, ["weights"], inputs)
    out2 = m(inputs)
    assert not torch.allclose(out1, out2)  # dropout is random while training
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(B, HEADS, SEQ)
    )  # recorded before dropout
    m.eval()
    torch.testing.assert_close(m(inputs), m(inputs))


def test_keys_and_values_from_a_cache_give_the_same_output():
    """attend_heads takes projected keys/values: a later step can reuse earlier ones."""
    m = MultiHeadAttention(LAYER, HEADS).double()
    inputs = torch.randn(B, SEQ, LAYER).double()
    full = m(inputs, mask=nt.causal_mask(SEQ))
    keys = project_heads(inputs, m.w_k, m.b_k)
    values = project_heads(inputs, m.w_v, m.b_v)
    last_query = project_heads(inputs[:, -1:], m.w_q, m.b_q)
    last, _ = attend_heads(last_query, keys, values, m.w_o, m.b_o)
    torch.testing.assert_close(last, full[:, -1:])


BAD = {
    "inputs width vs w_q's layer": (lambda m: m(torch.randn(B, SEQ, LAYER + 1)), "w_q"),
    "memory width vs w_k's memory": (
        lambda m: m(torch.randn(B, SEQ_Q, LAYER), torch.randn(B, SEQ, MEMORY + 1)),
        "w_k",
    ),
    "mask length": (
        lambda m: m(
            torch.randn(B, SEQ, LAYER), mask=torch.ones(B, 1, SEQ + 1, dtype=torch.bool)
        ),
        "mask",
    ),
    "score_bias length": (
        lambda m: m(torch.randn(B, SEQ, LAYER), score_bias=torch.randn(SEQ, SEQ + 1)),
        "score_bias",
    ),
    "score_bias query length": (
        lambda m: m(torch.randn(B, SEQ, LAYER), score_bias=torch.randn(B, 2, SEQ)),
        "score_bias",
    ),
    "values_from length vs memory's seq": (
        lambda m: m(
            torch.randn(B, SEQ_Q, LAYER),
            torch.randn(B, SEQ, MEMORY),
            values_from=torch.randn(B, SEQ + 1, MEMORY),
        ),
        "values_from",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_module_rejects_wrong_axis_sizes(case):
    call, argument = BAD[case]
    m = MultiHeadAttention(LAYER, HEADS, memory=MEMORY if "memory" in case else None)
    with pytest.raises(TypeCheckError, match=argument):
        call(m)


def test_functions_reject_wrong_axis_sizes():
    x, w = torch.randn(B, SEQ, LAYER), torch.randn(HEADS, LAYER, 4)
    with pytest.raises(TypeCheckError, match="bias"):
        project_heads(x, w, torch.randn(HEADS, 5))
    q = torch.randn(B, HEADS, SEQ_Q, 4)
    kv = torch.randn(B, HEADS, SEQ, 4)
    with pytest.raises(TypeCheckError, match="w_o"):
        attend_heads(q, kv, kv, torch.randn(HEADS + 1, 4, LAYER))
    with pytest.raises(TypeCheckError, match="w_v"):
        multihead_attention(
            x, x, w, w, torch.randn(HEADS, LAYER + 1, 4), torch.randn(HEADS, 4, LAYER)
        )
    with pytest.raises(TypeCheckError, match="w_o"):
        multihead_self_attention(x, w, w, w, torch.randn(HEADS, 5, LAYER))
    with pytest.raises(TypeCheckError, match="w_qkv"):
        stacked_projection(x, torch.randn(3 * LAYER, LAYER + 1), HEADS)
    with pytest.raises(TypeCheckError, match="w_v"):
        stack_qkv(w, w, torch.randn(HEADS, LAYER, 5))
    with pytest.raises(TypeCheckError, match="key_padding_mask"):
        mask_from_torch(None, torch.ones(B, SEQ, SEQ, dtype=torch.bool))


def test_merge_heads_is_concatenate_then_linear_and_names_a_wrong_size():
    from jaxtyping import TypeCheckError

    from named_transformer import merge_heads

    heads_out, w_o, b_o = (
        torch.randn(2, 3, 5, 4),
        torch.randn(3, 4, 6),
        torch.randn(6),
    )  # batch heads seq_q val
    concatenated = heads_out.permute(0, 2, 1, 3).reshape(
        2, 5, 12
    )  # Bloem, NYU notes: [head_1; ...; head_h]
    expected = concatenated @ w_o.reshape(12, 6) + b_o
    torch.testing.assert_close(merge_heads(heads_out, w_o, b_o), expected)
    with pytest.raises(TypeCheckError, match="parameter 'w_o'"):
        merge_heads(heads_out, torch.randn(3, 5, 6))


def test_a_stack_materialises_weights_only_while_they_are_recorded():
    from torch.profiler import profile

    config = nt.TransformerConfig(
        encoder_layers=2, decoder_layers=2, layer=LAYER, heads=HEADS, hidden=16,
        dropout=0.0, fused_attention=True,
    )  # fmt: skip
    model = nt.Transformer(11, 13, config).eval()
    source, target = torch.randint(0, 11, (B, 5)), torch.randint(0, 13, (B, 4))
    with torch.no_grad(), profile() as trace:
        model(source, target)
    calls = {e.key: e.count for e in trace.key_averages()}
    # 2 encoder self-attentions + 2 decoder self- and 2 cross-attentions, all fused
    assert calls.get("aten::scaled_dot_product_attention") == 6, calls
    kinds = [f"stacks.{stack}.layers.{{}}.{attention}.weights"
             for stack, attention in (("encoder", "self_attention"),
                                      ("decoder", "self_attention"),
                                      ("decoder", "cross_attention"))]  # fmt: skip
    with torch.no_grad(), profile() as trace:
        _, *weights = recorded(model, kinds, source, target)
    assert [len(w) for w in weights] == [2, 2, 2]
    calls = {e.key: e.count for e in trace.key_averages()}
    assert "aten::scaled_dot_product_attention" not in calls, calls


def randomised_biases(m):
    with torch.no_grad():
        for b in (m.b_q, m.b_k, m.b_v, m.b_o):
            b.normal_()
    return m


@pytest.mark.parametrize("shape", [(SEQ_Q, SEQ), (B, SEQ_Q, SEQ), (B, 1, SEQ)])
def test_score_bias_is_shared_by_all_heads_like_the_mask(shape):
    m = randomised_biases(MultiHeadAttention(LAYER, HEADS, memory=MEMORY).double())
    inputs = torch.randn(B, SEQ_Q, LAYER).double()
    memory = torch.randn(B, SEQ, MEMORY).double()
    bias = 3 * torch.randn(*shape).double()
    mask = nt.causal_mask(SEQ_Q, SEQ, offset=2)
    got, weights = recorded(m, ["weights"], inputs, memory, mask, score_bias=bias)
    torch.testing.assert_close(got, reference_loop(inputs, memory, m, mask, bias))
    assert weights.shape == (B, HEADS, SEQ_Q, SEQ)
    # a bias of -inf where the mask blocks is the same attention as the mask
    as_bias = torch.zeros(SEQ_Q, SEQ).double().masked_fill(~mask, -torch.inf)
    torch.testing.assert_close(m(inputs, memory, score_bias=bias + as_bias), got)


@pytest.mark.parametrize("case", CASES)
def test_fused_option_with_a_score_bias_equals_the_named_equations(case):
    c = CASES[case]
    named = MultiHeadAttention(LAYER, HEADS, memory=c["memory"]).double()
    fused = MultiHeadAttention(LAYER, HEADS, memory=c["memory"], fused=True).double()
    fused.load_state_dict(named.state_dict())
    inputs = torch.randn(B, c["seq_q"], LAYER, dtype=torch.float64, requires_grad=True)
    memory = (
        None
        if c["seq_q"] == SEQ and c["memory"] == LAYER
        else torch.randn(B, SEQ, c["memory"], dtype=torch.float64)
    )
    bias = 2 * torch.randn(B, c["seq_q"], SEQ, dtype=torch.float64)
    bias[0, 0] = torch.finfo(torch.float64).min  # Hugging Face's padded query
    bias[1, 1, :2] = -torch.inf
    bias = bias.requires_grad_(True)
    mask = None
    if c["causal"]:
        mask = nt.causal_mask(c["seq_q"], SEQ, offset=SEQ - c["seq_q"])
    if c["padding"]:
        mask = mask_from_torch(None if mask is None else ~mask, PADDING)
        mask[1, 0] = False  # a query that may attend nothing: zeros in both
    results = [m(inputs, memory, mask, score_bias=bias) for m in (named, fused)]
    torch.testing.assert_close(results[1], results[0], atol=1e-12, rtol=0)
    grads = [
        torch.autograd.grad(r.square().sum(), [inputs, bias, m.w_q, m.w_v, m.w_o])
        for r, m in zip(results, (named, fused), strict=True)
    ]
    for ours, reference in zip(grads[1], grads[0], strict=True):
        assert torch.isfinite(reference).all()
        torch.testing.assert_close(ours, reference, atol=1e-12, rtol=0)


def test_stacked_self_attention_takes_the_score_bias_too():
    m = randomised_biases(MultiHeadAttention(LAYER, HEADS).double())
    x, bias = torch.randn(B, SEQ, LAYER).double(), torch.randn(SEQ, SEQ).double()
    weights = (m.w_q, m.w_k, m.w_v, m.w_o, None, m.b_q, m.b_k, m.b_v, m.b_o)
    stacked = multihead_self_attention(x, *weights, score_bias=bias)
    general = multihead_attention(x, x, *weights, score_bias=bias)
    torch.testing.assert_close(stacked[0], general[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(
        m(x, score_bias=bias), reference_loop(x, x, m, bias=bias)
    )


def test_values_from_a_source_of_their_own_width():
    value_memory = MEMORY + 2
    m = MultiHeadAttention(LAYER, HEADS, memory=MEMORY, value_memory=value_memory)
    m = randomised_biases(m.double())
    assert m.w_v.shape == (HEADS, value_memory, LAYER // HEADS)
    assert m.w_k.shape == (HEADS, MEMORY, LAYER // HEADS)
    theirs = nn.MultiheadAttention(LAYER, HEADS, kdim=MEMORY, vdim=value_memory)
    assert m.num_parameters() == sum(p.numel() for p in theirs.parameters())
    inputs = torch.randn(B, SEQ_Q, LAYER).double()
    memory = torch.randn(B, SEQ, MEMORY).double()
    sources = torch.randn(B, SEQ, value_memory).double()
    got = m(inputs, memory, values_from=sources)
    torch.testing.assert_close(got, reference_loop(inputs, memory, m, xv=sources))
    fused = MultiHeadAttention(
        LAYER, HEADS, memory=MEMORY, value_memory=value_memory, fused=True
    ).double()
    fused.load_state_dict(m.state_dict())
    torch.testing.assert_close(
        fused(inputs, memory, values_from=sources), got, atol=1e-12, rtol=0
    )
    # the same width as the keys' memory, different tensors: PyTorch allows it too
    same = randomised_biases(MultiHeadAttention(LAYER, HEADS).double())
    keys_from, values_from = torch.randn(2, B, SEQ, LAYER).double()
    torch.testing.assert_close(
        same(inputs, keys_from, values_from=values_from),
        reference_loop(inputs, keys_from, same, xv=values_from),
    )


def test_values_of_their_own_width_need_values_from():
    m = MultiHeadAttention(LAYER, HEADS, memory=MEMORY, value_memory=MEMORY + 2)
    inputs, memory = torch.randn(B, SEQ_Q, LAYER), torch.randn(B, SEQ, MEMORY)
    with pytest.raises(TypeCheckError, match="w_v.*values_from"):
        m(inputs, memory)
    with pytest.raises(TypeCheckError, match="w_v"):
        m(inputs, memory, values_from=torch.randn(B, SEQ, MEMORY + 3))


def test_self_attention_stacks_only_while_a_gradient_is_recorded(monkeypatch):
    """With a gradient (weights or, BitFit-like, only the biases), one product with
    the stacked W_qkv; without, three products; the same output either way."""
    from named_transformer.models import multihead

    stacked = []
    original = multihead.stacked_weights
    monkeypatch.setattr(
        multihead, "stacked_weights", lambda w: stacked.append(1) or original(w)
    )
    torch.manual_seed(0)
    m = MultiHeadAttention(LAYER, HEADS).double()
    x, mask = torch.randn(B, SEQ, LAYER).double(), nt.causal_mask(SEQ)
    with torch.no_grad():
        without = m(x, mask=mask)
    assert stacked == []
    with_gradient = m(x, mask=mask)
    assert stacked == [1]
    torch.testing.assert_close(with_gradient, without, atol=1e-12, rtol=0)
    for name, parameter in m.named_parameters():
        parameter.requires_grad_(name.startswith("b_"))
    m(x, mask=mask).sum().backward()
    assert stacked == [1, 1] and m.b_q.grad is not None



def test_a_positional_need_weights_of_before_0_11_is_a_type_error():
    """``need_weights`` went in 0.11.0 and ``offset`` is keyword-only, so an old call
    that passed ``True`` by position fails in one line instead of reading as
    ``offset=1``."""
    x = torch.randn(1, 3, 12)
    with pytest.raises(TypeError):
        nt.MultiHeadAttention(12, 3)(x, None, None, True)
    model = nt.Transformer(7, 7, nt.TransformerConfig(
        layer=12, heads=3, hidden=16, encoder_layers=1, decoder_layers=1))
    memory = torch.randn(1, 4, 12)
    with pytest.raises(TypeError):
        model.decode(torch.zeros(1, 3, dtype=torch.long), memory, None, None, True)
