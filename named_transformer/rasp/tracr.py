r"""Tracr's compiled weights, loaded into the library's own modules.

Tracr (Lindner et al. 2023) compiles a RASP program into a Haiku Transformer whose
weights are plain arrays: ``token_embed``, ``pos_embed`` and, for every layer $l$,
``transformer/layer_l/attn/{query,key,value,linear}`` and
``transformer/layer_l/mlp/{linear_1,linear_2}``, each a ``w`` and a ``b``. The
attention weights are stored with the heads merged into the columns,
$|\mathsf{layer}| \times |\mathsf{heads}||\mathsf{key}|$; here they become named
tensors again,

$$W^Q = \operatorname{rearrange}(w, \mathsf{layer}\,(\mathsf{heads}\,\mathsf{key})
  \to \mathsf{heads}\,\mathsf{layer}\,\mathsf{key}),$$

in a :class:`~named_transformer.rasp.model.CompiledModel` with Tracr's residual layout
(its ``residual_labels``), no layer norm (Tracr compiles without), every layer kept
(an attention or MLP that Tracr leaves empty is all zeros, and stays).

Tracr is an optional dependency: ``pip install -e '.[rasp]'`` in a clone.
"""

from __future__ import annotations

from typing import Any

import torch
from einops import rearrange

from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.sublayers import FeedForward
from named_transformer.rasp.model import CompiledModel, OutputVariable
from named_transformer.rasp.program import (
    Aggregate,
    Indices,
    Map,
    Select,
    SelectorWidth,
    SequenceMap,
    SOp,
    Tokens,
)

__all__ = ["compile_with_tracr", "from_tracr", "to_tracr"]

_MISSING = "Tracr is not installed: pip install -e '.[rasp]' in a clone"


def _rasp() -> Any:
    try:
        from tracr.rasp import rasp
    except ImportError as error:
        raise ImportError(_MISSING) from error
    return rasp


def _tensor(array: Any, dtype: torch.dtype) -> torch.Tensor:
    import numpy as np

    return torch.tensor(np.asarray(array), dtype=dtype)


# --8<-- [start:from_tracr]
def from_tracr(compiled: Any, *, dtype: torch.dtype = torch.float32) -> CompiledModel:
    """A Tracr ``AssembledTransformerModel`` as a :class:`CompiledModel`.

    ``dtype`` float32 is Tracr's own (JAX's default). A model compiled with
    ``causal=True`` (kept in its ``model_config.causal``) attends under the causal
    mask here too: the weights are the same, the mask is not.
    """
    _rasp()  # a clear ImportError without Tracr
    params, config = compiled.params, compiled.model_config
    heads, key = config.num_heads, config.key_size
    layer = len(compiled.residual_labels)
    blocks: list[torch.nn.Module] = []
    for index in range(config.num_layers):
        attn = f"transformer/layer_{index}/attn"
        block = MultiHeadAttention(layer, heads, key=key, val=key, bias=True)
        for name, part in (("q", "query"), ("k", "key"), ("v", "value")):
            w, b = (_tensor(params[f"{attn}/{part}"][p], dtype) for p in "wb")
            getattr(block, f"w_{name}").data = rearrange(
                w, "layer (heads key) -> heads layer key", heads=heads
            )
            getattr(block, f"b_{name}").data = rearrange(
                b, "(heads key) -> heads key", heads=heads
            )
        w, b = (_tensor(params[f"{attn}/linear"][p], dtype) for p in "wb")
        block.w_o.data = rearrange(
            w, "(heads val) layer -> heads val layer", heads=heads
        )
        block.b_o.data = b
        mlp = f"transformer/layer_{index}/mlp"
        first, second = params[f"{mlp}/linear_1"], params[f"{mlp}/linear_2"]
        feed = FeedForward(layer, config.mlp_hidden_size, activation="relu")
        feed.w1.data = rearrange(
            _tensor(first["w"], dtype), "layer hidden -> hidden layer"
        )
        feed.b1.data = _tensor(first["b"], dtype)
        feed.w2.data = rearrange(
            _tensor(second["w"], dtype), "hidden layer -> layer hidden"
        )
        feed.b2.data = _tensor(second["b"], dtype)
        blocks += [block.requires_grad_(False), feed.requires_grad_(False)]
    encoder = compiled.input_encoder
    vocabulary = sorted(encoder.encoding_map, key=encoder.encoding_map.get)
    model = CompiledModel(
        _tensor(params["token_embed"]["embeddings"], dtype),
        _tensor(params["pos_embed"]["embeddings"], dtype),
        blocks, vocabulary=vocabulary, bos=encoder.bos_token,
        labels=compiled.residual_labels, output=_output(compiled),
        heads=[[f"layer_{i}/head_{h}" for h in range(heads)]
               for i in range(config.num_layers)],
    )  # fmt: skip
    model.causal = bool(getattr(config, "causal", False))  # the mask, same weights
    return model


