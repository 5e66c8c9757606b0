r"""Converting between PyTorch's Transformer modules and the named ones, weights
included.

| PyTorch | named_transformer |
| --- | --- |
| ``nn.MultiheadAttention`` | :class:`MultiHeadAttention` |
| ``nn.TransformerEncoderLayer`` | :class:`EncoderLayer` |
| ``nn.TransformerDecoderLayer`` | :class:`DecoderLayer` |
| ``nn.TransformerEncoder`` | :class:`Encoder` |
| ``nn.TransformerDecoder`` | :class:`Decoder` |
| ``nn.Transformer`` | :class:`TransformerStacks` |

PyTorch keeps all heads in one matrix, ``in_proj_weight`` $\in \mathbb R^{3hd \times d}$
(the NYU notes' stacked $W_{qkv}$), whose rows are ``(three heads key)``; the named
weights are the same numbers with the axes named:
``rearrange(in_proj_weight, "(three heads key) layer -> three heads layer key")``.
``out_proj.weight`` $\in \mathbb R^{d \times hd}$ is ``layer (heads val)`` and becomes
$W^O \in \mathbb R^{\mathsf{heads}\times\mathsf{val}\times\mathsf{layer}}$.

Three conventions differ, and the converted module follows the library's:

- **Boolean masks mean the opposite.** PyTorch's ``attn_mask``/``key_padding_mask``
  are True where attention is *blocked*; ours are True where it is *allowed*.
  :func:`mask_from_torch` converts (and merges the two). A float ``attn_mask`` with
  values other than $0$ and $-\infty$ (ALiBi, a mask filled with the dtype's most
  negative number) is an additive score bias $B$: :func:`bias_from_torch` makes the
  ``score_bias`` argument of the named modules from it.
- **Batch first.** Named modules take ``*batch seq layer``. A PyTorch module built with
  ``batch_first=False`` takes ``seq batch layer``: convert its inputs with
  ``rearrange(x, "seq batch layer -> batch seq layer")``. The weights are the same.
- **Fully masked rows.** ``nn.MultiheadAttention`` returns NaN for a query with no
  allowed key; ours returns zeros. PyTorch's encoder fast path (eval mode, with a
  padding mask) returns zeros at padded positions; compare non-padded positions only.
- **GELU(approximate="tanh") in the fast path.** PyTorch's encoder fast path (eval
  mode without autograd) computes the exact GELU for any ``nn.GELU``; the converted
  layer computes the tanh approximation the module names, as PyTorch's own slow
  path does (they differ by about $10^{-4}$).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor, nn

from named_transformer.axes import checked
from named_transformer.core.masks import additive_mask
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.multihead import MultiHeadAttention, stack_qkv
from named_transformer.models.sublayers import FeedForward, LayerNorm
from named_transformer.models.transformer import TransformerStacks
from named_transformer.models.variants import NO_POSITIONS, Positions

__all__ = ["bias_from_torch", "from_torch", "mask_from_torch", "to_torch"]


# --8<-- [start:mask_from_torch]
@checked
def mask_from_torch(
    attn_mask: Bool[Tensor, "seq_q seq"] | Float[Tensor, "seq_q seq"] | None = None,
    key_padding_mask: Bool[Tensor, "batch seq"]
    | Float[Tensor, "batch seq"]
    | None = None,
) -> Bool[Tensor, "*#batch #seq_q seq"] | None:
    r"""Our "may attend" mask from PyTorch's ``attn_mask`` and ``key_padding_mask``.

    ``attn_mask`` (``seq_q seq``; per-head 3-D masks do not convert): boolean True =
    blocked, or float, $-\infty$ = blocked (other float values are additive biases,
    which a boolean mask cannot express; they raise ValueError: use
    :func:`bias_from_torch`).
    ``key_padding_mask`` (``batch seq``): True = padding. Returns ``seq_q seq``,
    ``batch 1 seq`` or their conjunction ``batch seq_q seq``; None if both are None.
    """
    allowed = None
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed = ~attn_mask
        else:
            if not bool(((attn_mask == 0) | (attn_mask == -torch.inf)).all()):
                raise ValueError(
                    "a float attn_mask converts to a mask only if every entry is 0 "
                    "or -inf; bias_from_torch makes a score_bias of any other"
                )
            allowed = attn_mask == 0
    if key_padding_mask is not None:
        if key_padding_mask.dtype != torch.bool:
            key_padding_mask = key_padding_mask == -torch.inf
        keys = rearrange(~key_padding_mask, "batch seq -> batch 1 seq")
        allowed = keys if allowed is None else allowed & keys
    return allowed


# --8<-- [end:mask_from_torch]


# --8<-- [start:bias_from_torch]
@checked
def bias_from_torch(
    attn_mask: Bool[Tensor, "seq_q seq"] | Float[Tensor, "seq_q seq"] | None = None,
    key_padding_mask: Bool[Tensor, "batch seq"]
    | Float[Tensor, "batch seq"]
    | None = None,
    *,
    dtype: torch.dtype | None = None,
) -> Float[Tensor, "*#batch #seq_q seq"] | None:
    r"""Our additive score bias $B$ from PyTorch's ``attn_mask`` and
    ``key_padding_mask``, as ``nn.MultiheadAttention`` adds them.

    Each mask becomes a bias (a float one as it is; a boolean one $-\infty$ where True
    = blocked, $0$ elsewhere) and the two are summed, ``key_padding_mask`` lifted
    over $\mathsf{seq'}$. Returns ``seq_q seq``, ``batch 1 seq`` or ``batch seq_q
    seq``, for the ``score_bias`` argument of the named modules; None if both are
    None. Its $-\infty$ entries block as a mask does (a query with no key left gets
    zeros where PyTorch gives NaN). ``dtype``: the bias's (default: a float mask's,
    else torch's default dtype); pass the queries' dtype.
    """
    masks = [mask for mask in (attn_mask, key_padding_mask) if mask is not None]
    if dtype is None:
        floats = [mask.dtype for mask in masks if mask.dtype != torch.bool]
        dtype = floats[0] if floats else torch.get_default_dtype()

    def as_bias(mask: Tensor) -> Tensor:
        if mask.dtype != torch.bool:
            return mask.to(dtype)
        return additive_mask(~mask, dtype)  # PyTorch's boolean masks: True blocks

    bias = None if attn_mask is None else as_bias(attn_mask)
    if key_padding_mask is not None:
        padding = rearrange(as_bias(key_padding_mask), "batch seq -> batch 1 seq")
        bias = padding if bias is None else bias + padding
    return bias


# --8<-- [end:bias_from_torch]


def _copy(parameter: Tensor | None, value: Tensor | None) -> None:
    if parameter is None or value is None:
        if (parameter is None) != (value is None):
            raise ValueError("one side has a bias and the other has none")
        return
    with torch.no_grad():
        parameter.copy_(value)


def _like(ours: nn.Module, theirs: nn.Module) -> nn.Module:
    reference = next(theirs.parameters())
    return ours.to(device=reference.device, dtype=reference.dtype)


def _activation_name(layer: nn.Module) -> str:
    activation = layer.activation
    if activation is F.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is F.gelu or (
        isinstance(activation, nn.GELU) and activation.approximate == "none"
    ):
        return "gelu"
    if isinstance(activation, nn.GELU) and activation.approximate == "tanh":
        return "gelu_tanh"
    if activation is F.silu or isinstance(activation, nn.SiLU):
        return "silu"
    raise ValueError(
        "only relu, gelu, GELU(approximate='tanh') and silu activations convert, "
        f"got {activation!r}"
    )


def _torch_activation(name: str) -> str | nn.Module:
    """PyTorch's activation for one of ours: its string where it has one."""
    return {"gelu_tanh": nn.GELU(approximate="tanh"), "silu": nn.SiLU()}.get(name, name)


def _check_norms(*norms: nn.LayerNorm) -> None:
    for norm in norms:
        if norm.weight is None:
            raise ValueError(
                "only LayerNorms with a weight convert (elementwise_affine=True)"
            )


# ------------------------------------------------------------------------- from PyTorch


# --8<-- [start:attention_from_torch]
def _attention_from_torch(module: nn.MultiheadAttention) -> MultiHeadAttention:
    if module.bias_k is not None or module.add_zero_attn:
        raise ValueError("add_bias_kv and add_zero_attn have no named counterpart")
    heads, layer = module.num_heads, module.embed_dim
    ours = _like(
        MultiHeadAttention(
            layer, heads, memory=module.kdim, value_memory=module.vdim,
            bias=module.in_proj_bias is not None, dropout=module.dropout,
        ),
        module,
    )  # fmt: skip
    if module._qkv_same_embed_dim:
        w_q, w_k, w_v = rearrange(
            module.in_proj_weight,
            "(three heads key) layer -> three heads layer key",
            three=3,
            heads=heads,
        )
    else:
        w_q, w_k, w_v = (
            rearrange(w, "(heads key) layer -> heads layer key", heads=heads)
            for w in (module.q_proj_weight, module.k_proj_weight, module.v_proj_weight)
        )
    for parameter, value in zip(
        (ours.w_q, ours.w_k, ours.w_v), (w_q, w_k, w_v), strict=True
    ):
        _copy(parameter, value)
    _copy(
        ours.w_o,
        rearrange(
            module.out_proj.weight, "layer (heads val) -> heads val layer", heads=heads
        ),
    )
    if module.in_proj_bias is not None:
        b_q, b_k, b_v = rearrange(
            module.in_proj_bias,
            "(three heads key) -> three heads key",
            three=3,
            heads=heads,
        )
        for parameter, value in zip(
            (ours.b_q, ours.b_k, ours.b_v), (b_q, b_k, b_v), strict=True
        ):
            _copy(parameter, value)
    _copy(ours.b_o, module.out_proj.bias)
    return ours


# --8<-- [end:attention_from_torch]


def _norm_from_torch(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    _copy(ours.gamma, theirs.weight)
    _copy(ours.beta, theirs.bias)


def _feed_forward_from_torch(ours: FeedForward, theirs: nn.Module) -> None:
    _copy(ours.w1, theirs.linear1.weight)
    _copy(ours.b1, theirs.linear1.bias)
    _copy(ours.w2, theirs.linear2.weight)
    _copy(ours.b2, theirs.linear2.bias)


def _layer_options(theirs: nn.Module) -> dict:
    return {
        "dropout": theirs.dropout.p,
        "activation": _activation_name(theirs),
        "norm_first": theirs.norm_first,
        "eps": theirs.norm1.eps,
        "bias": theirs.linear1.bias is not None,
    }


def _encoder_layer_from_torch(theirs: nn.TransformerEncoderLayer) -> EncoderLayer:
    _check_norms(theirs.norm1, theirs.norm2)
    attention = theirs.self_attn
    ours = EncoderLayer(
        attention.embed_dim,
        attention.num_heads,
        theirs.linear1.out_features,
        **_layer_options(theirs),
    )
    ours = _like(ours, theirs)
    ours.self_attention = _attention_from_torch(attention)
    _feed_forward_from_torch(ours.feed_forward, theirs)
    _norm_from_torch(ours.attention_residual.norm, theirs.norm1)
    _norm_from_torch(ours.feed_forward_residual.norm, theirs.norm2)
    return ours


def _decoder_layer_from_torch(theirs: nn.TransformerDecoderLayer) -> DecoderLayer:
    _check_norms(theirs.norm1, theirs.norm2, theirs.norm3)
    attention = theirs.self_attn
    ours = DecoderLayer(
        attention.embed_dim, attention.num_heads, theirs.linear1.out_features,
        memory=theirs.multihead_attn.kdim, **_layer_options(theirs),
    )  # fmt: skip
    ours = _like(ours, theirs)
    ours.self_attention = _attention_from_torch(attention)
    ours.cross_attention = _attention_from_torch(theirs.multihead_attn)
    _feed_forward_from_torch(ours.feed_forward, theirs)
    _norm_from_torch(ours.self_attention_residual.norm, theirs.norm1)
    _norm_from_torch(ours.cross_attention_residual.norm, theirs.norm2)
    _norm_from_torch(ours.feed_forward_residual.norm, theirs.norm3)
    return ours


def _final_norm_from_torch(theirs: nn.LayerNorm | None) -> LayerNorm | None:
    if theirs is None:
        return None
    _check_norms(theirs)
    ours = LayerNorm(
        theirs.normalized_shape[0], theirs.eps, bias=theirs.bias is not None
    )
    ours = _like(ours, theirs)
    _norm_from_torch(ours, theirs)
    return ours


# --8<-- [start:from_torch]
def from_torch(module: nn.Module) -> nn.Module:
    """The named module computing what ``module`` computes, with its weights copied.

    Accepts ``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
    ``nn.TransformerDecoderLayer``, ``nn.TransformerEncoder``, ``nn.TransformerDecoder``
    and ``nn.Transformer``. The result is batch-first and reads masks as True = may
    attend (:func:`mask_from_torch`; a float mask becomes a ``score_bias`` by
    :func:`bias_from_torch`); it is in the same mode (train/eval), dtype and device as
    ``module``. Layers built with ``bias=False``, the activations relu, gelu,
    ``GELU(approximate="tanh")`` and silu, and attention with ``kdim != vdim`` (the
    values then come from ``values_from``) convert.
    """
    if isinstance(module, nn.MultiheadAttention):
        ours = _attention_from_torch(module)
    elif isinstance(module, nn.TransformerEncoderLayer):
        ours = _encoder_layer_from_torch(module)
    elif isinstance(module, nn.TransformerDecoderLayer):
        ours = _decoder_layer_from_torch(module)
    elif isinstance(module, nn.TransformerEncoder):
        layers = [_encoder_layer_from_torch(layer) for layer in module.layers]
        ours = Encoder(layers, _final_norm_from_torch(module.norm))
    elif isinstance(module, nn.TransformerDecoder):
        layers = [_decoder_layer_from_torch(layer) for layer in module.layers]
        ours = Decoder(layers, _final_norm_from_torch(module.norm))
    elif isinstance(module, nn.Transformer):
        ours = TransformerStacks(from_torch(module.encoder), from_torch(module.decoder))
    else:
        raise TypeError(f"from_torch does not know {type(module).__name__}")
    return ours.train(module.training)


# --8<-- [end:from_torch]


# --------------------------------------------------------------------------- to PyTorch


def _positions_of(attention: MultiHeadAttention) -> Positions:
    """The position scheme ``attention`` plugs in (the one place that asks)."""
    return attention.position_scheme()


def _refuse_positions(module: nn.Module) -> None:
    """A ValueError naming the first attention in ``module`` with a position scheme:
    PyTorch's modules would silently compute attention without it."""
    for name, attention in module.named_modules():
        if not isinstance(attention, MultiHeadAttention):
            continue
        positions = _positions_of(attention)
        if positions is not NO_POSITIONS and positions.name != "none":
            where = f"{type(module).__name__}" + (f".{name}" if name else "")
            raise ValueError(
                f"{where} has {positions.name} positions, which do not convert to "
                "PyTorch: nn.MultiheadAttention (and nn.TransformerEncoderLayer, "
                "nn.TransformerDecoderLayer, nn.Transformer built on it) cannot "
                "express rotary, ALiBi or relative positions"
            )


def _attention_to_torch(
    ours: MultiHeadAttention, batch_first: bool
) -> nn.MultiheadAttention:
    _refuse_positions(ours)
    if ours.kv_heads != ours.heads:
        raise ValueError(
            f"grouped-query attention (kv_heads={ours.kv_heads} < "
            f"heads={ours.heads}) has no nn.MultiheadAttention counterpart: "
            "PyTorch's module has as many key/value heads as query heads"
        )
    if (ours.b_q is None) != (ours.b_o is None):
        raise ValueError(
            f"q/k/v biases {'absent' if ours.b_q is None else 'present'} and the "
            f"output bias {'absent' if ours.b_o is None else 'present'} (qkv_bias "
            "!= bias) have no nn.MultiheadAttention counterpart: its bias sets both"
        )
    if ours.key * ours.heads != ours.layer or ours.val != ours.key:
        raise ValueError(
            "only narrow heads (|key| = |val| = |layer|/|heads|) "
            "convert to nn.MultiheadAttention"
        )
    theirs = nn.MultiheadAttention(
        ours.layer, ours.heads, dropout=ours.dropout, bias=ours.b_q is not None,
        kdim=ours.memory, vdim=ours.value_memory, batch_first=batch_first,
    )  # fmt: skip
    theirs = _like(theirs, ours)
    if theirs._qkv_same_embed_dim:
        _copy(theirs.in_proj_weight, stack_qkv(ours.w_q, ours.w_k, ours.w_v))
    else:
        for weight, value in zip(
            (theirs.q_proj_weight, theirs.k_proj_weight, theirs.v_proj_weight),
            (ours.w_q, ours.w_k, ours.w_v),
            strict=True,
        ):
            _copy(weight, rearrange(value, "heads layer key -> (heads key) layer"))
    _copy(
        theirs.out_proj.weight,
        rearrange(ours.w_o, "heads val layer -> layer (heads val)"),
    )
    if ours.b_q is not None:
        _copy(
            theirs.in_proj_bias,
            rearrange(
                [ours.b_q, ours.b_k, ours.b_v], "three heads key -> (three heads key)"
            ),
        )
    _copy(theirs.out_proj.bias, ours.b_o)
    return theirs


def _norm_to_torch(theirs: nn.LayerNorm, ours: LayerNorm) -> None:
    _copy(theirs.weight, ours.gamma)
    _copy(theirs.bias, ours.beta)


def _feed_forward_to_torch(theirs: nn.Module, ours: FeedForward) -> None:
    _copy(theirs.linear1.weight, ours.w1)
    _copy(theirs.linear1.bias, ours.b1)
    _copy(theirs.linear2.weight, ours.w2)
    _copy(theirs.linear2.bias, ours.b2)


def _torch_layer_options(
    ours: nn.Module, residual: nn.Module, batch_first: bool
) -> dict:
    if not isinstance(residual.norm, LayerNorm):
        kind = None if residual.norm is None else "rms"
        raise ValueError(
            f"PyTorch's Transformer layers have a LayerNorm, not norm={kind!r}"
        )
    if not isinstance(ours.feed_forward, FeedForward):
        kind = None if ours.feed_forward is None else "gated"
        raise ValueError(
            "PyTorch's Transformer layers have a plain feed-forward, not "
            f"feed_forward={kind!r}"
        )
    return {
        "dropout": residual.dropout,
        "activation": _torch_activation(ours.feed_forward.activation),
        "layer_norm_eps": residual.norm.eps,
        "batch_first": batch_first,
        "norm_first": residual.norm_first,
        "bias": ours.feed_forward.b1 is not None,
    }


def _encoder_layer_to_torch(
    ours: EncoderLayer, batch_first: bool
) -> nn.TransformerEncoderLayer:
    attention = ours.self_attention
    options = _torch_layer_options(ours, ours.attention_residual, batch_first)
    theirs = nn.TransformerEncoderLayer(
        attention.layer, attention.heads, ours.feed_forward.w1.shape[0], **options
    )
    theirs = _like(theirs, ours)
    theirs.self_attn = _attention_to_torch(attention, batch_first)
    _feed_forward_to_torch(theirs, ours.feed_forward)
    _norm_to_torch(theirs.norm1, ours.attention_residual.norm)
    _norm_to_torch(theirs.norm2, ours.feed_forward_residual.norm)
    return theirs


def _decoder_layer_to_torch(
    ours: DecoderLayer, batch_first: bool
) -> nn.TransformerDecoderLayer:
    attention = ours.self_attention
    cross = ours.cross_attention
    if cross.memory != attention.layer or cross.value_memory != attention.layer:
        raise ValueError(
            "nn.TransformerDecoderLayer needs a memory as wide as the layer"
        )
    options = _torch_layer_options(ours, ours.self_attention_residual, batch_first)
    theirs = nn.TransformerDecoderLayer(
        attention.layer, attention.heads, ours.feed_forward.w1.shape[0], **options
    )
    theirs = _like(theirs, ours)
    theirs.self_attn = _attention_to_torch(attention, batch_first)
    theirs.multihead_attn = _attention_to_torch(ours.cross_attention, batch_first)
    _feed_forward_to_torch(theirs, ours.feed_forward)
    _norm_to_torch(theirs.norm1, ours.self_attention_residual.norm)
    _norm_to_torch(theirs.norm2, ours.cross_attention_residual.norm)
    _norm_to_torch(theirs.norm3, ours.feed_forward_residual.norm)
    return theirs


def _final_norm_to_torch(ours: LayerNorm | None) -> nn.LayerNorm | None:
    if ours is None:
        return None
    theirs = nn.LayerNorm(ours.gamma.shape[0], ours.eps, bias=ours.beta is not None)
    theirs = _like(theirs, ours)
    _norm_to_torch(theirs, ours)
    return theirs


def _stack_to_torch(ours: Encoder | Decoder, batch_first: bool) -> nn.Module:
    if isinstance(ours, Encoder):
        layers = [_encoder_layer_to_torch(layer, batch_first) for layer in ours.layers]
        theirs = nn.TransformerEncoder(
            layers[0],
            len(layers),
            _final_norm_to_torch(ours.norm),
            enable_nested_tensor=False,
        )
    else:
        layers = [_decoder_layer_to_torch(layer, batch_first) for layer in ours.layers]
        theirs = nn.TransformerDecoder(
            layers[0], len(layers), _final_norm_to_torch(ours.norm)
        )
    # the constructor deep-copies one layer N times
    theirs.layers = nn.ModuleList(layers)
    return theirs


# --8<-- [start:to_torch]
def to_torch(module: nn.Module, *, batch_first: bool = True) -> nn.Module:
    """The PyTorch module computing what the named ``module`` computes, weights copied.

    The inverse of :func:`from_torch` for its six kinds. Remember to negate boolean
    masks (``~mask``) when calling the PyTorch module. An attention anywhere in
    ``module`` with a position scheme (rotary, ALiBi, relative) raises ValueError
    naming it: PyTorch's modules cannot express one.
    """
    _refuse_positions(module)
    if isinstance(module, MultiHeadAttention):
        theirs = _attention_to_torch(module, batch_first)
    elif isinstance(module, EncoderLayer):
        theirs = _encoder_layer_to_torch(module, batch_first)
    elif isinstance(module, DecoderLayer):
        theirs = _decoder_layer_to_torch(module, batch_first)
    elif isinstance(module, Encoder | Decoder):
        theirs = _stack_to_torch(module, batch_first)
    elif isinstance(module, TransformerStacks):
        first = module.encoder.layers[0].self_attention
        theirs = nn.Transformer(
            first.layer, first.heads, batch_first=batch_first,
            custom_encoder=_stack_to_torch(module.encoder, batch_first),
            custom_decoder=_stack_to_torch(module.decoder, batch_first),
        )  # fmt: skip
        # nn.Transformer re-initialises the stacks it is given: attach fresh copies
        # after it
        theirs.encoder = _stack_to_torch(module.encoder, batch_first)
        theirs.decoder = _stack_to_torch(module.decoder, batch_first)
    else:
        raise TypeError(f"to_torch does not know {type(module).__name__}")
    return theirs.train(module.training)


# --8<-- [end:to_torch]
