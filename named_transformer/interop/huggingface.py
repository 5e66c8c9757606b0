r"""Hugging Face checkpoints of BERT, GPT-2, Llama, Qwen2 and Mistral as the library's
named modules.

A checkpoint is a dictionary from tensor names to tensors, laid out for the reference
implementation's matrix products. Each tensor is one of the named weights, or several
stacked; the conversion is a table from each name to the named weight(s) it holds and
the ``rearrange`` pattern that names its axes (:func:`checkpoint_names`). The pattern
read backwards converts the other way (:func:`to_huggingface`).

BERT keeps $W^Q$ as ``query.weight`` $\in \mathbb R^{(\mathsf{heads}\cdot
\mathsf{key}) \times \mathsf{layer}}$ (``nn.Linear``: output rows). GPT-2 stacks the
three projections in one ``Conv1D`` (input rows) of $\mathsf{layer} \times
3|\mathsf{layer}|$:

$$\texttt{c\_attn.weight} \in \mathbb R^{\mathsf{layer} \times
  (\mathsf{three} \cdot \mathsf{heads} \cdot \mathsf{key})}
  \;\longrightarrow\;
  W^Q, W^K, W^V \in \mathbb R^{\mathsf{heads} \times \mathsf{layer} \times
  \mathsf{key}}.$$

Llama keeps each projection as an ``nn.Linear`` weight, the key and value ones with
$\mathsf{kv\_heads}$ rows of heads: ``k_proj.weight`` $\in \mathbb
R^{(\mathsf{kv\_heads}\cdot\mathsf{key}) \times \mathsf{layer}}$. Its rotary
positions pair channel $i$ with $i + |\mathsf{key}|/2$ (``rotate_half``), which is
the layout of :func:`~named_transformer.core.rotary.rotate`, so the weights convert
unpermuted. Qwen2 adds $b^Q, b^K, b^V$; Mistral a sliding window.

``transformers`` is needed only to pass its model objects or to build them
(:func:`to_huggingface`); a config dictionary and a state dictionary convert without
it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from einops import rearrange
from jaxtyping import Shaped
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.interop.pytorch import _positions_of
from named_transformer.models.config import TransformerConfig
from named_transformer.models.embedding import NoPositions
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.rotary import Rotary
from named_transformer.models.text_encoder import TextEncoder

__all__ = ["checkpoint_names", "from_huggingface", "to_huggingface"]


# --8<-- [start:Name]
@dataclass(frozen=True)
class _Name:
    """One checkpoint tensor (``{i}`` = layer number) and the named weights it holds."""

    theirs: str
    ours: tuple[str, ...]
    pattern: str  # their axes -> our axes; a leading "three" axis = several of ours


def _layers(names: list[_Name], count: int) -> list[_Name]:
    """The table with ``{i}`` filled in for each of ``count`` layers."""
    return [
        _Name(n.theirs.format(i=i), tuple(o.format(i=i) for o in n.ours), n.pattern)
        for i in range(count)
        for n in names
    ]


# --8<-- [end:Name]


# the rows of the tables, by family and part (``checkpoint_names`` lists a family's)
_BLOCK = "blocks.layers.{i}."
_ATT = _BLOCK + "self_attention."
_FFN = _BLOCK + "feed_forward."
_NORM1 = _BLOCK + "attention_residual.norm."
_NORM2 = _BLOCK + "feed_forward_residual.norm."
_SAME, _VECTOR = "vocab layer -> vocab layer", "layer -> layer"
_SQUARE = "layer_out layer -> layer_out layer"
_POSITIONS = "seq layer -> seq layer"

_BERT_EMBEDDINGS = [
    _Name("embeddings.word_embeddings.weight", ("embedding.table",), _SAME),
    _Name("embeddings.position_embeddings.weight", ("positions.table",), _POSITIONS),
    _Name(
        "embeddings.token_type_embeddings.weight",
        ("types.table",),
        "types layer -> types layer",
    ),
    _Name("embeddings.LayerNorm.weight", ("embedding_norm.gamma",), _VECTOR),
    _Name("embeddings.LayerNorm.bias", ("embedding_norm.beta",), _VECTOR),
]
_BERT_LAYER = [
    _Name(f"encoder.layer.{{i}}.attention.self.{name}.weight", (_ATT + f"w_{x}",),
          f"(heads {axis}) layer -> heads layer {axis}")
    for name, x, axis in (("query", "q", "key"), ("key", "k", "key"),
                          ("value", "v", "val"))
] + [
    _Name(f"encoder.layer.{{i}}.attention.self.{name}.bias", (_ATT + f"b_{x}",),
          f"(heads {axis}) -> heads {axis}")
    for name, x, axis in (("query", "q", "key"), ("key", "k", "key"),
                          ("value", "v", "val"))
] + [
    _Name("encoder.layer.{i}.attention.output.dense.weight", (_ATT + "w_o",),
          "layer (heads val) -> heads val layer"),
    _Name("encoder.layer.{i}.attention.output.dense.bias", (_ATT + "b_o",), _VECTOR),
    _Name("encoder.layer.{i}.attention.output.LayerNorm.weight", (_NORM1 + "gamma",),
          _VECTOR),
    _Name("encoder.layer.{i}.attention.output.LayerNorm.bias", (_NORM1 + "beta",),
          _VECTOR),
    _Name("encoder.layer.{i}.intermediate.dense.weight", (_FFN + "w1",),
          "hidden layer -> hidden layer"),
    _Name("encoder.layer.{i}.intermediate.dense.bias", (_FFN + "b1",),
          "hidden -> hidden"),
    _Name("encoder.layer.{i}.output.dense.weight", (_FFN + "w2",),
          "layer hidden -> layer hidden"),
    _Name("encoder.layer.{i}.output.dense.bias", (_FFN + "b2",), _VECTOR),
    _Name("encoder.layer.{i}.output.LayerNorm.weight", (_NORM2 + "gamma",), _VECTOR),
    _Name("encoder.layer.{i}.output.LayerNorm.bias", (_NORM2 + "beta",), _VECTOR),
]  # fmt: skip
_BERT_POOLER = [
    _Name("pooler.dense.weight", ("pooler.weight",), _SQUARE),
    _Name("pooler.dense.bias", ("pooler.bias",), _VECTOR),
]  # fmt: skip
_BERT_HEAD = [
    _Name("cls.predictions.transform.dense.weight", ("head.weight",), _SQUARE),
    _Name("cls.predictions.transform.dense.bias", ("head.bias",), _VECTOR),
    _Name("cls.predictions.transform.LayerNorm.weight", ("head.norm.gamma",), _VECTOR),
    _Name("cls.predictions.transform.LayerNorm.bias", ("head.norm.beta",), _VECTOR),
    _Name("cls.predictions.bias", ("head.generator.bias",), "vocab -> vocab"),
]  # fmt: skip
_GPT2_EMBEDDINGS = [
    _Name("wte.weight", ("embedding.table",), _SAME),
    _Name("wpe.weight", ("positions.table",), _POSITIONS),
]
_GPT2_LAYER = [
    _Name("h.{i}.ln_1.weight", (_NORM1 + "gamma",), _VECTOR),
    _Name("h.{i}.ln_1.bias", (_NORM1 + "beta",), _VECTOR),
    _Name("h.{i}.attn.c_attn.weight", tuple(_ATT + f"w_{x}" for x in "qkv"),
          "layer (three heads key) -> three heads layer key"),
    _Name("h.{i}.attn.c_attn.bias", tuple(_ATT + f"b_{x}" for x in "qkv"),
          "(three heads key) -> three heads key"),
    _Name("h.{i}.attn.c_proj.weight", (_ATT + "w_o",),
          "(heads val) layer -> heads val layer"),
    _Name("h.{i}.attn.c_proj.bias", (_ATT + "b_o",), _VECTOR),
    _Name("h.{i}.ln_2.weight", (_NORM2 + "gamma",), _VECTOR),
    _Name("h.{i}.ln_2.bias", (_NORM2 + "beta",), _VECTOR),
    _Name("h.{i}.mlp.c_fc.weight", (_FFN + "w1",), "layer hidden -> hidden layer"),
    _Name("h.{i}.mlp.c_fc.bias", (_FFN + "b1",), "hidden -> hidden"),
    _Name("h.{i}.mlp.c_proj.weight", (_FFN + "w2",), "hidden layer -> layer hidden"),
    _Name("h.{i}.mlp.c_proj.bias", (_FFN + "b2",), _VECTOR),
]  # fmt: skip
_GPT2_FINAL = [
    _Name("ln_f.weight", ("blocks.norm.gamma",), _VECTOR),
    _Name("ln_f.bias", ("blocks.norm.beta",), _VECTOR),
]


_LLAMA_EMBEDDINGS = [_Name("embed_tokens.weight", ("embedding.table",), _SAME)]
_LLAMA_LAYER = [
    _Name("layers.{i}.input_layernorm.weight", (_NORM1 + "gamma",), _VECTOR),
    _Name("layers.{i}.self_attn.q_proj.weight", (_ATT + "w_q",),
          "(heads key) layer -> heads layer key"),
    _Name("layers.{i}.self_attn.k_proj.weight", (_ATT + "w_k",),
          "(kv_heads key) layer -> kv_heads layer key"),
    _Name("layers.{i}.self_attn.v_proj.weight", (_ATT + "w_v",),
          "(kv_heads val) layer -> kv_heads layer val"),
    _Name("layers.{i}.self_attn.o_proj.weight", (_ATT + "w_o",),
          "layer (heads val) -> heads val layer"),
    _Name("layers.{i}.post_attention_layernorm.weight", (_NORM2 + "gamma",),
          _VECTOR),
    _Name("layers.{i}.mlp.gate_proj.weight", (_FFN + "w_gate",),
          "hidden layer -> hidden layer"),
    _Name("layers.{i}.mlp.up_proj.weight", (_FFN + "w_up",),
          "hidden layer -> hidden layer"),
    _Name("layers.{i}.mlp.down_proj.weight", (_FFN + "w_down",),
          "layer hidden -> layer hidden"),
]  # fmt: skip
_LLAMA_QKV_BIASES = [  # Qwen2's, and Llama's with attention_bias
    _Name("layers.{i}.self_attn.q_proj.bias", (_ATT + "b_q",),
          "(heads key) -> heads key"),
    _Name("layers.{i}.self_attn.k_proj.bias", (_ATT + "b_k",),
          "(kv_heads key) -> kv_heads key"),
    _Name("layers.{i}.self_attn.v_proj.bias", (_ATT + "b_v",),
          "(kv_heads val) -> kv_heads val"),
]  # fmt: skip
_LLAMA_BIASES = [  # Llama's with attention_bias and mlp_bias
    _Name("layers.{i}.self_attn.o_proj.bias", (_ATT + "b_o",), _VECTOR),
    _Name("layers.{i}.mlp.gate_proj.bias", (_FFN + "b_gate",), "hidden -> hidden"),
    _Name("layers.{i}.mlp.up_proj.bias", (_FFN + "b_up",), "hidden -> hidden"),
    _Name("layers.{i}.mlp.down_proj.bias", (_FFN + "b_down",), _VECTOR),
]
_LLAMA_FINAL = [_Name("norm.weight", ("blocks.norm.gamma",), _VECTOR)]
_UNTIED = [_Name("lm_head.weight", ("generator.table",), _SAME)]


# --8<-- [start:checkpoint_names]
def checkpoint_names(family: str) -> list[tuple[str, str, str]]:
    """(their name, our weight(s), pattern) for ``"bert"``, ``"gpt2"``, ``"llama"``,
    ``"qwen2"`` or ``"mistral"``, ``{i}`` for the layer number: the table the
    conversion follows (``lm_head.weight`` only when the output is untied)."""
    llama = _LLAMA_EMBEDDINGS + _LLAMA_LAYER + _LLAMA_FINAL + _UNTIED
    tables = {
        "bert": _BERT_EMBEDDINGS + _BERT_LAYER + _BERT_POOLER + _BERT_HEAD,
        "gpt2": _GPT2_EMBEDDINGS + _GPT2_LAYER + _GPT2_FINAL,
        "llama": llama,
        "qwen2": llama[:-2] + _LLAMA_QKV_BIASES + llama[-2:],
        "mistral": llama,
    }
    if family not in tables:
        raise ValueError(f"family must be one of {sorted(tables)}, got {family!r}")
    return [(n.theirs, ", ".join(n.ours), n.pattern) for n in tables[family]]


# --8<-- [end:checkpoint_names]


def _bert_names(model: TextEncoder) -> list[_Name]:
    names = _BERT_EMBEDDINGS + _layers(_BERT_LAYER, model.config.encoder_layers)
    if model.types is None:
        names = [n for n in names if not n.ours[0].startswith("types.")]
    if model.pooler is not None:
        names = names + _BERT_POOLER
    return names + (_BERT_HEAD if model.head is not None else [])


def _gpt2_names(model: LanguageModel) -> list[_Name]:
    names = _GPT2_EMBEDDINGS + _layers(_GPT2_LAYER, model.config.decoder_layers)
    if model.generator.table is not model.embedding.table:
        names = names + _UNTIED
    return names + _GPT2_FINAL


def _llama_names(model: LanguageModel) -> list[_Name]:
    block = model.blocks.layers[0]
    layer = list(_LLAMA_LAYER)
    if block.self_attention.b_q is not None:
        layer += _LLAMA_QKV_BIASES
    if block.self_attention.b_o is not None:
        layer += _LLAMA_BIASES
    names = _LLAMA_EMBEDDINGS + _layers(layer, model.config.decoder_layers)
    names += _LLAMA_FINAL
    if model.generator.table is not model.embedding.table:
        names += _UNTIED
    return names


# their activation names -> ours; the first of each is what to_huggingface writes
# transformers' names (its ACT2FN) of the activations the library has; gelu_fast
# is the tanh GELU with sqrt(2/pi) written to ten digits (1e-12 from gelu_new)
_ACTIVATIONS = {
    "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu",
}  # fmt: skip
_THEIR_ACTIVATIONS = {ours: theirs for theirs, ours in reversed(_ACTIVATIONS.items())}
# buffers some checkpoints carry: recomputed here, not weights
_BUFFERS = re.compile(
    r"(embeddings\.(position_ids|token_type_ids)|h\.\d+\.attn\.(masked_)?bias)$"
)
#: the token-type table BERT always has (one row of zeros for a model without)
_NO_TYPES = "embeddings.token_type_embeddings.weight"
# names that repeat another tensor of a tied model: checked equal, not loaded twice
_TIED = {
    "cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
    "lm_head.weight": "wte.weight",
}
_LLAMA_TIED = {"lm_head.weight": "embed_tokens.weight"}


def _activation(name: str) -> str:
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation {name!r} has no named counterpart")
    return _ACTIVATIONS[name]


def _refuse(config: dict, **supported) -> None:
    for key, value in supported.items():
        if config.get(key, value) != value:
            raise ValueError(f"config {key}={config[key]!r} does not convert")


def _bert(config: dict, theirs: set[str], fused: bool) -> TextEncoder:
    _refuse(config, position_embedding_type="absolute", is_decoder=False,
            add_cross_attention=False)  # fmt: skip
    options = TransformerConfig(
        encoder_layers=config["num_hidden_layers"], decoder_layers=1,
        layer=config["hidden_size"], heads=config["num_attention_heads"],
        hidden=config["intermediate_size"],
        dropout=config.get("hidden_dropout_prob", 0.1),
        activation=_activation(config.get("hidden_act", "gelu")),
        eps=config.get("layer_norm_eps", 1e-12), fused_attention=fused,
    )  # fmt: skip
    return TextEncoder(
        config["vocab_size"], options, max_positions=config["max_position_embeddings"],
        types=config.get("type_vocab_size", 2), padding=config.get("pad_token_id"),
        pooler=any(name.startswith("pooler.") for name in theirs),
        head=any(name.startswith("cls.") for name in theirs),
    )  # fmt: skip


def _gpt2(config: dict, theirs: set[str], fused: bool) -> LanguageModel:
    _refuse(config, scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False,
            add_cross_attention=False)  # fmt: skip
    layer = config["n_embd"]
    options = TransformerConfig(
        encoder_layers=1, decoder_layers=config["n_layer"], layer=layer,
        heads=config["n_head"], hidden=config.get("n_inner") or 4 * layer,
        dropout=config.get("resid_pdrop", 0.1),
        activation=_activation(config.get("activation_function", "gelu_new")),
        norm_first=True, final_norm=True, eps=config.get("layer_norm_epsilon", 1e-5),
        fused_attention=fused,
    )  # fmt: skip
    return LanguageModel(
        config["vocab_size"], options, positions="learned",
        max_positions=config["n_positions"], scale_embeddings=False,
        tie_output=config.get("tie_word_embeddings", True), output_bias=False,
    )  # fmt: skip


def _rotary_base(config: dict) -> float:
    """RoPE's base theta, or a ValueError for a rotary scheme the library lacks."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ValueError(
            f"config rope_parameters rope_type={kind!r} does not convert: "
            "the named rotary positions are unscaled ('default')"
        )
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if factor not in (None, 1.0):
        raise ValueError(
            f"config partial_rotary_factor={factor!r} does not convert: "
            "the named rotary positions turn every key channel"
        )
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _window(config: dict) -> int | None:
    """The sliding window of every layer (Mistral; Qwen2 when all layers slide)."""
    if config["model_type"] == "mistral":
        return config.get("sliding_window")
    if config["model_type"] == "qwen2" and config.get("use_sliding_window"):
        first = config.get("max_window_layers", 0)  # older configs: no layer_types
        kinds = config.get("layer_types") or [
            "sliding_attention" if i >= first else "full_attention"
            for i in range(config["num_hidden_layers"])
        ]
        if set(kinds) != {"sliding_attention"}:
            raise ValueError(
                f"config layer_types={kinds!r} does not convert: "
                "the named model slides one window over every layer or none"
            )
        return config["sliding_window"]
    return None


