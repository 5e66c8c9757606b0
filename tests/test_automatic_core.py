"""The core chosen for the call: every automatic choice is the materialising path's
function (values and gradients, float64) for each kind of mask, fully masked rows
included; the rule picks blockwise only from ``CROSSOVER`` queries and keys (from
``FULL_CROSSOVER`` when no whole tile is hidden), never for weights, value terms or
dropout; the explicit options override it.

``nt.attention``'s own rule is its equation's body (``nt.attention.equation``): a plain
call that PyTorch's fused kernel computes (no bias, no mask, a padding mask or the
causal rule, on the CPU) runs that kernel instead, tested equal in
``tests/test_fast.py``."""

import pytest
import torch
import torch.nn.functional as F

import named_transformer as nt
from named_transformer.core import blockwise
from named_transformer.core.attention import attend, attention_weights
from named_transformer.core.blockwise import (
    BLOCK,
    CROSSOVER,
    FULL_CROSSOVER,
    GPU_BLOCK,
    GPU_CROSSOVER,
    automatic_block,
    block_size,
)
from named_transformer.core.fast import computes_every_tile
from named_transformer.models.cores import AUTOMATIC, MATERIALISE, Blockwise
from tests.test_multihead import recorded

# long enough for the blockwise choice with every kind of mask: 4 blocks, uneven
SEQ = FULL_CROSSOVER + 9
BATCH, HEADS, KEY, VAL = 2, 2, 4, 3


def masks(seq_q: int = SEQ, seq: int = SEQ) -> dict:
    """name -> a boolean mask (True = may attend), broadcasting over batch and
    heads."""
    padding = nt.key_padding_mask(torch.tensor([seq, 40]), seq)[:, None]
    dead = nt.causal_mask(seq_q, seq).clone()
    dead[3] = False  # a query that may attend nothing: zeros, not NaN
    dead[250:270] = False  # a block of them, across a block boundary
    return {
        "none": None,
        "causal": nt.causal_mask(seq_q, seq),
        "padding": padding,  # batch 1 1 seq
        "window": nt.sliding_window_mask(seq_q, seq, window=37),
        "fully-masked-rows": dead,
    }


def inputs(seq_q: int = SEQ, seq: int = SEQ):
    def make(*shape):
        return torch.randn(BATCH, HEADS, *shape, dtype=torch.float64).requires_grad_()

    return make(seq_q, KEY), make(seq, KEY), make(seq, VAL)


def materialised(queries, keys, values, mask, score_bias=None):
    """The pages' path: A = softmax_seq(S + B + M), then A . V."""
    return attend(attention_weights(queries, keys, mask, score_bias=score_bias), values)


def values_and_gradients(output, leaves):
    grad = torch.randn_like(output)
    return output, torch.autograd.grad(output, leaves, grad, allow_unused=True), grad


def test_the_rule():
    assert automatic_block(CROSSOVER, CROSSOVER) == BLOCK
    # every tile computed (no mask, a padding mask): blockwise wins later
    assert automatic_block(FULL_CROSSOVER - 1, 10_000, all_tiles=True) is None
    assert automatic_block(FULL_CROSSOVER, FULL_CROSSOVER, all_tiles=True) == BLOCK
    assert CROSSOVER < FULL_CROSSOVER
    assert automatic_block(CROSSOVER - 1, 10_000) is None  # a short table
    assert automatic_block(1, 100_000) is None  # a decoding step: one row per query
    assert automatic_block(4096, 4096, dropout=0.1) is None
    assert automatic_block(4096, 4096, value_term=True) is None
    # a GPU: kernel launches, not caches, decide (see the blockwise page)
    assert automatic_block(CROSSOVER, CROSSOVER, device="cpu") == BLOCK
    assert automatic_block(GPU_CROSSOVER - 1, 10_000, device="cuda") is None
    assert automatic_block(GPU_CROSSOVER, GPU_CROSSOVER, device="cuda:0") == GPU_BLOCK
    assert automatic_block(4096, 4096, dropout=0.1, device="cuda") is None
    gpu = automatic_block(GPU_CROSSOVER, GPU_CROSSOVER, device="cuda", all_tiles=True)
    assert gpu == GPU_BLOCK  # one crossover on a GPU
    q, k, _ = inputs()
    assert AUTOMATIC.choose(q, k, 0.0, False) == Blockwise(BLOCK)
    short = q[..., : FULL_CROSSOVER - 1, :]
    causal = nt.causal_mask(FULL_CROSSOVER - 1, SEQ)
    assert AUTOMATIC.choose(short, k, 0.0, False, causal) == Blockwise(BLOCK)
    assert AUTOMATIC.choose(short, k, 0.0, False) is MATERIALISE  # no mask
    padding = masks(FULL_CROSSOVER - 1)["padding"]
    assert AUTOMATIC.choose(short, k, 0.0, False, padding) is MATERIALISE
    assert AUTOMATIC.choose(q[..., :9, :], k, 0.0, False) is MATERIALISE
    assert AUTOMATIC.choose(q, k, 0.1, False) is MATERIALISE
    assert AUTOMATIC.choose(q, k, 0.0, True) is MATERIALISE


