"""The package layout: a public API that moving modules into subpackages kept whole.

``PUBLIC`` is ``named_transformer.__all__`` as it stood before the modules moved into
``core/``, ``models/``, ``decoding/``, ``workflows/`` and ``interop/`` (version 0.1.0);
the modules that became packages keep their names too.
"""

import importlib
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import named_transformer as nt

PUBLIC = [
    "AXES",
    "AttentionDecoder",
    "Axis",
    "BahdanauSeq2Seq",
    "BidirectionalEncoder",
    "CountsParameters",
    "Decoder",
    "DecoderLayer",
    "ElmanCell",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "FixedContextDecoder",
    "GRUCell",
    "Generator",
    "LSTMCell",
    "LanguageModel",
    "LayerNorm",
    "LearnedPositions",
    "MultiHeadAttention",
    "RNNEncoderDecoder",
    "RelativeMultiHeadAttention",
    "Residual",
    "SinusoidalPositions",
    "TokenEmbedding",
    "Transformer",
    "TransformerClassifier",
    "TransformerConfig",
    "TransformerStacks",
    "add_positions",
    "additive_score",
    "attend",
    "attend_heads",
    "attention",
    "attention_from_scores",
    "attention_pooling",
    "attention_pooling_weights",
    "attention_weights",
    "bahdanau_attention",
    "basic_self_attention",
    "bidirectional_annotations",
    "causal_mask",
    "checked",
    "cosine_score",
    "dot_score",
    "dropout",
    "elman_cell",
    "embed",
    "feed_forward",
    "from_torch",
    "fused_attention",
    "general_score",
    "gru_cell",
    "hardmax",
    "key_padding_mask",
    "layer_norm",
    "location_score",
    "log_probabilities",
    "lstm_cell",
    "mask_from_torch",
    "masked_max",
    "merge_heads",
    "multihead_attention",
    "multihead_self_attention",
    "padding_mask",
    "project_heads",
    "readout",
    "recurrence",
    "relative_attend",
    "relative_attention_weights",
    "relative_multihead_attention",
    "relative_position_index",
    "relu",
    "reverse_padded",
    "scaled_dot_score",
    "shape_checks",
    "shape_checks_enabled",
    "sinusoidal_positions",
    "softmax",
    "stack_qkv",
    "stacked_projection",
    "standardize",
    "to_torch",
]
KEPT_MODULES = {
    "named_transformer.decoding": [
        "Decoded", "IncrementalDecoder", "beam_search", "greedy", "length_penalty",
        "sample", "strip_after_eos",
    ],
    "named_transformer.interop": ["from_torch", "mask_from_torch", "to_torch"],
    "named_transformer.workflows": [
        "KINDS", "NoPositions", "SIZES", "attention_figure", "attention_maps",
        "build_model", "decode_examples", "evaluate_model", "held_out", "load_run",
        "loss_function", "make_collate", "make_spec", "train_task",
    ],
}  # fmt: skip
SUBPACKAGES = [
    "core", "models", "decoding", "workflows", "interop", "pretrained", "inside",
]  # fmt: skip


ADDED_IN_0_2_0 = [
    "CompiledDecoder", "Decoded", "IncrementalDecoder", "beam_search", "greedy",
    "length_penalty", "sample", "strip_after_eos",
]  # fmt: skip


ADDED_IN_0_3_0 = [
    "gelu", "gelu_tanh", "silu", "l2_normalize", "mean_pooling", "MaskedLanguageHead",
    "Pooler", "TextEncoder", "dense", "SentenceEncoder", "Tokenized",
    "checkpoint_names", "from_huggingface", "load_minilm", "to_huggingface",
    "bias_from_torch", "alibi_bias", "alibi_slopes", "sliding_window_mask",
    "rotary_angles", "rotary_frequencies", "rotate", "ALiBiMultiHeadAttention",
    "alibi_attend_heads", "alibi_multihead_attention", "fused_grouped_attention",
    "group_queries", "grouped_attend", "grouped_attention", "grouped_attention_weights",
    "attend_grouped_heads", "grouped_query_attention", "RotaryMultiHeadAttention",
    "rotary_multihead_attention", "rotate_heads", "blockwise_attention",
]  # fmt: skip
ADDED_IN_0_4_0 = ["export_onnx", "run_onnx", "from_tracr", "cached_self_attention"]
ADDED_IN_0_5_0 = [
    "ALiBi", "AttentionVariant", "AttentionWeights", "Blockwise", "Fused", "Heads",
    "Materialise", "Positions", "Relative", "Rotary", "attend_projected", "multihead",
    "project_qkv", "register_positions",
    "GatedFeedForward", "RMSNorm", "gated_feed_forward", "rms_norm",
]  # fmt: skip