def _biases(config: dict) -> tuple[bool, bool | None]:
    """(bias, qkv_bias) of the TransformerConfig, or a ValueError."""
    if config["model_type"] == "qwen2":
        return False, True  # q, k, v biases; none on o_proj or the MLP
    attention = config.get("attention_bias", False)
    mlp = config.get("mlp_bias", False)
    if attention != mlp:
        raise ValueError(
            f"config attention_bias={attention!r} with mlp_bias={mlp!r} does not "
            "convert: the named block has biases everywhere or nowhere"
        )
    return bool(attention), None


def _llama(config: dict, theirs: set[str], fused: bool) -> LanguageModel:
    layer, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or layer // heads
    if layer % heads != 0 or head_dim != layer // heads:
        raise ValueError(
            f"config head_dim={head_dim} does not convert: the named heads are "
            f"hidden_size / num_attention_heads = {layer / heads:g} wide"
        )
    if config.get("attention_dropout"):
        raise ValueError(
            f"config attention_dropout={config['attention_dropout']!r} does not "
            "convert: the named model's dropout would drop more than the weights"
        )
    bias, qkv_bias = _biases(config)
    options = TransformerConfig.llama(
        decoder_layers=config["num_hidden_layers"], layer=layer, heads=heads,
        kv_heads=config.get("num_key_value_heads") or heads,
        hidden=config["intermediate_size"],
        activation=_activation(config.get("hidden_act", "silu")),
        eps=config.get("rms_norm_eps", 1e-6), fused_attention=fused,
        positions=Rotary(_rotary_base(config)), window=_window(config),
        bias=bias, qkv_bias=qkv_bias,
    )  # fmt: skip
    # a base model (LlamaModel) has no output layer: the named one ties its own
    tied = config.get("tie_word_embeddings", False) or "lm_head.weight" not in theirs
    return LanguageModel(
        config["vocab_size"], options,
        max_positions=config.get("max_position_embeddings", 2048),
        scale_embeddings=False, tie_output=tied, output_bias=False,
    )  # fmt: skip


