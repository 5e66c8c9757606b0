r"""Attention and the Transformer, written exactly as in named tensor notation.

Every public function is shape-checked at run time (see :mod:`named_transformer.axes`);
``shape_checks(False)`` turns checking off.
"""

# First, before the heavy imports: under ``python -m named_transformer``, Ctrl-C while
# they run is one line, not a traceback from inside torch (nothing else changes).
import named_transformer._startup  # noqa: F401
from named_transformer.axes import (
    AXES,
    Axis,
    checked,
    shape_checks,
    shape_checks_enabled,
)
from named_transformer.core.alibi import alibi_bias, alibi_slopes
from named_transformer.core.attention import (
    attend,
    attention,
    attention_from_scores,
    attention_weights,
    fused_attention,
)
from named_transformer.core.basic import basic_self_attention
from named_transformer.core.blockwise import blockwise_attention
from named_transformer.core.dropout import dropout
from named_transformer.core.feedforward import (
    feed_forward,
    gated_feed_forward,
    gelu,
    gelu_tanh,
    relu,
    silu,
)
from named_transformer.core.masks import (
    additive_mask,
    causal_mask,
    key_padding_mask,
    padding_mask,
    sliding_window_mask,
)
from named_transformer.core.norm import layer_norm, rms_norm, standardize
from named_transformer.core.pooling import (
    attention_pooling,
    attention_pooling_weights,
    l2_normalize,
    mean_pooling,
)
from named_transformer.core.positions import (
    relative_position_index,
    sinusoidal_positions,
)
from named_transformer.core.rotary import rotary_angles, rotary_frequencies, rotate
from named_transformer.core.scores import (
    additive_score,
    cosine_score,
    dot_score,
    general_score,
    location_score,
    scaled_dot_score,
)
from named_transformer.core.softmax import hardmax, softmax, softmax_
from named_transformer.decoding import (
    CompiledDecoder,
    Decoded,
    IncrementalDecoder,
    beam_search,
    cached_self_attention,
    greedy,
    length_penalty,
    nucleus_mask,
    sample,
    stream,
    strip_after_eos,
)
from named_transformer.inside import (
    Named,
    Record,
    ablate,
    direct_logit_attribution,
    edit,
    induction_scores,
    logit_lens,
    patch,
    patching_grid,
    previous_token_scores,
    record,
    repeated_tokens,
    residual_stream,
)
from named_transformer.interop.onnx import export_onnx, run_onnx
from named_transformer.interop.pytorch import (
    bias_from_torch,
    from_torch,
    mask_from_torch,
    to_torch,
)
from named_transformer.models.alibi import (
    ALiBi,
    ALiBiMultiHeadAttention,
    alibi_attend_heads,
    alibi_multihead_attention,
)
from named_transformer.models.attention_weights import AttentionWeights
from named_transformer.models.classifier import TransformerClassifier, masked_max
from named_transformer.models.config import TransformerConfig
from named_transformer.models.cores import Automatic, Blockwise, Fused, Materialise
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.embedding import (
    LearnedPositions,
    SinusoidalPositions,
    TokenEmbedding,
    add_positions,
    embed,
)
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.generator import Generator, log_probabilities
from named_transformer.models.grouped import (
    fused_grouped_attention,
    group_queries,
    grouped_attend,
    grouped_attention,
    grouped_attention_weights,
)
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import (
    Heads,
    MultiHeadAttention,
    attend_grouped_heads,
    attend_heads,
    attend_projected,
    grouped_query_attention,
    merge_heads,
    multihead,
    multihead_attention,
    multihead_self_attention,
    project_heads,
    project_qkv,
    stack_qkv,
    stacked_projection,
)
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.relative import (
    Relative,
    RelativeMultiHeadAttention,
    relative_attend,
    relative_attention_weights,
    relative_multihead_attention,
)
from named_transformer.models.rnn import (
    ElmanCell,
    GRUCell,
    LSTMCell,
    elman_cell,
    gru_cell,
    lstm_cell,
)
from named_transformer.models.rotary import (
    Rotary,
    RotaryMultiHeadAttention,
    rotary_multihead_attention,
    rotate_heads,
)
from named_transformer.models.seq2seq import (
    AttentionDecoder,
    BahdanauSeq2Seq,
    BidirectionalEncoder,
    FixedContextDecoder,
    RNNEncoderDecoder,
    bahdanau_attention,
    bidirectional_annotations,
    readout,
    recurrence,
    reverse_padded,
)
from named_transformer.models.sublayers import (
    FeedForward,
    GatedFeedForward,
    LayerNorm,
    Residual,
    RMSNorm,
)
from named_transformer.models.text_encoder import (
    MaskedLanguageHead,
    Pooler,
    TextEncoder,
    dense,
)
from named_transformer.models.transformer import Transformer, TransformerStacks
from named_transformer.models.variants import (
    AttentionVariant,
    Positions,
    register_positions,
)
from named_transformer.pretrained import (
    ChatModel,
    ChatTokenizer,
    Generation,
    GGUFCheckpoint,
    SentenceEncoder,
    Tokenized,
    checkpoint_names,
    from_gguf,
    from_huggingface,
    gguf_tokenizer,
    load_gguf,
    load_minilm,
    load_smollm2,
    read_gguf,
    to_huggingface,
)
from named_transformer.rasp.tracr import from_tracr

