"""Blockwise attention (online softmax): the same function as the materialising
``nt.attention`` and as SDPA, in values and gradients, for every kind of mask; the
module and config option; the blocks it skips; torch.compile."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import named_transformer as nt
from named_transformer.core import blockwise
from named_transformer.core.blockwise import blockwise_attention
from named_transformer.models.multihead import MultiHeadAttention
from tests.test_multihead import recorded

# a distinct size for every axis: batch 2, heads 3, seq_q 29, seq 37, key 5, val 6
B, HEADS, SEQ_Q, SEQ, KEY, VAL = 2, 3, 29, 37, 5, 6
TOL = {torch.float32: 1e-5, torch.float64: 1e-10}
MIN = {dtype: torch.finfo(dtype).min for dtype in TOL}


def qkv(seq_q=SEQ_Q, seq=SEQ, dtype=torch.float64, batch=(B, HEADS)):
    def make(*shape):
        return torch.randn(*batch, *shape, dtype=dtype, requires_grad=True)

    return make(seq_q, KEY), make(seq, KEY), make(seq, VAL)


def assert_same_values_and_gradients(got, expected, inputs, tol):
    """``got`` equals ``expected``, and so do their gradients for ``inputs``."""
    torch.testing.assert_close(got, expected, atol=tol, rtol=0)
    for ours, reference in zip(
        torch.autograd.grad(got.sum(), inputs),
        torch.autograd.grad(expected.sum(), inputs),
        strict=True,
    ):
        assert ours.shape == reference.shape
        torch.testing.assert_close(ours, reference, atol=tol, rtol=0)


def random_mask(*shape):
    """Random, with a fully masked query row and a fully masked block of 8 x 8."""
    mask = torch.rand(*shape) > 0.3
    mask[..., 2, :] = False  # a query that may attend nothing: zeros, not NaN
    mask[..., 8:16, :8] = False  # a block of keys hidden from a block of queries
    return mask


def score_bias(seq_q, seq, dtype):
    """Random finite values, -inf entries (they block) and the dtype's most negative
    number (Hugging Face's mask: it does not block), a row of each."""
    bias = 3 * torch.randn(seq_q, seq, dtype=dtype)
    bias = bias.masked_fill(torch.rand(seq_q, seq) < 0.2, MIN[dtype])
    bias = bias.masked_fill(torch.rand(seq_q, seq) < 0.2, -torch.inf)
    bias[4] = MIN[dtype]  # every key pushed down equally: uniform weights
    bias[5] = -torch.inf  # every key blocked: zeros
    return bias.requires_grad_()


def kinds(dtype):
    """name -> (seq_q, keyword arguments of blockwise_attention, the mask of the
    materialising path)."""
    offset = SEQ - SEQ_Q
    padding = nt.key_padding_mask(torch.tensor([SEQ, 11]), SEQ)  # batch 1 seq
    padding = padding[:, None]  # batch 1 1 seq: one mask for every head and query
    mask = random_mask(B, HEADS, SEQ_Q, SEQ)
    causal = nt.causal_mask(SEQ_Q, SEQ, offset=offset)
    return {
        "none": (SEQ_Q, {}, None),
        "causal": (SEQ, {"causal": True}, nt.causal_mask(SEQ)),
        "causal-offset": (
            SEQ_Q,
            {"causal": True, "offset": offset},
            causal,
        ),  # a cache: seq_q < seq, the first query at position seq - seq_q
        "causal-tensor": (SEQ_Q, {"mask": causal}, causal),
        "padding": (SEQ_Q, {"mask": padding}, padding),
        "random-boolean": (SEQ_Q, {"mask": mask}, mask),
        "score-bias": (
            SEQ_Q,
            {"score_bias": score_bias(SEQ_Q, SEQ, dtype)},
            None,
        ),
        "bias-mask-causal": (
            SEQ_Q,
            {
                "mask": mask,
                "score_bias": score_bias(SEQ_Q, SEQ, dtype),
                "causal": True,
                "offset": offset - 3,  # the first queries see nothing at all
            },
            mask & nt.causal_mask(SEQ_Q, SEQ, offset=offset - 3),
        ),
    }


def both(seq_q, options, reference_mask, block, dtype):
    """(blockwise output, materialising output, their gradients) for one case."""
    queries, keys, values = qkv(seq_q, dtype=dtype)
    bias = options.get("score_bias")
    inputs = [queries, keys, values] + ([bias] if bias is not None else [])
    got = blockwise_attention(queries, keys, values, block=block, **options)
    expected = nt.attention(queries, keys, values, reference_mask, score_bias=bias)
    grad = torch.randn_like(expected)
    got_grads = torch.autograd.grad(got, inputs, grad)
    expected_grads = torch.autograd.grad(expected, inputs, grad)
    return got, expected, got_grads, expected_grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("block", [7, 33, 64])  # 7, 33 do not divide 29 or 37
@pytest.mark.parametrize("kind", list(kinds(torch.float64)))
def test_equals_the_materialising_attention_in_values_and_gradients(kind, block, dtype):
    seq_q, options, reference_mask = kinds(dtype)[kind]
    got, expected, got_grads, expected_grads = both(
        seq_q, options, reference_mask, block, dtype
    )
    tolerance = TOL[dtype]
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=0)
    names = ["queries", "keys", "values", "score_bias"]
    for name, ours, reference in zip(names, got_grads, expected_grads, strict=False):
        assert torch.isfinite(ours).all(), name
        torch.testing.assert_close(ours, reference, atol=tolerance, rtol=0, msg=name)