@dataclass(frozen=True)
class _Family:
    build: Callable[[dict, set[str], bool], nn.Module]
    names: Callable[[nn.Module], list[_Name]]
    prefix: str  # of the body's names inside the model with a head
    tied: Mapping[str, str]  # names repeating another tensor when tied


_LLAMA = _Family(_llama, _llama_names, "model.", _LLAMA_TIED)
_FAMILIES = {
    "bert": _Family(_bert, _bert_names, "bert.", _TIED),
    "gpt2": _Family(_gpt2, _gpt2_names, "transformer.", _TIED),
    "llama": _LLAMA,
    "qwen2": _LLAMA,
    "mistral": _LLAMA,
}


def _axis_sizes(pattern: str, ours: list[Tensor]) -> dict[str, int]:
    """Sizes of the named axes on our side of ``pattern``."""
    axes = pattern.split("->")[1].split()
    shape = (len(ours), *ours[0].shape) if len(ours) > 1 else tuple(ours[0].shape)
    return dict(zip(axes, shape, strict=True))


def _theirs(name: _Name, ours: list[Tensor]) -> Tensor:
    """Our weight(s) laid out as the checkpoint tensor: the pattern backwards."""
    left, right = name.pattern.split("->")
    if len(ours) == 1:
        return rearrange(ours[0], f"{right} -> {left}")
    return rearrange(ours, f"{right} -> {left}")  # the list stacked along "three"


