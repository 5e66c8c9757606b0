"""Refuse or equal, enumerated: every module kind a converter accepts, with every
option of the configuration, through every converter that accepts it, either
computes what the named module computes or is refused in one line naming the option.

A *cell* is (module, option, converter). The modules are the kinds ``to_torch`` and
``from_torch`` convert (attention, encoder and decoder layers and stacks, a
decoder-only model's causal blocks, the two stacks together) and the models
``to_huggingface`` and ``from_huggingface`` convert (a GPT-2-like and a Llama-like
language model, a BERT-like text encoder), each built from a configuration. The
options are the ones tests/test_build_everything.py enumerates from the
configuration's fields, their types and the position schemes' registry, moved off
each module's base configuration in turn (plus the base itself, which must convert:
a converter that refused everything would pass otherwise). So a new field or a new
scheme is a new row of cells without editing this test. Each kind's builder options
beyond the configuration (an attention's ``memory``, ``value_memory``, ``wide``,
``key``, ``val``; a decoder layer's ``memory``; a language model's ``tie_output``,
``output_bias``, ``scale_embeddings``; BERT's ``pooler``, ``head``, ``types``,
``padding``) are cells too, each with the base configuration.

The converters: ``to_torch`` (batch-first, and with ``batch_first=False``, called on
the same inputs swapped), ``to_huggingface``, and the round trips ``to_X`` then
``from_X``, whose result must compute the named module's values again. Equal means
the same outputs on the same inputs in float64 to 1e-10 (the named masks and their
PyTorch negations; eval mode, autograd on, so that PyTorch's encoder fast path, which
computes the exact GELU for the tanh one, stays out; ``transformers`` computes
RMSNorm and the rotary angles in float32 whatever the dtype, so those two steps of
the reference run the same equations in float64, as in tests/test_llama.py). A
refusal is a ValueError of one line that names the option (:data:`NAMED_BY`: the
words that name each field), never another exception, and never for an option that
:data:`NAMED_BY` does not list. A module that refuses the option itself (a
``TextEncoder`` with rotary positions) is built by no converter: one line, too.

``export_onnx`` is left out: an export traces and translates the whole graph (tens
of seconds each on two cores, so hundreds of cells would take an hour), and it does
not convert by tables that could drop an option: the traced graph is the module's
own forward pass. tests/test_interop_positions.py checks that the exported graph
keeps every position scheme, and tests/test_onnx.py the models' outputs.

Kinds no converter here accepts (``Transformer``: its embeddings and generator have
no PyTorch or ``transformers`` counterpart; a language model or text encoder for
``to_torch``) are refused in one line naming the kind (the last test).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from einops import rearrange
from torch import nn

import named_transformer as nt
from named_transformer.interop.huggingface import from_huggingface, to_huggingface
from named_transformer.interop.pytorch import from_torch, mask_from_torch, to_torch
from named_transformer.models.config import TransformerConfig
from named_transformer.models.decoder import Decoder, DecoderLayer
from named_transformer.models.embedding import Learned
from named_transformer.models.encoder import Encoder, EncoderLayer
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.multihead import MultiHeadAttention
from named_transformer.models.text_encoder import TextEncoder
from named_transformer.models.transformer import Transformer, TransformerStacks
from tests.test_build_everything import SIZES, options

B, SEQ, SEQ_Q, VOCAB, TOLERANCE = 2, 5, 4, 13, 1e-10
#: the second sequence's last key is padding
PADDING = torch.tensor([[False] * SEQ, [False] * (SEQ - 1) + [True]])
KEYS = mask_from_torch(None, PADDING)
CAUSAL = nt.causal_mask(SEQ_Q)
CAUSAL_SEQ = nt.causal_mask(SEQ)
PAPER = TransformerConfig(**SIZES)

#: the words a refusal of each field may name it by (case-insensitive): the field
#: itself, or what it builds. A refusal of a field not listed here is a failure (an
#: over-refusal), as is one that names none of its words.
NAMED_BY = {
    "kv_heads": ("kv_heads", "key/value heads"),
    "bias": ("bias",),
    "qkv_bias": ("bias",),
    "norm": ("rmsnorm", "layernorm"),
    "feed_forward": ("feed-forward", "feed_forward"),
    "positions": ("positions",),
    "window": ("window",),
    "norm_first": ("pre-norm", "post-norm", "norm_first"),
    "final_norm": ("final norm", "final rmsnorm", "final_norm"),
    "activation": ("activation",),
    # the builders' options beyond the configuration
    "memory": ("memory",),
    "value_memory": ("memory",),
    "wide": ("narrow heads",),
    "key": ("narrow heads",),
    "val": ("narrow heads",),
    "tie_output": ("output",),
    "output_bias": ("output",),
    "scale_embeddings": ("scale",),
    "pooler": ("pooler",),
    "head": ("head",),
}


# ------------------------------------------------------------------- the modules


@dataclasses.dataclass(frozen=True)
class Kind:
    """One module kind: its base configuration, how it is built from a
    configuration, and how it and its counterpart are called on the same inputs."""

    base: TransformerConfig
    build: Callable[..., nn.Module]
    ours: Callable[[nn.Module], torch.Tensor]
    theirs: Callable[[nn.Module], torch.Tensor]
    #: the builder's options beyond the configuration, each tried with the base
    keywords: tuple[dict[str, Any], ...] = ()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    source = torch.randn(B, SEQ, SIZES["layer"], generator=generator)
    target = torch.randn(B, SEQ_Q, SIZES["layer"], generator=generator)
    return source.double(), target.double()


def _tokens() -> torch.Tensor:
    return torch.randint(VOCAB, (B, SEQ), generator=torch.Generator().manual_seed(2))


def _source(call):
    return lambda module: call(module, *_inputs())


def _memory(width: int) -> torch.Tensor:
    """An encoder output (or a cross-attention's keys' source) ``width`` wide."""
    generator = torch.Generator().manual_seed(4 + width)
    return torch.randn(B, SEQ, width, generator=generator).double()


def _attention(m: MultiHeadAttention) -> torch.Tensor:
    """Self-attention, or cross-attention where the keys' or values' source is of
    another width (``memory``, ``value_memory``)."""
    source, _ = _inputs()
    if m.memory == m.value_memory == m.layer:
        return m(source, mask=KEYS)
    values = None if m.value_memory == m.memory else _memory(m.value_memory)
    return m(source, _memory(m.memory), KEYS, values_from=values)


def _torch_attention(m: nn.MultiheadAttention) -> torch.Tensor:
    source, _ = _inputs()
    if m.kdim == m.vdim == m.embed_dim:
        return m(source, source, source, key_padding_mask=PADDING)[0]
    keys = _memory(m.kdim)
    values = keys if m.vdim == m.kdim else _memory(m.vdim)
    return m(source, keys, values, key_padding_mask=PADDING)[0]


def _decoder_layer(m: DecoderLayer) -> torch.Tensor:
    _, target = _inputs()
    return m(target, _memory(m.cross_attention.memory), CAUSAL, KEYS)


def _torch_decoder_layer(m: nn.TransformerDecoderLayer) -> torch.Tensor:
    _, target = _inputs()
    memory = _memory(m.multihead_attn.kdim)
    return m(target, memory, tgt_mask=~CAUSAL, memory_key_padding_mask=PADDING)


#: the kinds to_torch and from_torch convert, each with the paper's configuration
#: as its base; an option reaches each as the kind's own builder passes it on
TORCH = {
    "attention": Kind(
        PAPER,
        lambda c, **options: MultiHeadAttention.of(c, causal=False, **options),
        _attention,
        _torch_attention,
        keywords=(
            {"memory": 7}, {"value_memory": 6}, {"memory": 7, "value_memory": 6},
            {"wide": True}, {"key": 3}, {"val": 5},
        ),
    ),
    "encoder layer": Kind(
        PAPER,
        EncoderLayer,
        _source(lambda m, s, t: m(s, KEYS)),
        _source(lambda m, s, t: m(s, src_key_padding_mask=PADDING)),
    ),
    "decoder layer": Kind(
        PAPER, DecoderLayer, _decoder_layer, _torch_decoder_layer,
        keywords=({"memory": 7},),
    ),  # fmt: skip
    "encoder": Kind(
        PAPER,
        lambda c: Encoder.of(c, c.encoder_layers),
        _source(lambda m, s, t: m(s, KEYS)),
        _source(lambda m, s, t: m(s, src_key_padding_mask=PADDING)),
    ),
    # a decoder-only model's blocks: causal (ALiBi's one-sided form) under its mask
    "causal blocks": Kind(
        PAPER,
        lambda c: Encoder.of(c, c.decoder_layers, causal=True),
        _source(lambda m, s, t: m(s, CAUSAL_SEQ)),
        _source(lambda m, s, t: m(s, mask=~CAUSAL_SEQ)),
    ),
    "decoder": Kind(
        PAPER,
        lambda c: Decoder.of(c, c.decoder_layers),
        _source(lambda m, s, t: m(t, s, CAUSAL, KEYS)),
        _source(
            lambda m, s, t: m(t, s, tgt_mask=~CAUSAL, memory_key_padding_mask=PADDING)
        ),
    ),
    "stacks": Kind(
        PAPER,
        TransformerStacks.build,
        _source(lambda m, s, t: m(s, t, KEYS, CAUSAL, KEYS)),
        _source(
            lambda m, s, t: m(
                s, t, tgt_mask=~CAUSAL, src_key_padding_mask=PADDING,
                memory_key_padding_mask=PADDING,
            )  # fmt: skip
        ),
    ),
}


def _log_probs(module: nn.Module) -> torch.Tensor:
    return torch.log_softmax(module(_tokens()).logits, dim=-1)


def _language_model(config: TransformerConfig, **options: Any) -> LanguageModel:
    options = {"scale_embeddings": False, **options}
    return LanguageModel(VOCAB, config, max_positions=16, **options)


#: a language model's options beyond the configuration
LANGUAGE_MODEL = (
    {"tie_output": False}, {"tie_output": False, "output_bias": False},
    {"scale_embeddings": True},
)  # fmt: skip


def _text_encoder(m: TextEncoder) -> torch.Tensor:
    """The states, or the head's log-probabilities, or the pooler's vectors."""
    hidden = m(_tokens(), ~PADDING)
    if m.head is not None:
        return m.predict(hidden)
    return hidden if m.pooler is None else m.pool(hidden)


def _bert(m: nn.Module) -> torch.Tensor:
    out = m(_tokens(), attention_mask=(~PADDING).long())
    if hasattr(out, "logits"):
        return torch.log_softmax(out.logits, dim=-1)
    return out.last_hidden_state if out.pooler_output is None else out.pooler_output


#: the models to_huggingface and from_huggingface convert, each with the base
#: configuration of the family it becomes (GPT-2: pre-norm, learned positions;
#: Llama: TransformerConfig.llama; BERT: the paper's post-norm layers)
HUGGING_FACE = {
    "GPT-2-like language model": Kind(
        dataclasses.replace(PAPER, norm_first=True, positions=Learned(16)),
        _language_model,
        lambda m: m(_tokens()),
        _log_probs,
        LANGUAGE_MODEL,
    ),
    "Llama-like language model": Kind(
        TransformerConfig.llama(**SIZES),
        _language_model,
        lambda m: m(_tokens()),
        _log_probs,
        LANGUAGE_MODEL,
    ),
    "BERT-like text encoder": Kind(
        dataclasses.replace(PAPER, activation="gelu"),
        lambda c, **options: TextEncoder(VOCAB, c, max_positions=16, **options),
        _text_encoder,
        _bert,
        keywords=(
            {"pooler": True}, {"head": True}, {"pooler": True, "head": True},
            {"types": 0}, {"padding": None},
        ),
    ),
}


# ---------------------------------------------------------------- the converters


class SequenceFirst:
    """A PyTorch module built with ``batch_first=False``, called as batch-first: its
    ``batch seq layer`` inputs and output swapped to ``seq batch layer`` and back
    (masks are the same either way)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __getattr__(self, name: str) -> Any:  # kdim, vdim, multihead_attn, ...
        return getattr(self.module, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        def swap(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() == 3 and x.is_floating_point():
                return rearrange(x, "a b layer -> b a layer")
            return x

        out = self.module(*map(swap, args), **{k: swap(v) for k, v in kwargs.items()})
        return (swap(out[0]), *out[1:]) if isinstance(out, tuple) else swap(out)


def _sequence_first(module: nn.Module) -> nn.Module:
    return to_torch(module, batch_first=False)


#: each library's converters: (the kinds they accept, to_X, from_X, to_X's name, how
#: to_X's result is called batch-first); a cell's converter is to_X, or the round
#: trip from_X(to_X(module)), whose result is named again and must compute the named
#: module's values
LIBRARIES = {
    "torch": (TORCH, to_torch, from_torch, "to_torch", None),
    "torch, sequence first": (
        TORCH, _sequence_first, from_torch, "to_torch(batch_first=False)",
        SequenceFirst,
    ),
    "huggingface": (
        HUGGING_FACE, to_huggingface, from_huggingface, "to_huggingface", None
    ),
}  # fmt: skip
#: the base itself: the control each kind must convert
BASE = ("base", None)


def cells() -> list[tuple[str, str, str, Any]]:
    """(library, kind, field, value) for every option of every kind a library's
    converters accept, moved off the kind's base configuration, and each of the
    builder's other options (field "+": the keywords) with the base; each is two
    cells, to_X and the round trip."""
    return [
        (library, kind, field, value)
        for library, (kinds, *_) in LIBRARIES.items()
        for kind, spec in kinds.items()
        for field, value in [
            BASE, *options(spec.base), *(("+", k) for k in spec.keywords)
        ]
    ]  # fmt: skip


CELLS = cells()


def _refusal(field: str, value: Any, refusal: ValueError) -> str:
    """The refusal's message, if it is one line naming the option; else an
    AssertionError."""
    message = str(refusal)
    assert field != "base", f"the base does not convert: {message}"
    assert message and "\n" not in message, f"more than one line: {message!r}"
    keys = list(value) if field == "+" else [field]
    assert all(key in NAMED_BY for key in keys), f"{field}={value!r}: {message}"
    words = [word for key in keys for word in NAMED_BY[key]]
    assert any(w in message.lower() for w in words), (
        f"the refusal of {field}={value!r} names none of {words}: {message}"
    )
    return f"refused: {message}"


def _equal(got: torch.Tensor, want: torch.Tensor, tolerance: float, what: str) -> str:
    assert got.shape == want.shape, f"{what} gives shape {tuple(got.shape)}"
    difference = (got - want).abs().max().item()
    assert difference < tolerance, f"{what} differs by {difference:.3g}"
    return "equal"


def convert(library: str, kind: str, field: str, value: Any) -> dict[str, str]:
    """Build the module, convert it both ways, and return each converter's outcome
    ("equal", "refused: ..." or, where the module itself refuses the option, "not
    built: ..."); an AssertionError for a wrong answer or a refusal that is not one
    line naming the option."""
    kinds, to_x, from_x, name, call_as = LIBRARIES[library]
    spec = kinds[kind]
    names = (name, f"{from_x.__name__}({name})")
    config, keywords = spec.base, {}
    if field == "+":
        keywords = value
    elif field != "base":
        config = dataclasses.replace(config, **{field: value})
    torch.manual_seed(0)
    try:
        module = spec.build(config, **keywords)
    except ValueError as refusal:  # the module refuses the option itself
        message = str(refusal)
        assert message and "\n" not in message, message
        return dict.fromkeys(names, f"not built: {message}")
    module = module.double().eval()
    _perturb(module)
    try:
        theirs = to_x(module).double().eval()
    except ValueError as refusal:
        return dict.fromkeys(names, _refusal(field, value, refusal))
    want = spec.ours(module)
    if library == "huggingface":
        from tests.test_llama import in_float64

        # transformers computes RMSNorm and the rotary angles in float32 whatever
        # the model's dtype: the same equations in float64 in their place
        theirs = in_float64(theirs)
    called = theirs if call_as is None else call_as(theirs)
    outcomes = {names[0]: _equal(spec.theirs(called), want, TOLERANCE, names[0])}
    try:
        back = from_x(theirs).double().eval()
    except ValueError as refusal:
        outcomes[names[1]] = _refusal(field, value, refusal)
        return outcomes
    outcomes[names[1]] = _equal(spec.ours(back), want, TOLERANCE, names[1])
    return outcomes


def _perturb(module: nn.Module) -> None:
    """Every parameter moved off its initial value (biases start at zero, norms at
    one): a converter that dropped one would still agree on the initial values."""
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in module.parameters():
            noise = torch.randn(parameter.shape, generator=generator).double()
            parameter.add_(0.1 * noise)


@pytest.mark.parametrize(
    ("library", "kind"),
    [(library, kind) for library, (kinds, *_) in LIBRARIES.items()
     for kind in kinds],
)  # fmt: skip
def test_every_option_converts_equal_or_is_refused_in_one_line(library, kind):
    """Every option of one kind through one library's converters (one test, many
    cells: each failure names its cell, and the other cells still run)."""
    if library == "huggingface":
        pytest.importorskip("transformers")
    failures = []
    with nt.shape_checks(False):  # values are compared here, not shapes
        for cell in CELLS:
            if cell[:2] != (library, kind):
                continue
            try:
                convert(*cell)
            except AssertionError as failure:
                failures.append(f"{cell[2]}={cell[3]!r}: {failure}")
    assert not failures, "\n".join(failures)


def test_every_field_and_kind_has_cells():
    """The cells reach every option the configuration enumerates and every kind."""
    fields = {field for _, _, field, _ in CELLS}
    assert fields == {field for field, _ in options()} | {"base", "+"}
    assert {kind for _, kind, _, _ in CELLS} == set(TORCH) | set(HUGGING_FACE)


@pytest.mark.parametrize(
    ("converter", "module"),
    [
        (to_torch, lambda: LanguageModel(VOCAB, PAPER)),
        (to_torch, lambda: TextEncoder(VOCAB, PAPER)),
        (to_torch, lambda: Transformer(VOCAB, VOCAB, PAPER)),
        (to_huggingface, lambda: Transformer(VOCAB, VOCAB, PAPER)),
        (to_huggingface, lambda: Encoder.of(PAPER, 2)),
    ],
)
def test_a_kind_no_converter_accepts_is_refused_in_one_line(converter, module):
    if converter is to_huggingface:
        pytest.importorskip("transformers")
    model = module()
    with pytest.raises((TypeError, ValueError)) as refused:
        converter(model)
    message = str(refused.value)
    assert type(model).__name__ in message and "\n" not in message
