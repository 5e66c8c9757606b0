r"""Export a model of the library to ONNX, with every layer's attention weights as
named outputs, so that another runtime (onnxruntime in Python, onnxruntime-web in a
browser) runs the library's own named computation.

PyTorch's exporter (``torch.onnx.export``, which traces the forward pass with
``torch.export``) records the graph of the ordinary forward pass: the einops
rearrangements, the $\ndot{key}$ contractions and the $\nfun{seq}{softmax}$ become ONNX
nodes. Nothing is rewritten by hand. Each output's name carries its axes,
``"decoder.0.cross.weights: batch heads seq_q seq"``, and the ``batch``, ``seq`` and
``seq_q`` axes stay dynamic. Beside ``model.onnx`` a ``model.json`` sidecar lists the
inputs, the outputs and their axes, the attention maps (which tokens are the queries,
which the keys) and whatever the caller adds (a vocabulary, the maximum length).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float, Shaped
from torch import Tensor, nn

from named_transformer.axes import checked, shape_checks
from named_transformer.models.classifier import TransformerClassifier
from named_transformer.models.language_model import LanguageModel
from named_transformer.models.text_encoder import TextEncoder
from named_transformer.models.transformer import Transformer
from named_transformer.recording import record

WEIGHT_AXES = ("batch", "heads", "seq_q", "seq")


# --8<-- [start:Interface]
@dataclass(frozen=True)
class Interface:
    """How a kind of model is called and what its exported graph returns.

    ``inputs``: (name, axes) per graph input; an input with no axes is a 0-d flag.
    ``output``: (name, axes) of the model's usual output. ``maps``: (recorded
    name, output stem, label, queries, keys) per group of attention maps, where the
    recorded name is the weights' dotted name with ``{}`` for the layer
    (:meth:`~named_transformer.recording.Record.each`) and ``queries``/``keys``
    name the input whose tokens label the rows and the columns.
    ``call(model, *inputs)`` returns the output; the weights are recorded while it
    runs.
    """

    kind: str
    inputs: tuple[tuple[str, tuple[str, ...]], ...]
    output: tuple[str, tuple[str, ...]]
    maps: tuple[tuple[str, str, str, str, str], ...]
    call: Callable[..., Tensor]


# --8<-- [end:Interface]


def _called(model: nn.Module, *inputs: Tensor) -> Tensor:
    return model(*inputs)


def _classifier(model: nn.Module, tokens: Tensor) -> Tensor:
    logits = model(tokens)
    return torch.log_softmax(logits, dim=-1)  # allow-raw: classes is the last axis


def _self(stack: str, stem: str, label: str = "self-attention"):
    """The self-attention maps of the stack at module path ``stack``."""
    weights = f"{stack}.layers.{{}}.self_attention.weights"
    return (weights, f"{stem}.{{}}.self", label, "tokens", "tokens")


INTERFACES: dict[type, Interface] = {
    Transformer: Interface(
        "encoder-decoder",
        (("source", ("batch", "seq")), ("target", ("batch", "seq_q"))),
        ("log_probs", ("batch", "seq_q", "vocab")),
        (
            (
                "stacks.encoder.layers.{}.self_attention.weights",
                "encoder.{}.self",
                "encoder self-attention",
                "source",
                "source",
            ),
            (
                "stacks.decoder.layers.{}.self_attention.weights",
                "decoder.{}.self",
                "decoder self-attention",
                "target",
                "target",
            ),
            (
                "stacks.decoder.layers.{}.cross_attention.weights",
                "decoder.{}.cross",
                "cross-attention",
                "target",
                "source",
            ),
        ),  # fmt: skip
        _called,
    ),
    LanguageModel: Interface(
        "decoder-only",
        (("tokens", ("batch", "seq")),),
        ("log_probs", ("batch", "seq", "vocab")),
        (_self("blocks", "decoder", "causal self-attention"),),
        _called,
    ),
    TransformerClassifier: Interface(
        "classifier",
        (("tokens", ("batch", "seq")),),
        ("log_probs", ("batch", "classes")),
        (_self("encoder", "encoder"),),
        _classifier,
    ),
    TextEncoder: Interface(
        "encoder",
        (("tokens", ("batch", "seq")),),
        ("states", ("batch", "seq", "layer")),
        (_self("blocks", "encoder"),),
        _called,
    ),
}


def interface_of(model: nn.Module) -> Interface:
    """The :class:`Interface` of ``model``: its own ``onnx_interface`` attribute, or the
    one registered in ``INTERFACES`` for its class."""
    own = getattr(model, "onnx_interface", None)
    if isinstance(own, Interface):
        return own
    for kind, interface in INTERFACES.items():
        if isinstance(model, kind):
            return interface
    known = ", ".join(kind.__name__ for kind in INTERFACES)
    raise TypeError(
        f"cannot export a {type(model).__name__}: export_onnx knows {known}, and "
        "models with an 'onnx_interface' attribute"
    )


def _named(name: str, axes: tuple[str, ...]) -> str:
    return f"{name}: {' '.join(axes)}"


class AttentionOutputs(nn.Module):
    """``model`` whose forward returns its usual output, then every layer's attention
    weights (batch × heads × seq_q × seq), flat and in order: the graph
    :func:`export_onnx` writes. ``names`` are the outputs' names, axes included."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.interface = model, interface_of(model)
        self.maps: list[dict[str, Any]] = []
        self.names = [_named(*self.interface.output)]

    @checked
    def forward(
        self,
        *inputs: Shaped[Tensor, "..."],
    ) -> tuple[Float[Tensor, "..."], ...]:
        recorded = [template for template, *_ in self.interface.maps]
        with record(self.model, recorded) as found:
            output = self.interface.call(self.model, *inputs)
        flat, maps = [output], []
        for template, stem, label, queries, keys in self.interface.maps:
            for layer, w in enumerate(v.tensor for v in found.each(template)):
                name = _named(f"{stem.format(layer)}.weights", WEIGHT_AXES)
                maps.append({
                    "output": name, "label": f"{label}, layer {layer + 1}",
                    "group": label, "layer": layer, "heads": w.shape[-3],
                    "queries": queries, "keys": keys,
                })  # fmt: skip
                flat.append(w)
        self.maps, self.names = maps, [self.names[0], *(m["output"] for m in maps)]
        return tuple(flat)