def _fit(name: _Name, tensor: Tensor, ours: list[Tensor]) -> list[Tensor]:
    """The checkpoint tensor as our weight(s), or a ValueError naming it."""
    expected = tuple(_theirs(name, ours).shape)
    sizes = _axis_sizes(name.pattern, ours)
    if tuple(tensor.shape) != expected:
        named = ", ".join(f"{axis}={size}" for axis, size in sizes.items())
        left, right = (side.strip() for side in name.pattern.split("->"))
        raise ValueError(
            f"checkpoint tensor {name.theirs!r} has shape {tuple(tensor.shape)}, "
            f"expected {expected} = ({left}) with {named}, "
            f"for {', '.join(name.ours)} ({right})"
        )
    sizes.pop("three", None)
    converted = rearrange(tensor, name.pattern, **sizes)
    return [converted] if len(ours) == 1 else list(converted)


def _places(model: nn.Module) -> dict[int, list[tuple[nn.Module, str]]]:
    """Where each parameter lives: (module, attribute) pairs, several when tied."""
    places: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for attribute, parameter in module.named_parameters(recurse=False):
            places.setdefault(id(parameter), []).append((module, attribute))
    return places


def _assign(places: dict, old: nn.Parameter, value: Tensor) -> None:
    """Make ``value`` the parameter wherever ``old`` was (tied places included)."""
    new = nn.Parameter(value, requires_grad=old.requires_grad)
    for module, attribute in places.pop(id(old)):
        setattr(module, attribute, new)


