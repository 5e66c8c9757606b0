"""Every option of the configuration reaches every module it names, or is refused in
one line: every model kind, built the one way (its kind's builder), with each field
of :class:`TransformerConfig` moved off its default in turn.

The options are enumerated from the configuration's fields and their types (and the
position schemes from their registry), so a new field or a new scheme is covered
without editing this test. A built model is inspected, not run: its modules'
settings, parameters and parts (a *fingerprint*) must differ from the default
model's, and, for an option of the attention, every self-attention's must. An
option that only acts when the model runs (a sliding window's mask) must change the
output instead.
"""

from __future__ import annotations

import dataclasses
import types
import typing

import pytest
import torch
from torch import nn

import named_transformer as nt
from named_transformer.models.config import TransformerConfig
from named_transformer.models.variants import SCHEMES, PositionScheme
from named_transformer.workflows.kinds import MODEL_KINDS
from named_transformer.workflows.runner import build_model
from named_transformer.workflows.spec import RunSpec

SIZES = dict(encoder_layers=2, decoder_layers=2, layer=16, heads=4, hidden=24)
KINDS = [name for name in MODEL_KINDS if name != "bag-of-words"]  # no configuration
#: (kind, field) -> why the field names no module of that kind
UNUSED = {
    ("decoder-only", "encoder_layers"): "a decoder-only model has no encoder",
    ("classifier", "decoder_layers"): "a classifier has no decoder",
}
SIMPLE = (int, float, bool, str, type(None))
#: fields whose None means another field's value: what each resolves to
RESOLVED = {
    "final_norm": lambda c: c.has_final_norm,
    "qkv_bias": lambda c: c.bias if c.qkv_bias is None else c.qkv_bias,
    "kv_heads": lambda c: c.kv_heads or c.heads,
}