__all__ = [
    "AXES",
    "Axis",
    "additive_mask",
    "additive_score",
    "attend",
    "attention",
    "attention_from_scores",
    "attention_pooling",
    "attention_pooling_weights",
    "attention_weights",
    "basic_self_attention",
    "causal_mask",
    "checked",
    "cosine_score",
    "dot_score",
    "dropout",
    "feed_forward",
    "gated_feed_forward",
    "fused_attention",
    "general_score",
    "hardmax",
    "key_padding_mask",
    "layer_norm",
    "rms_norm",
    "location_score",
    "padding_mask",
    "relative_position_index",
    "relu",
    "scaled_dot_score",
    "shape_checks",
    "shape_checks_enabled",
    "sinusoidal_positions",
    "softmax",
    "softmax_",
    "standardize",
    "ElmanCell",
    "GRUCell",
    "LSTMCell",
    "elman_cell",
    "gru_cell",
    "lstm_cell",
    "AttentionDecoder",
    "BahdanauSeq2Seq",
    "BidirectionalEncoder",
    "RNNEncoderDecoder",
    "FixedContextDecoder",
    "bahdanau_attention",
    "bidirectional_annotations",
    "readout",
    "recurrence",
    "reverse_padded",
    "TransformerClassifier",
    "masked_max",
    "TransformerConfig",
    "Decoder",
    "DecoderLayer",
    "LearnedPositions",
    "SinusoidalPositions",
    "TokenEmbedding",
    "add_positions",
    "embed",
    "Encoder",
    "EncoderLayer",
    "Generator",
    "log_probabilities",
    "from_torch",
    "mask_from_torch",
    "to_torch",
    "LanguageModel",
    "MultiHeadAttention",
    "attend_heads",
    "merge_heads",
    "multihead_attention",
    "multihead_self_attention",
    "project_heads",
    "stack_qkv",
    "stacked_projection",
    "CountsParameters",
    "RelativeMultiHeadAttention",
    "relative_attend",
    "relative_attention_weights",
    "relative_multihead_attention",
    "FeedForward",
    "GatedFeedForward",
    "LayerNorm",
    "RMSNorm",
    "Residual",
    "Transformer",
    "TransformerStacks",
    "CompiledDecoder",
    "Decoded",
    "IncrementalDecoder",
    "beam_search",
    "greedy",
    "length_penalty",
    "sample",
    "nucleus_mask",
    "stream",
    "strip_after_eos",
    "gelu",
    "gelu_tanh",
    "silu",
    "l2_normalize",
    "mean_pooling",
    "MaskedLanguageHead",
    "Pooler",
    "TextEncoder",
    "dense",
    "SentenceEncoder",
    "Tokenized",
    "checkpoint_names",
    "from_huggingface",
    "load_minilm",
    "ChatModel",
    "ChatTokenizer",
    "GGUFCheckpoint",
    "Generation",
    "from_gguf",
    "gguf_tokenizer",
    "load_gguf",
    "load_smollm2",
    "read_gguf",
    "to_huggingface",
    "bias_from_torch",
    "alibi_bias",
    "alibi_slopes",
    "sliding_window_mask",
    "rotary_angles",
    "rotary_frequencies",
    "rotate",
    "ALiBiMultiHeadAttention",
    "alibi_attend_heads",
    "alibi_multihead_attention",
    "fused_grouped_attention",
    "group_queries",
    "grouped_attend",
    "grouped_attention",
    "grouped_attention_weights",
    "attend_grouped_heads",
    "grouped_query_attention",
    "RotaryMultiHeadAttention",
    "rotary_multihead_attention",
    "rotate_heads",
    "blockwise_attention",
    "export_onnx",
    "run_onnx",
    "from_tracr",
    "cached_self_attention",
    # 0.5.0: one multi-head attention, its variants as parts
    "ALiBi",
    "AttentionVariant",
    "AttentionWeights",
    "Blockwise",
    "Fused",
    "Heads",
    "Materialise",
    "Positions",
    "Relative",
    "Rotary",
    "attend_projected",
    "multihead",
    "project_qkv",
    "register_positions",
    # 0.6.0: the core chosen per call, look inside, GGUF files and SmolLM2
    "Automatic",
    "Named",
    "Record",
    "ablate",
    "direct_logit_attribution",
    "edit",
    "induction_scores",
    "logit_lens",
    "patch",
    "patching_grid",
    "previous_token_scores",
    "record",
    "repeated_tokens",
    "residual_stream",
]
__version__ = "0.8.3"


def __getattr__(name: str) -> object:
    """``nt.exercises`` (and its learner switch, ``nt.exercises.use``) imported on first
    use: its checks import hypothesis, which ``import named_transformer`` skips."""
    if name == "exercises":
        import importlib

        return importlib.import_module("named_transformer.exercises")
    raise AttributeError(f"module 'named_transformer' has no attribute {name!r}")