def _parameters(model: nn.Module, name: _Name) -> list[Tensor]:
    parameters = dict(model.named_parameters(remove_duplicate=False))
    return [parameters[o] for o in name.ours]


# --8<-- [start:from_huggingface]
@checked
def from_huggingface(
    model,
    # any shape: each tensor is checked against its named weight below
    state_dict: Mapping[str, Shaped[Tensor, "..."]] | None = None,
    *,
    fused_attention: bool = False,
) -> TextEncoder | LanguageModel:
    """A ``transformers`` BERT, GPT-2, Llama, Qwen2 or Mistral model as the named
    modules, weights copied.

    ``model`` is a ``BertModel``, ``BertForMaskedLM``, ``GPT2Model``,
    ``GPT2LMHeadModel``, ``LlamaForCausalLM``, ``Qwen2ForCausalLM``,
    ``MistralForCausalLM`` or one of their base models (``LlamaModel``, ...); or its
    config (object or dictionary) with ``state_dict``. BERT becomes a
    :class:`~named_transformer.models.text_encoder.TextEncoder` (with pooler and head
    when the checkpoint has them), the others a
    :class:`~named_transformer.models.language_model.LanguageModel` (Llama's family
    with rotary positions, :meth:`TransformerConfig.llama
    <named_transformer.models.config.TransformerConfig.llama>`'s block; a base model
    with its output tied to the embedding), in the
    checkpoint's dtype and eval mode (``fused_attention``: the
    :class:`~named_transformer.models.config.TransformerConfig` option). A tensor
    that does not fit raises ValueError naming it, its shape and the named shape
    expected; so do missing and unknown tensors. A config the named code does not
    implement (a scaled rotary scheme, a ``head_dim`` other than width / heads, ...)
    raises ValueError naming the field.
    """
    if state_dict is None:
        state_dict, model = model.state_dict(), model.config
    config = dict(model) if isinstance(model, Mapping) else model.to_dict()
    prefix = family_of(config).prefix
    theirs = {k.removeprefix(prefix): v for k, v in state_dict.items()}
    theirs = {k: v for k, v in theirs.items() if not _BUFFERS.search(k)}
    dtype = next(v.dtype for v in theirs.values() if v.is_floating_point())
    return convert_checkpoint(
        config, set(theirs), theirs.__getitem__, dtype=dtype,
        fused_attention=fused_attention,
    )  # fmt: skip