def test_a_query_with_no_allowed_key_gets_zeros_and_zero_gradients_never_nan():
    queries, keys, values = qkv()
    mask = random_mask(SEQ_Q, SEQ)
    bias = score_bias(SEQ_Q, SEQ, torch.float64)
    outputs = blockwise_attention(queries, keys, values, mask, 8, score_bias=bias)
    dead = ~mask.any(-1) | (bias == -torch.inf).all(-1)  # rows 2 and 5
    assert dead.sum() >= 2
    assert torch.equal(outputs[..., dead, :], torch.zeros_like(outputs[..., dead, :]))
    grads = torch.autograd.grad(outputs.square().sum(), (queries, bias))
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(grads[0][..., dead, :], torch.zeros_like(grads[0][..., dead, :]))
    assert torch.equal(grads[1][dead], torch.zeros_like(grads[1][dead]))


def test_keys_with_a_size_one_heads_axis_and_a_bias_per_key_broadcast():
    queries = torch.randn(B, HEADS, SEQ_Q, KEY, dtype=torch.float64, requires_grad=True)
    keys, values = (
        torch.randn(B, 1, SEQ, width, dtype=torch.float64, requires_grad=True)
        for width in (KEY, VAL)
    )  # multi-query attention: one key/value head for every query head
    bias = torch.randn(1, SEQ, dtype=torch.float64, requires_grad=True)  # ALiBi-like
    got = blockwise_attention(queries, keys, values, block=9, score_bias=bias)
    expected = nt.attention(queries, keys, values, score_bias=bias)
    inputs = (queries, keys, values, bias)
    assert_same_values_and_gradients(got, expected, inputs, 1e-10)


@pytest.mark.parametrize("grows", ["values", "mask"])
def test_values_or_a_mask_with_more_batch_axes_than_the_scores_broadcast(grows):
    """The scores of one block have the batch axes of the queries and keys; values or
    a mask may bring more. The blocks are then updated out of place (in place, they
    could not grow), forward and backward. Checks off: the annotations would bind
    ``batch`` to the queries' axes."""
    queries, keys, values = qkv(batch=(1,))
    if grows == "values":
        values = torch.randn(B, SEQ, VAL, dtype=torch.float64, requires_grad=True)
    mask = random_mask(B, SEQ_Q, SEQ) if grows == "mask" else None
    with nt.shape_checks(False):
        got = blockwise_attention(queries, keys, values, mask, block=8)
        expected = nt.attend(nt.attention_weights(queries, keys, mask), values)
        assert_same_values_and_gradients(got, expected, (queries, keys, values), 1e-10)


def test_second_derivatives_are_refused_in_one_line():
    """The recomputing backward pass is not itself differentiable: asked for a graph
    of the gradient, it says so instead of returning a wrong one."""
    queries, keys, values = qkv(6, 7, batch=(2,))
    loss = blockwise_attention(queries, keys, values, block=3).sum() + (
        queries**3
    ).sum()  # a second term that is differentiable twice
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        torch.autograd.grad(loss, queries, create_graph=True)