# --8<-- [end:from_tracr]


def _output(compiled: Any) -> OutputVariable:
    """The output variable: its name (read off Tracr's unembedding) and categories."""
    import haiku as hk
    import numpy as np

    @hk.without_apply_rng
    @hk.transform
    def unembed(x: Any) -> Any:
        model = compiled.get_compiled_model()
        return model.unembed(x, use_unembed_argmax=False)

    eye = np.eye(len(compiled.residual_labels), dtype=np.float32)
    read = np.asarray(unembed.apply({}, eye)).reshape(len(eye), -1)  # allow-raw: numpy
    first = int(np.argmax(np.abs(read[:, 0])))
    name = compiled.residual_labels[first].split(":")[0]
    decoder = compiled.output_encoder
    if decoder is None or not hasattr(decoder, "encoding_map"):
        return OutputVariable(name)  # numerical: the number itself
    return OutputVariable(
        name, tuple(sorted(decoder.encoding_map, key=decoder.encoding_map.get))
    )


# --8<-- [start:to_tracr]
def to_tracr(program: SOp) -> Any:
    """The same program in Tracr's RASP (``tracr.rasp.rasp``), label for label."""
    rasp = _rasp()
    made: dict[int, Any] = {}

    def convert(sop: SOp | Select) -> Any:
        if id(sop) in made:
            return made[id(sop)]
        match sop:
            case Tokens():
                out = rasp.tokens
            case Indices():
                out = rasp.indices
            case Map(fn=fn, inner=inner):
                out = rasp.Map(fn, convert(inner), simplify=False)
            case SequenceMap(fn=fn, first=first, second=second):
                out = rasp.SequenceMap(fn, convert(first), convert(second))
            case Select(keys=keys, queries=queries, predicate=predicate):
                out = rasp.Select(convert(keys), convert(queries),
                                  rasp.Comparison[predicate.name])  # fmt: skip
            case Aggregate(selector=selector, values=values):
                default = 0 if sop.encoding == "numerical" else None
                out = rasp.Aggregate(
                    convert(selector), convert(values), default=default
                )
            case SelectorWidth(selector=selector):
                out = rasp.SelectorWidth(convert(selector))
            case _:
                raise TypeError(f"not a RASP expression: {sop!r}")
        if isinstance(sop, SOp) and not isinstance(sop, Tokens | Indices):
            encode = rasp.numerical if sop.encoding == "numerical" else rasp.categorical
            out = encode(out.named(sop.label))
        made[id(sop)] = out
        return out

    return convert(program)


def compile_with_tracr(
    program: SOp, vocabulary: Any, max_length: int, *, causal: bool = False
) -> Any:
    """Tracr's ``compile_rasp_to_model`` of :func:`to_tracr` ``(program)``, BOS
    ``"BOS"``; ``causal=True`` compiles a causally masked model."""
    _rasp()
    from tracr.compiler import compiling

    return compiling.compile_rasp_to_model(
        to_tracr(program), vocab=set(vocabulary), max_seq_len=max_length,
        causal=causal, compiler_bos="BOS",
    )  # fmt: skip


# --8<-- [end:to_tracr]