# --8<-- [end:from_huggingface]


def family_of(config: Mapping) -> _Family:
    """The conversion of ``config["model_type"]``, or a ValueError naming it."""
    family = _FAMILIES.get(config.get("model_type"))
    if family is None:
        raise ValueError(
            f"model_type {config.get('model_type')!r} does not convert: "
            f"{', '.join(_FAMILIES)} do"
        )
    return family


# --8<-- [start:convert_checkpoint]
@checked
def convert_checkpoint(
    config: Mapping,
    available: set[str],
    fetch: Callable[[str], Tensor],
    *,
    dtype: torch.dtype,
    fused_attention: bool = False,
    empty: bool = False,
) -> TextEncoder | LanguageModel:
    """The named model of a Hugging Face ``config`` (a dictionary), its weights read
    one tensor at a time by ``fetch`` from the checkpoint names ``available``.

    Each tensor is fetched, converted and copied before the next, so a checkpoint
    read lazily (a GGUF file's quantised tensors) never lies in memory whole beside
    the model. Missing, unknown and misfit tensors raise ValueError naming them.
    ``empty=True`` builds the model on PyTorch's meta device (no memory, no random
    initialisation) and makes each converted tensor the parameter itself rather
    than copying it, so loading holds one copy of the weights, not two; tied
    parameters stay one (tested on tied and untied GGUF files).
    """
    family = family_of(config)
    with torch.device("meta" if empty else "cpu"):
        ours = family.build(dict(config), available, fused_attention)
    ours = ours.to(dtype).eval()
    if empty and next(ours.buffers(), None) is not None:
        raise ValueError("empty=True builds only models without buffers")
    names = family.names(ours)
    expected = {name.theirs for name in names}
    if missing := sorted(expected - available):
        raise ValueError(f"checkpoint has no tensor {missing[0]!r}")
    repeated = {n: t for n, t in family.tied.items() if n in available - expected}
    for name, tied_to in repeated.items():
        if not torch.equal(fetch(name), fetch(tied_to)):
            raise ValueError(f"checkpoint tensor {name!r} is not {tied_to!r}")
    if unknown := sorted(available - expected - set(repeated)):
        raise ValueError(f"checkpoint tensor {unknown[0]!r} has no named counterpart")
    places = _places(ours)
    with torch.no_grad():
        for name in names:
            targets = _parameters(ours, name)
            converted = _fit(name, fetch(name.theirs), targets)
            for target, value in zip(targets, converted, strict=True):
                if empty:
                    _assign(places, target, value.to(dtype).contiguous())
                else:
                    target.copy_(value)
    if unset := [name for name, p in ours.named_parameters() if p.is_meta]:
        raise ValueError(f"the checkpoint leaves {unset[0]!r} unset")
    return ours


# --8<-- [end:convert_checkpoint]


_REFUSED = "does not convert to transformers"


def _check(condition: bool, why: str) -> None:
    if not condition:
        raise ValueError(f"{_REFUSED}: {why}")


def _check_positions(model: nn.Module, family: str) -> None:
    """Every attention of ``model`` has the position scheme of ``family``: rotary of
    one base (Llama, Qwen2, Mistral) or none (BERT, GPT-2), or a ValueError naming the
    first that has another; the reference would compute without it."""
    rotary = _rotary(model) if family == "Llama" else None
    for name, attention in model.named_modules():
        if not isinstance(attention, MultiHeadAttention):
            continue
        positions = _positions_of(attention)
        if rotary is None:
            _check(positions.name == "none",
                   f"{name} has {positions.name} positions and {family}'s attention "
                   "has none (its positions are added to the embeddings)")  # fmt: skip
        else:
            _check(isinstance(positions, Rotary) and positions.base == rotary.base,
                   f"{name} has {positions.name} positions, where Llama's attention "
                   f"is rotary of base {rotary.base} in every layer")  # fmt: skip


