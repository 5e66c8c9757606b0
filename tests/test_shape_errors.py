"""Every public function of the functional core rejects a wrong axis size, naming it."""

import importlib
import pkgutil

import pytest
import torch
from jaxtyping import Float, TypeCheckError
from torch import Tensor

import named_transformer as nt
import named_transformer.core
from named_transformer.axes import checked
from named_transformer.core.alibi import alibi_bias
from named_transformer.core.blockwise import blockwise_attention
from named_transformer.core.rotary import rotate

B, SEQ_Q, SEQ, KEY_Q, KEY, VAL, LAYER, HIDDEN = 2, 3, 4, 5, 6, 7, 8, 9


def r(*shape):
    return torch.randn(*shape)


MASK = torch.ones(B, SEQ, dtype=torch.bool)
BAD_MASK = torch.ones(B, SEQ + 1, dtype=torch.bool)
QUERIES, KEYS, VALUES = r(B, SEQ_Q, KEY), r(B, SEQ, KEY), r(B, SEQ, VAL)
BAD_KEYS, BAD_VALUES = r(B, SEQ, KEY + 1), r(B, SEQ + 1, VAL)
POOL = [r(B, SEQ, LAYER), r(HIDDEN, LAYER), r(HIDDEN), r(HIDDEN)]
FFN = [r(B, SEQ, LAYER), r(HIDDEN, LAYER), r(HIDDEN), r(LAYER, HIDDEN), r(LAYER)]
ADDITIVE = [r(B, SEQ_Q, KEY_Q), KEYS, r(HIDDEN, KEY_Q), r(HIDDEN, KEY), r(HIDDEN)]