@pytest.mark.parametrize("batch", [(), (B,), (B, HEADS)], ids=["0", "1", "2"])
def test_equals_sdpa_causal_and_with_a_float_mask(batch):
    queries, keys, values = (
        x.detach().float() for x in qkv(SEQ, batch=batch)
    )  # seq_q = seq: SDPA's is_causal is the top-left triangle
    torch.testing.assert_close(
        blockwise_attention(queries, keys, values, block=8, causal=True),
        F.scaled_dot_product_attention(queries, keys, values, is_causal=True),
        atol=1e-5,
        rtol=0,
    )
    bias = 2 * torch.randn(SEQ, SEQ)
    mask = torch.rand(SEQ, SEQ) > 0.5
    mask[:, 0] = True  # SDPA gives NaN for a query with no key
    torch.testing.assert_close(
        blockwise_attention(queries, keys, values, mask, 8, score_bias=bias),
        F.scaled_dot_product_attention(
            queries, keys, values, attn_mask=bias.masked_fill(~mask, -torch.inf)
        ),
        atol=1e-5,
        rtol=0,
    )


@settings(deadline=None, max_examples=40)
@given(
    seq_q=st.integers(1, 12),
    seq=st.integers(1, 12),
    block=st.integers(1, 13),
    causal=st.booleans(),
    offset=st.integers(-3, 6),
    with_mask=st.booleans(),
    with_bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_property_any_sizes_blocks_and_masks_equal_the_materialising_path(
    seq_q, seq, block, causal, offset, with_mask, with_bias, seed
):
    generator = torch.Generator().manual_seed(seed)

    def make(*shape):
        return torch.randn(
            2, *shape, dtype=torch.float64, generator=generator
        ).requires_grad_()

    queries, keys, values = make(seq_q, 3), make(seq, 3), make(seq, 2)
    mask = torch.rand(seq_q, seq, generator=generator) > 0.4 if with_mask else None
    bias = make(seq_q, seq) if with_bias else None
    reference = mask
    if causal:
        rule = nt.causal_mask(seq_q, seq, offset=offset)
        reference = rule if mask is None else mask & rule
    got = blockwise_attention(
        queries, keys, values, mask, block,
        score_bias=bias, causal=causal, offset=offset,
    )  # fmt: skip
    expected = nt.attention(queries, keys, values, reference, score_bias=bias)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)
    inputs = [x for x in (queries, keys, values, bias) if x is not None]
    for ours, theirs in zip(
        torch.autograd.grad(got.sum(), inputs),
        torch.autograd.grad(expected.sum(), inputs),
        strict=True,
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)