def _check_heads_and_biases(c: TransformerConfig, family: str) -> None:
    _check(c.kv_heads in (None, c.heads),
           f"{family} has as many key/value heads as query heads")  # fmt: skip
    _check(c.bias and c.qkv_bias in (None, True), f"{family} has every bias")
    _check(c.norm == "layer" and c.feed_forward == "plain",
           f"{family} has LayerNorm and a plain feed-forward")  # fmt: skip


def _bert_config(ours: TextEncoder) -> dict:
    c = ours.config
    _check_positions(ours, "BERT")
    _check_heads_and_biases(c, "BERT")
    _check(not c.norm_first, "BERT's layers are post-norm (norm_first=False)")
    _check(not c.has_final_norm, "BERT has no final norm after its layers")
    _check(ours.pooler is None or ours.head is None, "a pooler and a head together")
    return dict(
        vocab_size=ours.embedding.table.shape[0], hidden_size=c.layer,
        num_hidden_layers=c.encoder_layers, num_attention_heads=c.heads,
        intermediate_size=c.hidden, hidden_act=_THEIR_ACTIVATIONS[c.activation],
        hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.dropout,
        max_position_embeddings=ours.positions.table.shape[0],
        # BERT always adds a token-type row: a model without types gets one row
        # of zeros (to_huggingface), which adds nothing
        type_vocab_size=1 if ours.types is None else ours.types.table.shape[0],
        layer_norm_eps=c.eps, pad_token_id=ours.embedding.padding,
    )  # fmt: skip


def _gpt2_config(ours: LanguageModel) -> dict:
    c = ours.config
    _check(hasattr(ours.positions, "table"), "GPT-2's positions are learned")
    _check_positions(ours, "GPT-2")
    _check_heads_and_biases(c, "GPT-2")
    _check(c.window is None, "GPT-2 has no sliding window")
    _check(not ours.embedding.scale, "GPT-2 does not scale its embeddings")
    _check(c.norm_first, "GPT-2's layers are pre-norm (norm_first=True)")
    _check(c.has_final_norm, "GPT-2 has a final norm after its layers")
    _check(ours.generator.bias is None, "GPT-2's output has no bias")
    vocab = ours.embedding.table.shape[0]
    return dict(
        vocab_size=vocab,
        n_positions=ours.positions.table.shape[0], n_embd=c.layer,
        n_layer=c.decoder_layers, n_head=c.heads, n_inner=c.hidden,
        activation_function=_THEIR_ACTIVATIONS[c.activation],
        resid_pdrop=c.dropout, embd_pdrop=c.dropout, attn_pdrop=c.dropout,
        layer_norm_epsilon=c.eps,
        tie_word_embeddings=ours.generator.table is ours.embedding.table,
        # GPT-2's <|endoftext|> where the vocabulary has it
        bos_token_id=50256 if vocab > 50256 else None,
        eos_token_id=50256 if vocab > 50256 else None,
    )  # fmt: skip


def _rotary(model: LanguageModel) -> Rotary | None:
    """The rotary part of the first block's self-attention, if it has one."""
    scheme = model.blocks.layers[0].self_attention.position_scheme()
    return scheme if isinstance(scheme, Rotary) else None


def _llama_type(model: LanguageModel) -> str:
    """The family a Llama-like model writes as: q/k/v biases alone are Qwen2's, a
    window is Mistral's, anything else Llama's."""
    c = model.config
    qkv_bias = c.bias if c.qkv_bias is None else c.qkv_bias
    if qkv_bias and not c.bias:
        return "qwen2"
    return "mistral" if c.window is not None else "llama"