ADDED_IN_0_6_0 = [
    "Named", "Record", "ablate", "direct_logit_attribution", "edit",
    "induction_scores", "logit_lens", "patch", "patching_grid",
    "previous_token_scores", "record", "repeated_tokens", "residual_stream",
    "ChatModel", "ChatTokenizer", "GGUFCheckpoint", "Generation", "from_gguf",
    "gguf_tokenizer", "load_gguf", "load_smollm2", "read_gguf", "nucleus_mask",
    "stream", "Automatic",
]  # fmt: skip


ADDED_IN_0_8_0 = ["additive_mask", "softmax_"]

# 0.9.0: the attention owns its position scheme, which the configuration names; the
# scheme subclasses and 0.4.0's functional forms went (the CHANGELOG names what
# replaces each)
ADDED_IN_0_9_0 = [
    "Learned", "LinearBiases", "PositionScheme", "RelativeTables", "Sinusoidal",
    "register_scheme",
    "AttentionOnlyLayer", "AttentionOnlyModel", "composition_score", "ov_circuit",
    "qk_circuit",
]  # fmt: skip
REMOVED_IN_0_9_0 = [
    "ALiBiMultiHeadAttention", "RelativeMultiHeadAttention", "RotaryMultiHeadAttention",
    "alibi_attend_heads", "alibi_multihead_attention", "attend_grouped_heads",
    "attend_heads", "grouped_query_attention", "multihead_attention",
    "multihead_self_attention", "relative_multihead_attention",
    "rotary_multihead_attention", "register_positions",
    # out of the top level, still in their modules (the CHANGELOG says where)
    "AttentionDecoder", "BidirectionalEncoder", "FixedContextDecoder",
    "RNNEncoderDecoder", "bahdanau_attention", "bidirectional_annotations",
    "readout", "recurrence", "reverse_padded", "ElmanCell", "LSTMCell", "elman_cell",
    "gru_cell", "lstm_cell", "fused_grouped_attention", "group_queries",
    "grouped_attend", "grouped_attention", "grouped_attention_weights",
    "relative_attend", "relative_attention_weights", "rotary_angles", "rotate",
    "rotate_heads", "alibi_bias", "alibi_slopes", "add_positions", "masked_max",
    "log_probabilities", "nucleus_mask", "length_penalty", "strip_after_eos",
    "stream", "gguf_tokenizer", "load_gguf", "Tokenized", "ChatTokenizer",
    "GGUFCheckpoint",
]  # fmt: skip
# the attention-only model is a LanguageModel of TransformerConfig.attention_only()
REMOVED_IN_0_11_0 = ["AttentionOnlyLayer", "AttentionOnlyModel"]


def test_the_public_api_is_what_it_was_plus_what_each_version_added():
    added = (
        PUBLIC
        + ADDED_IN_0_2_0
        + ADDED_IN_0_3_0
        + ADDED_IN_0_4_0
        + ADDED_IN_0_5_0
        + ADDED_IN_0_6_0
        + ADDED_IN_0_8_0
        + ADDED_IN_0_9_0
    )
    removed = REMOVED_IN_0_9_0 + REMOVED_IN_0_11_0
    assert sorted(nt.__all__) == sorted(set(added) - set(removed))
    missing = [name for name in nt.__all__ if not hasattr(nt, name)]
    assert not missing, missing


@pytest.mark.parametrize("module", sorted(KEPT_MODULES))
def test_modules_that_became_packages_keep_their_names(module):
    imported = importlib.import_module(module)
    missing = [name for name in KEPT_MODULES[module] if not hasattr(imported, name)]
    assert not missing, f"{module} lost {missing}"


def test_every_module_of_every_subpackage_imports():
    for name in SUBPACKAGES:
        package = importlib.import_module(f"named_transformer.{name}")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")


def test_python_dash_m_still_runs_the_cli():
    done = subprocess.run(
        [sys.executable, "-m", "named_transformer", "--help"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "train" in done.stdout


def test_the_version_is_the_changelogs_top_entry():
    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    changelog = (root / "CHANGELOG.md").read_text()
    top = re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
    assert top is not None, "CHANGELOG.md has no version entry"
    assert project["version"] == top[1] == nt.__version__