def _example(interface: Interface) -> tuple[Tensor, ...]:
    """Inputs to trace with: id 0 everywhere, sizes of 2 or more and unequal (a size
    of 1, or two equal sizes, would be taken for a constant or for one axis)."""
    sizes = {"batch": 2, "seq": 7, "seq_q": 5}
    return tuple(
        torch.zeros([sizes[a] for a in axes], dtype=torch.long)
        if axes else torch.tensor(False)
        for _, axes in interface.inputs
    )  # fmt: skip


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's progress lines, warnings and log records, kept off the console:
    they describe PyTorch's internals, not the model."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(
            f"ONNX export needs {module}: pip install -e '.[export]' in a clone"
        )


# --8<-- [start:export_onnx]
@checked
def export_onnx(
    model: nn.Module,
    path: str | Path,
    metadata: dict[str, Any] | None = None,
    *,
    example: tuple[Shaped[Tensor, "..."], ...] | None = None,
) -> dict[str, Any]:
    """Write ``model`` as an ONNX graph at ``path`` and its sidecar at ``path`` with
    the suffix ``.json``; return the sidecar.

    The graph's outputs are the model's usual output and the attention weights of
    every layer, each named with its axes (``"encoder.0.self.weights: batch heads
    seq_q seq"``); ``batch``, ``seq`` and ``seq_q`` stay dynamic. ``metadata`` (a
    vocabulary, the longest input, labels …) is stored in the sidecar as given.
    ``example``: inputs to trace with (default: small id tensors).
    """
    wrapped, example = _wrapped(model, example)
    return _write(_traced(wrapped, example), wrapped, example, path, metadata)


def _traced(wrapped: AttentionOutputs, example: tuple[Tensor, ...]) -> Any:
    """PyTorch's exporter's program of ``wrapped`` traced on ``example``, not yet
    optimised: its initializers are still the parameters and buffers, by name."""
    _require("onnxscript")  # the exporter's translator to ONNX
    interface = wrapped.interface
    dims = {a: torch.export.Dim(a) for _, axes in interface.inputs for a in axes}
    dynamic = {name: {i: dims[a] for i, a in enumerate(axes)} or None
               for name, axes in interface.inputs}  # fmt: skip
    # Checks ran on the example; while tracing, sizes are symbols, not ints.
    with shape_checks(False), _quiet(), torch.no_grad():
        return torch.onnx.export(
            wrapped, example, dynamo=True, optimize=False,
            input_names=[n for n, _ in interface.inputs],
            output_names=wrapped.names,
            dynamic_shapes=(tuple(dynamic.values()),),  # forward(*inputs)
        )  # fmt: skip


# --8<-- [end:export_onnx]


def _wrapped(
    model: nn.Module, example: tuple[Tensor, ...] | None = None
) -> tuple[AttentionOutputs, tuple[Tensor, ...]]:
    """``model`` wrapped, run once on ``example`` (default: small id tensors):
    shape-checked, and the output names filled in."""
    wrapped = AttentionOutputs(model).eval()
    example = example or _example(wrapped.interface)
    with torch.no_grad():
        wrapped(*example)
    return wrapped, example