def _llama_config(ours: LanguageModel, model_type: str) -> dict:
    c, rotary = ours.config, _rotary(ours)
    _check(rotary is not None and isinstance(ours.positions, NoPositions),
           "Llama's positions are rotary, inside the attention only")  # fmt: skip
    _check_positions(ours, "Llama")
    _check(not ours.embedding.scale, "Llama does not scale its embeddings")
    _check(c.norm_first, "Llama's layers are pre-norm (norm_first=True)")
    _check(c.has_final_norm, "Llama has a final RMSNorm after its layers")
    _check(c.norm == "rms", "Llama's norms are RMSNorm (norm='rms'), not LayerNorm")
    _check(c.feed_forward == "gated", "Llama's feed-forward is gated")
    _check(ours.generator.bias is None, "Llama's output has no bias")
    qkv_bias = c.bias if c.qkv_bias is None else c.qkv_bias
    biases = {
        "llama": qkv_bias == c.bias, "qwen2": qkv_bias and not c.bias,
        "mistral": not (qkv_bias or c.bias),
    }  # fmt: skip
    _check(biases[model_type], f"these biases are not {model_type}'s")
    _check(c.window is None or model_type != "llama", "Llama has no sliding window")
    config = dict(
        vocab_size=ours.embedding.table.shape[0], hidden_size=c.layer,
        intermediate_size=c.hidden, num_hidden_layers=c.decoder_layers,
        num_attention_heads=c.heads, num_key_value_heads=c.kv_heads or c.heads,
        hidden_act=_THEIR_ACTIVATIONS[c.activation],
        max_position_embeddings=ours.max_positions, rms_norm_eps=c.eps,
        tie_word_embeddings=ours.generator.table is ours.embedding.table,
        rope_parameters={"rope_type": "default", "rope_theta": rotary.base},
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    if model_type == "llama":
        config |= dict(attention_bias=c.bias, mlp_bias=c.bias, head_dim=c.key)
    elif model_type == "mistral":
        config |= dict(sliding_window=c.window, head_dim=c.key)
    else:  # qwen2: every layer slides when one window is set
        config |= dict(use_sliding_window=c.window is not None,
                       sliding_window=c.window, max_window_layers=0)  # fmt: skip
    return config


def _as_family(config_of: Callable[..., dict], why: str, *args) -> dict:
    """``config_of(*args)``, its refusal saying ``why`` the model is of that family
    (a rotary model refused as Llama's names its positions, not only what Llama
    lacks)."""
    try:
        return config_of(*args)
    except ValueError as refusal:
        head, message = _REFUSED, str(refusal)
        if message.startswith(head):  # why it is of that family, before what it lacks
            message = f"{head} ({why}){message.removeprefix(head)}"
        raise ValueError(message) from None


# --8<-- [start:to_huggingface]
def to_huggingface(
    model: TextEncoder | LanguageModel, *, model_type: str | None = None
) -> nn.Module:
    """The ``transformers`` model with the same weights: a ``BertModel`` (or
    ``BertForMaskedLM`` with a head), a ``GPT2LMHeadModel``, or for a model with
    rotary positions a ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` or
    ``MistralForCausalLM``, in eval mode.

    ``model_type`` (``"llama"``, ``"qwen2"``, ``"mistral"``) picks among the last
    three; by default q/k/v biases alone make Qwen2, a window Mistral, the rest
    Llama. Each tensor is our weight laid out by the pattern of
    :func:`checkpoint_names` read backwards (a text encoder without token types
    gets BERT's token-type table as one row of zeros, which adds nothing). A model
    the reference cannot express (pre-norm BERT, sinusoidal GPT-2, ...) raises
    ValueError in one line saying why, and which family its positions made it.
    """
    import transformers as hf

    llama_classes = {
        "llama": (hf.LlamaConfig, hf.LlamaForCausalLM),
        "qwen2": (hf.Qwen2Config, hf.Qwen2ForCausalLM),
        "mistral": (hf.MistralConfig, hf.MistralForCausalLM),
    }
    if isinstance(model, TextEncoder):
        family, config = _FAMILIES["bert"], hf.BertConfig(**_bert_config(model))
        if model.head is not None:
            theirs = hf.BertForMaskedLM(config)
        else:
            theirs = hf.BertModel(config, add_pooling_layer=model.pooler is not None)
    elif isinstance(model, LanguageModel) and _rotary(model) is not None:
        kind = _llama_type(model) if model_type is None else model_type
        if kind not in llama_classes:
            raise ValueError(
                f"model_type must be one of {sorted(llama_classes)}, got {kind!r}"
            )
        config_class, model_class = llama_classes[kind]
        family = _FAMILIES[kind]
        why = (
            f"model_type={kind!r}" if model_type is not None
            else f"its rotary positions make it {kind.capitalize()}-like"
        )  # fmt: skip
        config = config_class(**_as_family(_llama_config, why, model, kind))
        theirs = model_class(config)
    elif isinstance(model, LanguageModel):
        why = "a language model without rotary positions is GPT-2-like"
        config = hf.GPT2Config(**_as_family(_gpt2_config, why, model))
        family, theirs = _FAMILIES["gpt2"], hf.GPT2LMHeadModel(config)
    else:
        raise ValueError(f"{type(model).__name__} has no transformers counterpart")
    # in our dtype before loading: float64 weights must not pass through float32
    theirs = theirs.to(next(model.parameters()).dtype)
    has_prefix = any(k.startswith(family.prefix) for k in theirs.state_dict())
    state = {}
    for name in family.names(model):
        head = name.theirs.startswith(("cls.", "lm_head."))
        prefix = family.prefix if has_prefix and not head else ""
        state[prefix + name.theirs] = _theirs(name, _parameters(model, name))
    if isinstance(model, TextEncoder) and model.types is None:
        prefix = family.prefix if has_prefix else ""
        table = model.embedding.table
        state[prefix + _NO_TYPES] = table.new_zeros(1, table.shape[1])
    missing, unexpected = theirs.load_state_dict(state, strict=False)
    stripped = (k.removeprefix(family.prefix) for k in missing)
    left = [k for k in stripped if k not in family.tied and not _BUFFERS.search(k)]
    if left or unexpected:
        raise ValueError(f"internal: tensors {left or unexpected} did not convert")
    return theirs.eval()


# --8<-- [end:to_huggingface]