def test_the_block_size():
    """A block size per device: the CPU's, or a GPU's."""
    assert block_size() == block_size("cpu") == BLOCK
    assert block_size("cuda") == block_size(torch.device("cuda", 0)) == GPU_BLOCK


def test_a_call_given_no_block_takes_the_block_size(monkeypatch):
    """``blockwise_attention`` without ``block``, and the blockwise core without
    one, run blocks of :func:`block_size`'s, and equal the pages' path."""
    monkeypatch.setattr(blockwise, "BLOCK", 16)
    tilings = []
    original = blockwise._BlockwiseAttention.apply

    def recorded(*arguments):
        tilings.append(arguments[-1])
        return original(*arguments)

    monkeypatch.setattr(blockwise._BlockwiseAttention, "apply", recorded)
    torch.manual_seed(0)
    q, k, v = inputs(39, 50)
    mask = nt.causal_mask(39, 50)
    plain = materialised(q, k, v, mask)
    torch.testing.assert_close(nt.blockwise_attention(q, k, v, mask), plain)
    outputs, _ = Blockwise()(q, k, v, mask, None, 0.0)
    torch.testing.assert_close(outputs, plain)
    assert [tiling.block for tiling in tilings] == [16, 16]


@pytest.fixture
def blockwise_calls(monkeypatch):
    """How many times the blockwise core ran."""
    calls = []
    original = blockwise._BlockwiseAttention.apply

    def counted(*arguments):
        calls.append(arguments[0].shape)
        return original(*arguments)

    monkeypatch.setattr(blockwise._BlockwiseAttention, "apply", counted)
    return calls


@pytest.mark.parametrize("kind", list(masks()))
def test_nt_attention_equals_the_materialising_path(kind, blockwise_calls):
    torch.manual_seed(0)
    mask = masks()[kind]
    q, k, v = inputs()
    ours, our_grads, grad = values_and_gradients(
        nt.attention.equation(q, k, v, mask), (q, k, v)
    )
    assert blockwise_calls, "the long call did not take the blockwise path"
    theirs = materialised(q, k, v, mask)
    their_grads = torch.autograd.grad(theirs, (q, k, v), grad)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    for a, b in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)
    # the plain call, whichever runs it (the fused kernel for none, causal, padding)
    torch.testing.assert_close(nt.attention(q, k, v, mask), theirs, rtol=0, atol=1e-12)
    if kind == "fully-masked-rows":
        assert not ours.isnan().any()
        assert ours[..., 3, :].abs().max() == 0
        assert ours[..., 250:270, :].abs().max() == 0
        assert our_grads[0][..., 3, :].abs().max() == 0


@pytest.mark.parametrize("kind", ["none", "causal"])
def test_nt_attention_equals_pytorchs_kernel(kind):
    """An independent reference where it is defined (no fully masked row)."""
    torch.manual_seed(1)
    q, k, v = (x.detach() for x in inputs())
    mask = masks()[kind]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(nt.attention.equation(q, k, v, mask), expected)