def _write(
    program: Any,
    wrapped: AttentionOutputs,
    example: tuple[Tensor, ...],
    path: str | Path,
    metadata: dict[str, Any] | None,
    *,
    keep: bool = False,
) -> dict[str, Any]:
    """``program`` with ``wrapped``'s weights, optimised (the exporter's constant
    folding, common subexpressions …), written with its sidecar. ``keep``: optimise
    a copy, leaving ``program`` as it was for another model's weights."""
    import onnx_ir

    weights = {**dict(wrapped.named_parameters(remove_duplicate=False)),
               **dict(wrapped.named_buffers(remove_duplicate=False))}  # fmt: skip
    with _quiet(), torch.no_grad():
        program.apply_weights(weights)
        optimized = program
        if keep:  # the optimiser rewrites its graph in place
            copy = onnx_ir.serde.deserialize_model(
                onnx_ir.serde.serialize_model(program.model)
            )
            optimized = torch.onnx.ONNXProgram(copy, program.exported_program)
        optimized.optimize()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        optimized.save(str(path), external_data=False)
    sidecar = {**_sidecar(wrapped, example), **(metadata or {})}
    path.with_suffix(".json").write_text(json.dumps(sidecar, indent=1) + "\n")
    return sidecar


def _export_onnx_each(
    exports: Sequence[tuple[nn.Module, str | Path, dict[str, Any] | None]],
) -> list[dict[str, Any]]:
    """:func:`export_onnx` of each ``(model, path, metadata)``, tracing once per
    architecture; return the sidecars.

    A model of the class, interface and ``config`` of one traced before, whose
    parameters and buffers have the same names, shapes and dtypes, gets that graph
    with its own weights: the trace and the exporter's decompositions (most of an
    export's time) are done once. Its graph must then give its outputs on random
    ids, run by onnxruntime, to $10^{-4}$: a ValueError otherwise.
    """
    wrapped = [_wrapped(model) for model, _, _ in exports]
    keys = [_architecture(w) for w, _ in wrapped]
    traced: dict[tuple, Any] = {}
    sidecars = []
    for i, ((w, example), key, (_, path, metadata)) in enumerate(
        zip(wrapped, keys, exports, strict=True)
    ):
        shared = key in traced
        if not shared:
            traced[key] = _traced(w, example)
        keep = key in keys[i + 1 :]  # another model's weights come later
        sidecars.append(_write(traced[key], w, example, path, metadata, keep=keep))
        if shared:
            _check_shared(w, example, path)
    return sidecars


def _architecture(wrapped: AttentionOutputs) -> tuple:
    """What a traced graph depends on besides the weights' values."""
    model = wrapped.model
    tensors = [*model.named_parameters(remove_duplicate=False),
               *model.named_buffers(remove_duplicate=False)]  # fmt: skip
    return (
        type(model), wrapped.interface, repr(getattr(model, "config", None)),
        tuple((name, tuple(t.shape), t.dtype) for name, t in tensors),
    )  # fmt: skip


def _check_shared(
    wrapped: AttentionOutputs, example: tuple[Tensor, ...], path: str | Path
) -> None:
    """The graph at ``path``, another model's trace with ``wrapped``'s weights,
    computes ``wrapped``: onnxruntime's outputs on random ids equal PyTorch's."""
    generator = torch.Generator().manual_seed(0)
    ids = tuple(torch.randint(0, 2, x.shape, generator=generator)
                if x.dtype == torch.long else x for x in example)  # fmt: skip
    with torch.no_grad():
        expected = wrapped(*ids)
    got = run_onnx(path, *ids).values()
    for name, want, have in zip(wrapped.names, expected, got, strict=True):
        if (have - want).abs().max() > 1e-4 * max(1.0, float(want.abs().max())):
            raise ValueError(
                f"{path}: output {name!r} differs from the model's: a model of the "
                "same architecture was traced, yet this one computes differently"
            )


def _sidecar(wrapped: AttentionOutputs, example: tuple[Tensor, ...]) -> dict[str, Any]:
    """What the graph's inputs, outputs and attention maps are, by name and axes."""
    interface = wrapped.interface
    return {
        "kind": interface.kind,
        "inputs": [
            {"name": n, "axes": list(a), "dtype": str(x.dtype).removeprefix("torch.")}
            for (n, a), x in zip(interface.inputs, example, strict=True)
        ],
        "outputs": [
            {"name": name, "axes": name.split(": ")[1].split()}
            for name in wrapped.names
        ],
        "attention": wrapped.maps,
    }


@checked
def run_onnx(
    path: str | Path,
    *inputs: Shaped[Tensor, "..."],
) -> dict[str, Shaped[Tensor, "..."]]:
    """Run the graph at ``path`` with onnxruntime on ``inputs`` (in the graph's input
    order); return every output by name, as tensors."""
    _require("onnxruntime")
    import onnxruntime

    session = onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]
    )
    wanted = [i.name for i in session.get_inputs()]
    if len(inputs) != len(wanted):
        raise ValueError(
            f"{path} takes {len(wanted)} inputs ({', '.join(wanted)}), "
            f"got {len(inputs)}"
        )
    feeds = {n: x.numpy() for n, x in zip(wanted, inputs, strict=True)}
    names = [o.name for o in session.get_outputs()]
    outputs = session.run(names, feeds)
    return {n: torch.from_numpy(v) for n, v in zip(names, outputs, strict=True)}