def test_gradcheck_of_the_recomputing_backward_pass():
    queries, keys, values = qkv(6, 7, batch=(2,))
    bias = torch.randn(6, 7, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(6, 7) > 0.3

    def output(queries, keys, values, bias):
        return blockwise_attention(
            queries, keys, values, mask, 3, score_bias=bias, causal=True, offset=1
        )

    assert (
        "_BlockwiseAttention"
        in type(output(queries, keys, values, bias).grad_fn).__name__
    )
    assert torch.autograd.gradcheck(output, (queries, keys, values, bias))


def counting(monkeypatch):
    """How many blocks of scores the online softmax consumes, call by call."""
    calls = []
    step = blockwise._online_softmax

    def count(*args, **kwargs):
        calls.append(args[0].shape[-2:])
        return step(*args, **kwargs)

    monkeypatch.setattr(blockwise, "_online_softmax", count)
    return calls


def test_the_causal_option_skips_the_blocks_above_the_diagonal(monkeypatch):
    calls = counting(monkeypatch)
    queries, keys, values = (x.detach() for x in qkv(64, 64))
    blockwise_attention(queries, keys, values, block=16, causal=True)
    assert len(calls) == 4 + 3 + 2 + 1  # of 16: the lower triangle of 4 x 4 blocks
    calls.clear()
    blockwise_attention(queries, keys, values, block=16)
    assert len(calls) == 16
    calls.clear()  # a cache: 8 new queries after 56 positions see every block
    blockwise_attention(queries[..., :8, :], keys, values, block=16, causal=True,
                        offset=56)  # fmt: skip
    assert len(calls) == 4


def test_a_mask_tensor_skips_hidden_blocks_eagerly_and_computes_all_compiled(
    monkeypatch,
):
    calls = counting(monkeypatch)
    queries, keys, values = (x.detach() for x in qkv(64, 64))
    mask = nt.causal_mask(64)
    expected = blockwise_attention(queries, keys, values, mask, 16)
    assert len(calls) == 10
    calls.clear()
    # what torch.compile sees: no look at the mask, every block computed
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = blockwise_attention(queries, keys, values, mask, 16)
    assert len(calls) == 16
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_dropout_in_one_block_draws_the_materialising_paths_mask():
    """With one block, the blockwise path draws the dropout mask of the same shape as
    the materialising path: with the same seed, the same function exactly."""
    queries, keys, values = qkv()
    mask = random_mask(SEQ_Q, SEQ)
    torch.manual_seed(3)
    got = blockwise_attention(
        queries, keys, values, mask, SEQ, dropout=0.4, training=True
    )
    torch.manual_seed(3)
    weights = nt.attention_weights(queries, keys, mask)
    expected = nt.attend(nt.dropout(weights, 0.4, True), values)
    assert not torch.allclose(got, nt.attention(queries, keys, values, mask))
    assert_same_values_and_gradients(got, expected, (queries, keys, values), 1e-12)


def test_dropout_over_many_blocks_keeps_zeros_for_blocked_queries():
    queries, keys, values = qkv()
    mask = random_mask(SEQ_Q, SEQ)
    got = blockwise_attention(
        queries, keys, values, mask, 5, dropout=0.5, training=True
    )
    assert torch.isfinite(got).all()
    assert torch.equal(got[..., 2, :], torch.zeros_like(got[..., 2, :]))
    evaluated = blockwise_attention(queries, keys, values, mask, 5, dropout=0.5)
    torch.testing.assert_close(evaluated, nt.attention(queries, keys, values, mask))


@pytest.mark.parametrize("block", [0, -3, True])
def test_a_block_size_that_is_not_a_positive_number_is_refused(block):
    queries, keys, values = qkv()
    with pytest.raises(ValueError, match="block"):
        blockwise_attention(queries, keys, values, block=block)
    with pytest.raises(ValueError, match="block"):
        MultiHeadAttention(12, 3, block=block)
    if block is not True:
        with pytest.raises(ValueError, match="attention_block"):
            nt.TransformerConfig(attention_block=block)


def test_block_excludes_fused_and_serves_grouped_heads():
    with pytest.raises(ValueError, match="fused"):
        MultiHeadAttention(12, 3, fused=True, block=4)
    # grouped key/value heads run blockwise since the one pipeline (0.5.0)
    grouped = MultiHeadAttention(12, 4, kv_heads=2, block=4).double()
    inputs = torch.randn(2, 9, 12, dtype=torch.float64)
    mask = nt.causal_mask(9)
    materialised, _ = recorded(grouped, ["weights"], inputs, mask=mask)
    torch.testing.assert_close(grouped(inputs, mask=mask), materialised)


def test_follows_the_inputs_device_and_dtype():
    queries = torch.zeros(2, 3, 40, 8, dtype=torch.float16, device="meta")
    keys = torch.zeros(2, 3, 50, 8, dtype=torch.float16, device="meta")
    values = torch.zeros(2, 3, 50, 4, dtype=torch.float16, device="meta")
    mask = torch.ones(40, 50, dtype=torch.bool, device="meta")
    outputs = blockwise_attention(queries, keys, values, mask, 16, causal=True)
    assert outputs.device.type == "meta" and outputs.dtype == torch.float16
    assert outputs.shape == (2, 3, 40, 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_mask_in_half_precision_keeps_the_dtype_and_the_values(dtype):
    """The boolean mask joins the scores as a table of 0 and -inf of their dtype."""
    queries, keys, values = (t.detach().to(dtype) for t in qkv())
    mask = random_mask(SEQ_Q, SEQ)
    got = blockwise_attention(queries, keys, values, mask, block=8)
    expected = nt.attend(nt.attention_weights(queries, keys, mask), values)
    assert got.dtype == dtype
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=0)


LAYER, MEMORY = 12, 7

MODULE_CASES = {
    "self": dict(seq_q=SEQ, memory=None, causal=False, padding=False, bias=False),
    "self-causal": dict(seq_q=SEQ, memory=None, causal=True, padding=False, bias=False),
    "self-padding-bias": dict(
        seq_q=SEQ, memory=None, causal=True, padding=True, bias=True
    ),
    "cross": dict(seq_q=SEQ_Q, memory=MEMORY, causal=False, padding=True, bias=False),
    "cross-causal-offset": dict(
        seq_q=SEQ_Q, memory=LAYER, causal=True, padding=False, bias=True
    ),
}


@pytest.mark.parametrize("case", MODULE_CASES)
def test_the_module_option_equals_the_default_module(case):
    c = MODULE_CASES[case]
    memory_width = c["memory"] or LAYER
    named = MultiHeadAttention(LAYER, HEADS, memory=memory_width).double()
    blocked = MultiHeadAttention(LAYER, HEADS, memory=memory_width, block=8).double()
    blocked.load_state_dict(named.state_dict())
    inputs = torch.randn(B, c["seq_q"], LAYER, dtype=torch.float64, requires_grad=True)
    memory = None
    if c["memory"] is not None:
        memory = torch.randn(B, SEQ, c["memory"], dtype=torch.float64)
    mask = (
        nt.causal_mask(c["seq_q"], SEQ, offset=SEQ - c["seq_q"])
        if c["causal"]
        else None
    )
    if c["padding"]:
        padding = nt.key_padding_mask(torch.tensor([SEQ, 20]), SEQ)
        mask = padding if mask is None else mask & padding
        mask = mask.expand(B, c["seq_q"], SEQ).clone()
        mask[0, 3] = False  # and a query that may attend nothing
    bias = score_bias(c["seq_q"], SEQ, torch.float64) if c["bias"] else None
    options = {} if bias is None else {"score_bias": bias}
    results = [m(inputs, memory, mask, **options) for m in (named, blocked)]
    torch.testing.assert_close(results[1], results[0], atol=1e-10, rtol=0)
    grads = [
        torch.autograd.grad(r.square().sum(), [inputs, m.w_q, m.w_k, m.w_v, m.w_o])
        for r, m in zip(results, (named, blocked), strict=True)
    ]
    for ours, reference in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(ours, reference, atol=1e-10, rtol=0)


def test_asking_for_the_weights_takes_the_materialising_path():
    named = MultiHeadAttention(LAYER, HEADS)
    blocked = MultiHeadAttention(LAYER, HEADS, block=4)
    blocked.load_state_dict(named.state_dict())
    inputs, mask = torch.randn(B, SEQ, LAYER), nt.causal_mask(SEQ)
    outputs, weights = recorded(blocked, ["weights"], inputs, mask=mask)
    expected, expected_weights = recorded(named, ["weights"], inputs, mask=mask)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(blocked(inputs, mask=mask), expected, atol=1e-6, rtol=0)


def test_the_config_option_reaches_every_attention_and_changes_nothing_else():
    sizes = dict(encoder_layers=2, decoder_layers=2, layer=LAYER, heads=HEADS,
                 hidden=16, dropout=0.0)  # fmt: skip
    config = nt.TransformerConfig(**sizes, attention_block=5)
    model = nt.Transformer(20, 20, config).double().eval()
    reference = nt.Transformer(20, 20, nt.TransformerConfig(**sizes)).double().eval()
    reference.load_state_dict(model.state_dict())
    attentions = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(attentions) == 6 and all(m.block == 5 for m in attentions)
    source, target = torch.randint(20, (B, 11)), torch.randint(20, (B, 13))
    source_mask = nt.key_padding_mask(torch.tensor([11, 6]), 11)
    torch.testing.assert_close(
        model(source, target, source_mask),
        reference(source, target, source_mask),
        atol=1e-10,
        rtol=0,
    )


def test_compiles_with_fullgraph_values_and_gradients():
    """Small sizes: the compiler unrolls the loop over blocks, forward and backward."""
    torch._dynamo.reset()
    module = MultiHeadAttention(LAYER, HEADS, block=5)  # 2 x 2 blocks
    reference = MultiHeadAttention(LAYER, HEADS)
    reference.load_state_dict(module.state_dict())
    inputs = torch.randn(B, 9, LAYER, requires_grad=True)
    mask = nt.causal_mask(9)
    queries, keys, values = (x.detach() for x in qkv(5, 9, dtype=torch.float32))
    with nt.shape_checks(False):
        compiled = torch.compile(module, fullgraph=True, backend="eager")
        got = compiled(inputs, mask=mask)
        function = torch.compile(blockwise_attention, fullgraph=True, backend="eager")
        causal = function(queries, keys, values, None, 5, causal=True, offset=3)
    expected = reference(inputs, mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        causal,
        nt.attention(queries, keys, values, nt.causal_mask(5, 9, offset=3)),
        atol=1e-5,
        rtol=0,
    )
    for ours, theirs in zip(
        torch.autograd.grad(got.sum(), [inputs, module.w_q]),
        torch.autograd.grad(expected.sum(), [inputs, reference.w_q]),
        strict=True,
    ):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def recording_tables(monkeypatch):
    """The scores of every tile, and every backward tile's dS, as computed (kept
    alive, so that a fresh table cannot share the address of one freed)."""
    scores, gradients = [], []
    tile_scores, tile_gradients = blockwise._tile_scores, blockwise._tile_gradients

    def record_scores(*args, **kwargs):
        scores.append(tile_scores(*args, **kwargs))
        return scores[-1]

    def record_gradients(*args, **kwargs):
        grad_scores, *rest = tile_gradients(*args, **kwargs)
        gradients.append(grad_scores)
        return grad_scores, *rest

    monkeypatch.setattr(blockwise, "_tile_scores", record_scores)
    monkeypatch.setattr(blockwise, "_tile_gradients", record_gradients)
    return scores, gradients


def tables_of(tiles: list[torch.Tensor]) -> set[int]:
    return {tile.data_ptr() for tile in tiles}


def test_one_table_of_scores_per_tile_shape(monkeypatch):
    """The tiles' scores are written over one table per tile shape (full, short rows,
    short columns, both) forward and backward, and the backward pass's dS over one
    more per shape, values and gradients unchanged; the same in a call under
    ``torch.no_grad()``, with dropout too (nothing is recorded)."""
    scores, gradients = recording_tables(monkeypatch)
    queries, keys, values = qkv()  # 29 queries, 37 keys: blocks of 8 are ragged
    got = blockwise_attention(queries, keys, values, block=8)
    forward = scores[:]
    assert len(forward) == 4 * 5 and len(tables_of(forward)) == 4
    expected = nt.attention(queries, keys, values)
    assert_same_values_and_gradients(got, expected, (queries, keys, values), 1e-10)
    backward = scores[len(forward) :]
    assert len(backward) == 4 * 5 and len(tables_of(backward)) == 4
    assert len(gradients) == 4 * 5 and len(tables_of(gradients)) == 4
    assert not tables_of(gradients) & tables_of(backward)
    for dropout in (0.0, 0.5):
        scores.clear()
        with torch.no_grad():
            blockwise_attention(queries, keys, values, block=8, dropout=dropout,
                                training=True)  # fmt: skip
        assert len(scores) == 4 * 5 and len(tables_of(scores)) == 4


@pytest.mark.parametrize("why", ["dropout", "compiling", "autocast"])
def test_a_fresh_table_each_tile_where_one_cannot_be_reused(monkeypatch, why):
    """Autograd keeps every tile's weights when it records through the blocks
    (dropout while training), the compiler plans memory itself, and autocast does
    not cast a product written into a table: each tile then takes a fresh table,
    and the result is the one without blocks (under autocast, the autocast one)."""
    scores, _ = recording_tables(monkeypatch)
    queries, keys, values = (x.detach().float() for x in qkv())
    arguments = {"block": 8}
    expected = nt.attention(queries, keys, values)
    if why == "dropout":
        queries.requires_grad_()
        arguments |= {"dropout": 0.5, "training": True}
    if why == "compiling":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    if why == "autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = blockwise_attention(queries, keys, values, **arguments)
        assert {tile.dtype for tile in scores} == {torch.bfloat16}
        torch.testing.assert_close(got.float(), expected, atol=0.05, rtol=0.05)
    else:
        got = blockwise_attention(queries, keys, values, **arguments)
    assert len(tables_of(scores)) == len(scores) == 4 * 5
    if why == "compiling":
        torch.testing.assert_close(got, expected)