def test_nt_attention_with_a_score_bias(blockwise_calls):
    torch.manual_seed(2)
    q, k, v = inputs()
    bias = torch.randn(SEQ, SEQ, dtype=torch.float64)
    bias[7] = -torch.inf  # a row the bias blocks
    bias.requires_grad_()
    mask = masks()["causal"]
    leaves = (q, k, v, bias)
    ours, our_grads, grad = values_and_gradients(
        nt.attention(q, k, v, mask, score_bias=bias), leaves
    )
    assert blockwise_calls
    theirs = materialised(q, k, v, mask, bias)
    their_grads = torch.autograd.grad(theirs, leaves, grad)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    for a, b in zip(our_grads, their_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_short_calls_materialise(blockwise_calls):
    q, k, v = inputs(CROSSOVER - 1, CROSSOVER - 1)
    nt.attention.equation(q, k, v, nt.causal_mask(CROSSOVER - 1))
    assert not blockwise_calls


BETWEEN = CROSSOVER + 9  # between the two crossovers
HIDE_NO_TILE = {"none", "padding"}  # no mask, or one over the keys only


@pytest.mark.parametrize("kind", list(masks(BETWEEN, BETWEEN)))
def test_a_call_that_computes_every_tile_crosses_later(kind, blockwise_calls):
    """Between the two crossovers only a mask that can hide whole tiles (over queries
    and keys) takes the blockwise path; no mask and a padding mask materialise."""
    q, k, v = inputs(BETWEEN, BETWEEN)
    mask = masks(BETWEEN, BETWEEN)[kind]
    torch.testing.assert_close(
        nt.attention.equation(q, k, v, mask), materialised(q, k, v, mask),
        rtol=0, atol=1e-12,
    )  # fmt: skip
    assert bool(blockwise_calls) == (kind not in HIDE_NO_TILE)


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("kind", ["padding", "causal"])
def test_the_modules_mask_reaches_the_rule(kind, kv_heads, blockwise_calls):
    """Through the module's pipeline (the mask lifted over heads and groups), a
    padding mask still counts as hiding no tile, a causal one as hiding some."""
    automatic, _ = modules(kv_heads=kv_heads)
    mask = masks(BETWEEN, BETWEEN)[kind]
    if mask.ndim == 4:  # padding: batch 1 1 seq -> batch 1 seq, as a user passes it
        mask = mask[:, 0]
    automatic(torch.randn(BATCH, BETWEEN, 16, dtype=torch.float64), mask=mask)
    assert bool(blockwise_calls) == (kind == "causal")


def test_which_masks_hide_no_tile():
    """None, one over the keys only, and one with fewer than two axes (only with the
    shape checks off) hide no tile; one over queries and keys may."""
    assert computes_every_tile(None)
    assert computes_every_tile(masks(BETWEEN, BETWEEN)["padding"])
    assert computes_every_tile(torch.ones(BETWEEN, dtype=torch.bool))
    assert not computes_every_tile(masks(BETWEEN, BETWEEN)["window"])


def test_compiled_a_mask_tensor_hides_no_tile(monkeypatch):
    """While compiling, blockwise cannot look at a mask tensor to skip its tiles, so
    the rule counts it as hiding none."""
    causal = nt.causal_mask(BETWEEN, BETWEEN)
    assert not computes_every_tile(causal)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert computes_every_tile(causal)


def modules(**options):
    """The module with the automatic core, and a copy told to materialise."""
    torch.manual_seed(3)
    automatic = nt.MultiHeadAttention(16, 4, **options).double()
    explicit = nt.MultiHeadAttention(16, 4, materialise=True, **options).double()
    explicit.load_state_dict(automatic.state_dict())
    return automatic, explicit


@pytest.mark.parametrize("kind", list(masks()))
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_the_module_equals_its_materialising_twin(kind, kv_heads, blockwise_calls):
    automatic, explicit = modules(kv_heads=kv_heads)
    assert automatic.core is AUTOMATIC and explicit.core is MATERIALISE
    mask = masks()[kind]
    if mask is not None and mask.ndim == 4:  # padding: batch 1 1 seq -> batch 1 seq
        mask = mask[:, 0]
    x = torch.randn(BATCH, SEQ, 16, dtype=torch.float64, requires_grad=True)
    ours = automatic(x, mask=mask)
    assert blockwise_calls
    blockwise_calls.clear()
    theirs = explicit(x, mask=mask)
    assert not blockwise_calls, "materialise=True took the blockwise path"
    grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, [x, *automatic.parameters()], grad)
    theirs_grads = torch.autograd.grad(theirs, [x, *explicit.parameters()], grad)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    for a, b in zip(ours_grads, theirs_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def test_weights_recorded_materialise(blockwise_calls):
    automatic, explicit = modules()
    x = torch.randn(1, SEQ, 16, dtype=torch.float64)
    out, weights = recorded(automatic, ["weights"], x, mask=nt.causal_mask(SEQ))
    assert not blockwise_calls
    assert weights.shape == (1, 4, SEQ, SEQ)
    torch.testing.assert_close(out, explicit(x, mask=nt.causal_mask(SEQ)))


def test_the_explicit_options_override_the_choice(blockwise_calls):
    x = torch.randn(1, SEQ, 16)
    nt.MultiHeadAttention(16, 4, block=64)(x)
    assert blockwise_calls  # the caller's block, whatever the length
    assert nt.MultiHeadAttention(16, 4, block=64).core == Blockwise(64)
    blockwise_calls.clear()
    nt.MultiHeadAttention(16, 4, fused=True)(x)
    nt.MultiHeadAttention(16, 4, materialise=True)(x)
    assert not blockwise_calls
    with pytest.raises(ValueError, match="materialise=True .* choose one"):
        nt.MultiHeadAttention(16, 4, block=64, materialise=True)
    with pytest.raises(ValueError, match="fused=True and block"):
        nt.MultiHeadAttention(16, 4, block=64, fused=True)


def test_dropout_materialises(blockwise_calls):
    automatic, _ = modules(dropout=0.5)
    automatic.train()
    automatic(torch.randn(1, SEQ, 16, dtype=torch.float64))
    assert not blockwise_calls


def test_relative_positions_keep_materialising(blockwise_calls):
    """Their value term reads the weights: the automatic core materialises for them
    (and the module builds, where a blockwise core is refused)."""
    torch.manual_seed(4)
    automatic = nt.MultiHeadAttention(16, 4, positions=nt.Relative(3)).double()
    explicit = nt.MultiHeadAttention(
        16, 4, positions=nt.Relative(3), materialise=True
    ).double()
    explicit.load_state_dict(automatic.state_dict())
    x = torch.randn(1, SEQ, 16, dtype=torch.float64)
    mask = nt.causal_mask(SEQ)
    torch.testing.assert_close(automatic(x, mask=mask), explicit(x, mask=mask))
    assert not blockwise_calls
    with pytest.raises(ValueError, match="relative positions with the blockwise core"):
        nt.MultiHeadAttention(16, 4, positions=nt.Relative(3), block=64)


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
def test_position_schemes_on_the_automatic_core(positions, blockwise_calls):
    build = {
        "rotary": lambda **o: nt.MultiHeadAttention(
            16, 4, positions=nt.Rotary(), **o
        ),
        "alibi": lambda **o: nt.MultiHeadAttention(16, 4, positions=nt.ALiBi(), **o),
    }[positions]
    torch.manual_seed(5)
    automatic = build().double()
    explicit = build(materialise=True).double()
    explicit.load_state_dict(automatic.state_dict())
    x = torch.randn(1, SEQ, 16, dtype=torch.float64, requires_grad=True)
    mask = nt.causal_mask(SEQ)
    ours, theirs = automatic(x, mask=mask), explicit(x, mask=mask)
    assert blockwise_calls
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
    grad = torch.randn_like(ours)
    (a,) = torch.autograd.grad(ours, x, grad)
    (b,) = torch.autograd.grad(theirs, x, grad)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-11)