# name -> (function, good arguments, bad arguments, the argument the error must name)
CASES = {
    "softmax": (nt.softmax, [r(B, SEQ), MASK], [r(B, SEQ), BAD_MASK], "mask"),
    "softmax_": (nt.softmax_, [r(B, SEQ), MASK], [r(B, SEQ), BAD_MASK], "mask"),
    "hardmax": (nt.hardmax, [r(B, SEQ), MASK], [r(B, SEQ), BAD_MASK], "mask"),
    "dot_score": (nt.dot_score, [QUERIES, KEYS], [QUERIES, BAD_KEYS], "keys"),
    "scaled_dot_score": (
        nt.scaled_dot_score,
        [QUERIES, KEYS],
        [QUERIES, BAD_KEYS],
        "keys",
    ),
    "cosine_score": (nt.cosine_score, [QUERIES, KEYS], [QUERIES, BAD_KEYS], "keys"),
    "general_score": (
        nt.general_score,
        [r(B, SEQ_Q, KEY_Q), KEYS, r(KEY_Q, KEY)],
        [r(B, SEQ_Q, KEY_Q), KEYS, r(KEY_Q, KEY + 1)],
        "weight",
    ),
    "additive_score": (
        nt.additive_score,
        ADDITIVE,
        [*ADDITIVE[:4], r(HIDDEN + 1)],
        "w_score",
    ),
    "location_score": (
        nt.location_score,
        [r(B, SEQ_Q, HIDDEN), r(SEQ, HIDDEN)],
        [r(B, SEQ_Q, HIDDEN), r(SEQ, HIDDEN + 1)],
        "weight",
    ),
    "attention_weights": (
        nt.attention_weights,
        [QUERIES, KEYS],
        [QUERIES, BAD_KEYS],
        "keys",
    ),
    "attend": (
        nt.attend,
        [r(B, SEQ_Q, SEQ), VALUES],
        [r(B, SEQ_Q, SEQ), BAD_VALUES],
        "values",
    ),
    "attention": (
        nt.attention,
        [QUERIES, KEYS, VALUES],
        [QUERIES, KEYS, BAD_VALUES],
        "values",
    ),
    "fused_attention": (
        nt.fused_attention,
        [QUERIES, KEYS, VALUES],
        [QUERIES, KEYS, BAD_VALUES],
        "values",
    ),
    "attention_from_scores": (
        nt.attention_from_scores,
        [r(B, SEQ_Q, SEQ), VALUES],
        [r(B, SEQ_Q, SEQ), BAD_VALUES],
        "values",
    ),
    "basic_self_attention": (
        nt.basic_self_attention,
        [r(B, SEQ, LAYER)],
        [r(LAYER)],
        "inputs",
    ),
    "standardize": (nt.standardize, [r(B, SEQ, LAYER)], [torch.tensor(1.0)], "inputs"),
    "layer_norm": (
        nt.layer_norm,
        [r(B, SEQ, LAYER), r(LAYER), r(LAYER)],
        [r(B, SEQ, LAYER), r(LAYER + 1), r(LAYER)],
        "gamma",
    ),
    "feed_forward": (nt.feed_forward, FFN, [*FFN[:4], r(LAYER + 1)], "b2"),
    "rms_norm": (
        nt.rms_norm,
        [r(B, SEQ, LAYER), r(LAYER)],
        [r(B, SEQ, LAYER), r(LAYER + 1)],
        "gain",
    ),
    "gated_feed_forward": (
        nt.gated_feed_forward,
        [r(B, SEQ, LAYER), r(HIDDEN, LAYER), r(HIDDEN, LAYER), r(LAYER, HIDDEN)],
        [r(B, SEQ, LAYER), r(HIDDEN, LAYER), r(HIDDEN, LAYER), r(LAYER, HIDDEN + 1)],
        "w_down",
    ),
    "relu": (
        nt.relu,
        [r(B, SEQ, HIDDEN)],
        [torch.ones(B, SEQ, HIDDEN, dtype=torch.long)],
        "inputs",
    ),
    **{
        name: (
            function,
            [r(B, SEQ, HIDDEN)],
            [torch.ones(B, SEQ, HIDDEN, dtype=torch.long)],
            "inputs",
        )
        for name, function in [
            ("gelu", nt.gelu),
            ("gelu_tanh", nt.gelu_tanh),
            ("silu", nt.silu),
        ]
    },  # fmt: skip
    "mean_pooling": (
        nt.mean_pooling,
        [r(B, SEQ, LAYER), MASK],
        [r(B, SEQ, LAYER), BAD_MASK],
        "mask",
    ),
    "l2_normalize": (
        nt.l2_normalize,
        [r(B, LAYER)],
        [torch.ones(B, LAYER, dtype=torch.long)],
        "inputs",
    ),
    "attention_pooling": (
        nt.attention_pooling,
        POOL,
        [POOL[0], r(HIDDEN, LAYER + 1), *POOL[2:]],
        "w_hidden",
    ),
    "attention_pooling_weights": (
        nt.attention_pooling_weights,
        POOL,
        [*POOL[:3], r(HIDDEN + 1)],
        "w_score",
    ),
    "dropout": (
        nt.dropout,
        [r(B, SEQ), 0.1, True],
        [torch.ones(B, SEQ, dtype=torch.long), 0.1, True],
        "inputs",
    ),
    "padding_mask": (
        nt.padding_mask,
        [torch.tensor([1, 2]), 4],
        [torch.tensor([1.0, 2.0]), 4],
        "lengths",
    ),
    "additive_mask": (
        nt.additive_mask,
        [MASK, torch.float32],
        [r(B, SEQ), torch.float32],  # a float table, not a boolean mask
        "mask",
    ),
    "key_padding_mask": (
        nt.key_padding_mask,
        [torch.tensor([1, 2]), 4],
        [torch.tensor([1.0, 2.0]), 4],
        "lengths",
    ),
    "rotate": (
        rotate,
        [QUERIES, r(SEQ_Q, KEY // 2)],
        [QUERIES, r(SEQ, KEY // 2)],
        "angles",
    ),
    "alibi_bias": (alibi_bias, [SEQ_Q, SEQ, r(B)], [SEQ_Q, SEQ, r(B, 1)], "slopes"),
    "blockwise_attention": (
        blockwise_attention,
        [QUERIES, KEYS, VALUES, None, 2],
        [QUERIES, KEYS, BAD_VALUES, None, 2],
        "values",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_axis_size_raises_and_names_the_argument(name):
    function, good, bad, argument = CASES[name]
    function(*good)
    with pytest.raises(TypeCheckError) as error:
        function(*bad)
    assert f"parameter '{argument}'" in str(error.value)


def test_message_shows_the_conflicting_sizes():
    with pytest.raises(TypeCheckError) as error:
        nt.attention(QUERIES, BAD_KEYS, VALUES)
    message = str(error.value)
    assert "parameter 'keys'" in message
    assert f"f32[{B},{SEQ},{KEY + 1}]" in message  # the value that arrived
    assert f"key={KEY}" in message  # the size the queries bound


def test_a_wrong_dtype_is_named_too():
    with pytest.raises(TypeCheckError, match="parameter 'mask'"):
        nt.softmax(r(B, SEQ), torch.ones(B, SEQ))  # a float mask, not a boolean one


def test_every_public_function_of_the_core_has_a_case():
    public = set()
    for module in pkgutil.iter_modules(named_transformer.core.__path__):
        if module.name == "fast":  # the speed level: each function computes the calls
            continue  # of a checked equation, whose case is here, and checks nothing
        name = f"named_transformer.core.{module.name}"
        public |= set(importlib.import_module(name).__all__)
    takes_sizes = {
        "causal_mask",
        "sliding_window_mask",
        "sinusoidal_positions",
        "relative_position_index",
        "rotary_frequencies",
        "rotary_angles",
        "alibi_slopes",
        "automatic_block",  # the core's rule, from the sizes
        "AutomaticRule",  # the same rule as one object: a call's sizes to a block
        "AUTOMATIC_RULE",
        "block_size",
        "check_block",  # a block size: a number
        "BLOCK",  # constants
        "CROSSOVER",
        "GPU_BLOCK",
        "GPU_CROSSOVER",
        "FULL_CROSSOVER",
    }  # no tensors
    missing = public - set(CASES) - takes_sizes
    assert not missing, f"no wrong-shape test for {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_line_says_what_is_wrong_in_one_sentence(name):
    function, _, bad, argument = CASES[name]
    with pytest.raises(TypeCheckError) as error:
        function(*bad)
    first = str(error.value).splitlines()[0]
    assert first.startswith(("axis '", "argument '")), first
    assert f"'{argument}'" in first, first


@pytest.mark.parametrize(
    ("call", "summary"),
    [
        (
            lambda: nt.attention(QUERIES, BAD_KEYS, VALUES),
            f"axis 'key' is {KEY} in argument 'queries' but {KEY + 1} in argument "
            "'keys'",
        ),
        (
            lambda: nt.attention(QUERIES, KEYS, VALUES, r(B, SEQ_Q, SEQ + 1) > 0),
            f"axis 'seq' is {SEQ} in argument 'keys' but {SEQ + 1} in argument 'mask'",
        ),
        (
            lambda: nt.softmax(r(B, SEQ), torch.ones(B, SEQ)),
            "argument 'mask' has dtype torch.float32, not Bool",
        ),
        (
            lambda: nt.softmax(2.0, MASK),
            "argument 'scores' is float 2.0, not a tensor",
        ),
        (
            lambda: nt.attention(r(KEY), KEYS, VALUES),
            f"argument 'queries' has 1 axis ({KEY},), but '*batch seq_q key' needs "
            "2 or more",
        ),
    ],
)
def test_the_summary_names_the_axis_both_sizes_and_both_arguments(call, summary):
    with pytest.raises(TypeCheckError) as error:
        call()
    assert str(error.value).splitlines()[0] == summary
    assert "Called with parameters" in str(error.value)  # jaxtyping's detail follows


# results a buggy function returns: the keys' scores against the queries, a tuple
# whose second item lost key channels, a result without the batch axes, token ids
@checked
def _scores_transposed(
    queries: Float[Tensor, "*batch seq_q key"], keys: Float[Tensor, "*batch seq key"]
) -> Float[Tensor, "*batch seq_q seq"]:
    return keys @ queries.mT


@checked
def _pair_cut(
    queries: Float[Tensor, "*batch seq_q key"], keys: Float[Tensor, "*batch seq key"]
) -> tuple[Float[Tensor, "*batch seq_q seq"], Float[Tensor, "*batch seq key"] | None]:
    return queries @ keys.mT, keys[..., :2]


@checked
def _first_only(
    queries: Float[Tensor, "*batch seq_q key"],
) -> Float[Tensor, "*batch seq_q key"] | tuple[Float[Tensor, "*batch seq_q key"]]:
    return queries[0]


@checked
def _rounded(queries: Float[Tensor, "*batch seq_q key"]) -> Float[Tensor, "*batch"]:
    return queries.sum((-1, -2)).long()


@pytest.mark.parametrize(
    ("call", "summary"),
    [
        (lambda: _scores_transposed(QUERIES, KEYS),
         f"axis 'seq_q' is {SEQ_Q} in argument 'queries' but {SEQ} in the return "
         "value"),
        (lambda: _pair_cut(QUERIES, KEYS),
         f"axis 'key' is {KEY} in argument 'queries' but 2 in item 1 of the return "
         "value"),
        (lambda: _first_only(QUERIES),
         f"axes '*batch' are ({B},) in argument 'queries' but () in the return value"),
        (lambda: _rounded(QUERIES),
         "the return value has dtype torch.int64, not Float"),
    ],
)  # fmt: skip
def test_a_wrong_result_names_the_return_value_the_axis_and_both_sizes(call, summary):
    # 0.8.3's first line: "Type-check error whilst checking the return value of ..."
    for _ in range(2):  # the full check's path, then the quick check's remembered one
        with pytest.raises(TypeCheckError) as error:
            call()
        assert str(error.value).splitlines()[0] == summary
        assert "checking the return value" in str(error.value)  # jaxtyping's detail


def test_a_module_blames_its_input_not_its_weight():
    attention = nt.MultiHeadAttention(LAYER, 2)
    with pytest.raises(TypeCheckError) as error:
        attention(r(B, SEQ, LAYER + 1))
    first = str(error.value).splitlines()[0]
    assert first == (
        f"axis 'layer' is {LAYER} in argument 'w_q' but {LAYER + 1} in argument "
        "'inputs'"
    )


def test_a_token_id_outside_the_vocabulary_is_named():
    embedding = nt.TokenEmbedding(10, LAYER)
    with pytest.raises(ValueError, match="token id 12 in argument 'tokens' is outside"
                       " the vocabulary of 10 tokens"):  # fmt: skip
        embedding(torch.tensor([[1, 12]]))
    with pytest.raises(ValueError, match="token id -1"):
        embedding(torch.tensor([[-1, 2]]))
    with nt.shape_checks(False):  # no check, no host sync: what compiled code runs
        assert embedding(torch.tensor([[1, 2]])).shape == (1, 2, LAYER)


_CONFIG = nt.TransformerConfig(
    encoder_layers=1, decoder_layers=1, layer=LAYER, heads=2, hidden=HIDDEN,
    dropout=0.0,
)  # fmt: skip
_WIDE = r(B, SEQ, LAYER + 1)  # inputs one wider than the modules' layer axis
_TOKENS = torch.randint(0, 11, (B, SEQ))
MODULE_CASES = {
    "MultiHeadAttention": (lambda: nt.MultiHeadAttention(LAYER, 2)(_WIDE),
                           "axis 'layer'", "'inputs'"),
    "RelativeTables": (
        lambda: nt.MultiHeadAttention(LAYER, 2, positions=nt.Relative(4))(_WIDE),
        "axis 'layer'", "'inputs'"),
    "FeedForward": (lambda: nt.FeedForward(LAYER, HIDDEN)(_WIDE),
                    "axis 'layer'", "'inputs'"),
    "LayerNorm": (lambda: nt.LayerNorm(LAYER)(_WIDE), "axis 'layer'", "'inputs'"),
    "RMSNorm": (lambda: nt.RMSNorm(LAYER)(_WIDE), "axis 'layer'", "'inputs'"),
    "GatedFeedForward": (lambda: nt.GatedFeedForward(LAYER, HIDDEN)(_WIDE),
                         "axis 'layer'", "'inputs'"),
    "EncoderLayer": (lambda: nt.EncoderLayer(LAYER, 2, HIDDEN)(_WIDE),
                     "axis 'layer'", "'inputs'"),
    "DecoderLayer": (
        lambda: nt.DecoderLayer(LAYER, 2, HIDDEN)(_WIDE, r(B, SEQ_Q, LAYER)),
        "axis 'layer'", "'inputs'"),
    "Transformer": (
        lambda: nt.Transformer(11, 13, _CONFIG)(
            _TOKENS, _TOKENS, torch.ones(B, 1, SEQ + 1, dtype=torch.bool)),
        "axis 'seq'", "'source_mask'"),
    "TransformerClassifier": (
        lambda: nt.TransformerClassifier(11, 2, num_layers=1, layer=LAYER, heads=2,
                                         hidden=HIDDEN)(
            _TOKENS, torch.ones(B, SEQ + 1, dtype=torch.bool)),
        "axis 'seq'", "'mask'"),
    "GRUCell": (lambda: nt.GRUCell(LAYER, 6)(r(B, LAYER + 1), r(B, 6)),
                "axis 'input'", "'inputs'"),
    "Generator": (lambda: nt.Generator(LAYER, 11)(_WIDE), "axis 'layer'", "'inputs'"),
    "TokenEmbedding": (lambda: nt.TokenEmbedding(11, LAYER)(r(B, SEQ)),
                       "argument 'tokens' has dtype", "'tokens'"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(MODULE_CASES))
def test_each_module_kind_names_the_input_that_is_wrong(name):
    call, summary, argument = MODULE_CASES[name]
    with pytest.raises(TypeCheckError) as error:
        call()
    first = str(error.value).splitlines()[0]
    blamed = first.rsplit(" but ", 1)[-1]  # the argument that disagrees comes last
    assert first.startswith(summary) and argument in blamed, first
