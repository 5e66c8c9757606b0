r"""Attention and the Transformer, written exactly as in named tensor notation.

Every public function is shape-checked at run time (see :mod:`named_transformer.axes`);
``shape_checks(False)`` turns checking off.
"""

# First, before the heavy imports: under ``python -m named_transformer``, Ctrl-C while
# they run is one line, not a traceback from inside torch (nothing else changes).
import named_transformer._startup  # noqa: F401

# einops' calls as one node each in torch.compile's graph (faster compiles), registered
# when torch._dynamo first loads: see named_transformer._tracing
import named_transformer._tracing  # noqa: F401
from named_transformer.axes import (
    AXES,
    Axis,
    checked,
    shape_checks,
    shape_checks_enabled,
)
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
from named_transformer.core.rotary import rotary_frequencies
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
    sample,
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
from named_transformer.models.alibi import ALiBi, LinearBiases
from named_transformer.models.attention_only import (
    composition_score,
    ov_circuit,
    qk_circuit,
)
from named_transformer.models.attention_weights import AttentionWeights
from named_transformer.models.classifier import TransformerClassifier
from named_transformer.models.config import TransformerConfig
from named_transformer.models.cores import Automatic, Blockwise, Fused, Materialise
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.embedding import (
    Learned,
    LearnedPositions,
    Sinusoidal,
    SinusoidalPositions,
    TokenEmbedding,
    embed,
)
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.generator import Generator
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import (
    Heads,
    MultiHeadAttention,
    attend_projected,
    merge_heads,
    multihead,
    project_heads,
    project_qkv,
    stack_qkv,
    stacked_projection,
)
from named_transformer.models.parameters import CountsParameters
from named_transformer.models.relative import (
    Relative,
    RelativeTables,
)
from named_transformer.models.rnn import (
    GRUCell,
)
from named_transformer.models.rotary import Rotary
from named_transformer.models.seq2seq import (
    BahdanauSeq2Seq,
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
    PositionScheme,
    register_scheme,
)
from named_transformer.pretrained import (
    ChatModel,
    Generation,
    SentenceEncoder,
    checkpoint_names,
    from_gguf,
    from_huggingface,
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
    "GRUCell",
    "BahdanauSeq2Seq",
    "TransformerClassifier",
    "TransformerConfig",
    "Decoder",
    "DecoderLayer",
    "Learned",
    "LearnedPositions",
    "Sinusoidal",
    "SinusoidalPositions",
    "TokenEmbedding",
    "embed",
    "Encoder",
    "EncoderLayer",
    "Generator",
    "from_torch",
    "mask_from_torch",
    "to_torch",
    "LanguageModel",
    "MultiHeadAttention",
    "merge_heads",
    "project_heads",
    "stack_qkv",
    "stacked_projection",
    "CountsParameters",
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
    "sample",
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
    "checkpoint_names",
    "from_huggingface",
    "load_minilm",
    "ChatModel",
    "Generation",
    "from_gguf",
    "load_smollm2",
    "read_gguf",
    "to_huggingface",
    "bias_from_torch",
    "sliding_window_mask",
    "rotary_frequencies",
    "blockwise_attention",
    "export_onnx",
    "run_onnx",
    "from_tracr",
    "cached_self_attention",
    # 0.5.0: one multi-head attention, its variants as parts
    "ALiBi",
    "LinearBiases",
    "AttentionVariant",
    "AttentionWeights",
    "Blockwise",
    "Fused",
    "Heads",
    "Materialise",
    "PositionScheme",
    "Positions",
    "Relative",
    "RelativeTables",
    "Rotary",
    "attend_projected",
    "multihead",
    "project_qkv",
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
    # 0.9.0: the attention owns its position scheme; the configuration builds all
    "register_scheme",
    # 0.9.0: watch a circuit form
    "composition_score",
    "ov_circuit",
    "qk_circuit",
]
__version__ = "0.11.4"


def __getattr__(name: str) -> object:
    """``nt.exercises`` (and its learner switch, ``nt.exercises.use``) imported on first
    use: its checks import hypothesis, which ``import named_transformer`` skips."""
    if name == "exercises":
        import importlib

        return importlib.import_module("named_transformer.exercises")
    raise AttributeError(f"module 'named_transformer' has no attribute {name!r}")