def _other(value: typing.Any, annotation: typing.Any) -> list[typing.Any]:
    """Values of a field's type other than ``value``, to try (the config refuses the
    invalid ones itself)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return [choice for choice in args if choice != value]
    if annotation is bool:
        return [not value]
    if set(args) == {bool, type(None)}:
        return [v for v in (True, False, None) if v is not value]
    if isinstance(value, PositionScheme):
        return _schemes()
    if isinstance(value, float):  # half, or off zero (a Llama base's dropout)
        return [value / 2 if value else 0.1]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value + 1, value * 2]
    if value is None:  # int | None: a few small positive sizes
        return [2, 3, 1]
    raise AssertionError(f"no values to try for {annotation!r}")


def _schemes() -> list[PositionScheme]:
    """Every registered scheme, with its defaults and with each parameter moved."""
    schemes = []
    for scheme in SCHEMES.values():
        default = scheme()
        schemes.append(default)
        hints = typing.get_type_hints(scheme)
        for field in dataclasses.fields(scheme):
            for value in _other(getattr(default, field.name), hints[field.name]):
                try:
                    schemes.append(scheme(**{field.name: value}))
                    break
                except ValueError:
                    continue
    return schemes


def options(
    default: TransformerConfig | None = None,
) -> list[tuple[str, typing.Any]]:
    """(field, value) for every field of the configuration and each value tried,
    moved off ``default`` (the configuration of :data:`SIZES` unless given; sized by
    :data:`SIZES` either way)."""
    hints = typing.get_type_hints(TransformerConfig)
    default = TransformerConfig(**SIZES) if default is None else default
    cases = []
    for field in dataclasses.fields(TransformerConfig):
        if field.name in SIZES:  # sizes, not options: every model is sized by them
            continue
        for value in _other(getattr(default, field.name), hints[field.name]):
            try:
                dataclasses.replace(default, **{field.name: value})
            except ValueError:
                continue  # the config refuses it: nothing is built
            name = field.name
            resolve = RESOLVED.get(name) or (lambda c, name=name: getattr(c, name))
            moved = dataclasses.replace(default, **{field.name: value})
            if resolve(moved) != resolve(default):
                cases.append((field.name, value))
    return cases


def _describe(value: typing.Any) -> typing.Any:
    if isinstance(value, SIMPLE) or dataclasses.is_dataclass(value):
        return repr(value)
    if isinstance(value, (torch.Tensor, nn.Module)):
        return None  # parameters and submodules are listed by name and shape
    return f"{type(value).__name__}{_describe_fields(value)}"


def _describe_fields(value: typing.Any) -> str:
    fields = getattr(value, "__dict__", {})
    return repr({k: repr(v) for k, v in fields.items() if isinstance(v, SIMPLE)})


def fingerprint(module: nn.Module) -> dict[str, dict[str, typing.Any]]:
    """Each module's class, settings, parts, parameters and buffers, by path (the
    configuration it was built from left out: the modules must show the option)."""
    rows = {}
    for path, m in module.named_modules():
        row = {"class": type(m).__name__}
        for name, value in vars(m).items():
            if not name.startswith("_") and name not in ("config", "training"):
                row[name] = _describe(value)
        row |= {n: tuple(p.shape) for n, p in m.named_parameters(recurse=False)}
        row |= {n: tuple(b.shape) for n, b in m.named_buffers(recurse=False)}
        rows[path] = row
    return rows


#: the configuration's fields that are options of every self-attention (the
#: keyword of MultiHeadAttention each sets): written here, not read from the code
#: under test, so an option the builder drops fails
ATTENTION = {
    "dropout": "dropout", "fused_attention": "fused", "attention_block": "block",
    "kv_heads": "kv_heads", "bias": "bias", "qkv_bias": "qkv_bias",
    "positions": "positions",
}  # fmt: skip


def _names_the_attention(field: str, config: TransformerConfig) -> bool:
    """Whether ``field`` moved changes what a self-attention is: positions only when
    their scheme gives the attention a part (learned positions go to embeddings)."""
    if field != "positions":
        return field in ATTENTION
    probe = types.SimpleNamespace(heads=config.heads, key=config.key, val=config.key)
    default = TransformerConfig(**SIZES).positions
    return repr(config.positions.part(probe)) != repr(default.part(probe))


def build(kind: str, config: TransformerConfig) -> nn.Module:
    """The model as the kind builds it from a stored spec (the one way)."""
    torch.manual_seed(0)
    task = "sentiment" if MODEL_KINDS[kind].learns == "classify" else "copy"
    stored = {"task": task, "kind": kind, "size": "tiny", "vocab": 13,
              "config": config.to_dict()}  # fmt: skip
    return build_model(RunSpec.from_dict(stored)).eval()


def run(kind: str, model: nn.Module) -> torch.Tensor:
    tokens = torch.randint(4, 13, (2, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        if kind == "encoder-decoder":
            return model(tokens, tokens)
        return model(tokens)


CASES = [(kind, field, value) for kind in KINDS for field, value in options()]


def test_every_field_and_scheme_is_enumerated():
    fields = {field for _, field, _ in CASES}
    every = {f.name for f in dataclasses.fields(TransformerConfig)}
    assert fields == every - set(SIZES)
    kinds = {value.kind for _, field, value in CASES if field == "positions"}
    assert kinds == set(SCHEMES) - {TransformerConfig().positions.kind}  # the default


@pytest.mark.parametrize(("kind", "field", "value"), CASES, ids=str)
def test_an_option_reaches_every_module_it_names_or_is_refused(kind, field, value):
    default = TransformerConfig(**SIZES)
    config = dataclasses.replace(default, **{field: value})
    try:
        model = build(kind, config)
    except (ValueError, TypeError) as refusal:
        message = str(refusal)
        assert "\n" not in message and message, message
        return
    if (kind, field) in UNUSED:
        return
    before, after = fingerprint(build(kind, default)), fingerprint(model)
    if before == after:  # an option of the forward pass: the output must show it
        difference = (run(kind, model) - run(kind, build(kind, default))).abs().max()
        assert difference > 0, f"{field}={value!r} reached nothing of a {kind} model"
        return
    if _names_the_attention(field, config):
        attentions = [path for path in after if path.endswith("self_attention")]
        assert attentions
        dropped = [path for path in attentions if after[path] == before[path]]
        assert not dropped, f"{field}={value!r} did not reach {dropped}"


def test_the_one_way_is_the_way_the_classes_build():
    """The kinds' builder and the classes give the same modules."""
    config = TransformerConfig(**SIZES, positions=nt.ALiBi(), kv_heads=2)
    direct = {
        "encoder-decoder": lambda: nt.Transformer(13, 13, config),
        "decoder-only": lambda: nt.LanguageModel(13, config),
        "classifier": lambda: nt.TransformerClassifier(13, 2, config),
    }
    for kind in KINDS:
        torch.manual_seed(0)
        assert fingerprint(direct[kind]()) == fingerprint(build(kind, config))
