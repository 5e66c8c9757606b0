"""The models the site runs live in the reader's browser, exported to ONNX.

    python docs/scripts/live_models.py publish   # trained runs -> live_checkpoints/
    python docs/scripts/live_models.py export OUT   # every live model -> OUT/*.onnx

``publish`` copies the weights of the workflow runs the site already trains for its
figures (``run_workflows.py``, in ``.cache/workflow-runs``) into
``docs/scripts/live_checkpoints/`` (committed: model weights and settings, no optimizer
state, well under 2 MB each). The docs build (``docs/hooks/live_models.py``) exports
them, a parameter-free basic self-attention, the packaged MiniLM and the two-layer
attention-only model of "Watch a circuit form" (``docs/figures/induction/model.pt``,
which ``induction_figures.py`` trains) with :func:`named_transformer.export_onnx`
(``_export_onnx_each``: one trace per architecture). The browser tests compare what
the page computed with :func:`reference`, the same PyTorch models.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

import named_transformer as nt
import named_transformer.inside as inside
import named_transformer.workflows.induction as induction
from named_transformer.axes import checked
from named_transformer.interop.onnx import (
    INTERFACES,
    AttentionOutputs,
    Interface,
    _export_onnx_each,
)
from named_transformer.workflows.export import export_minilm, task_metadata
from named_transformer.workflows.runner import decode_examples, load_run
from named_transformer.workflows.tasks import detokenize, tokenize
from named_transformer.workflows.training import load_checkpoint

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = Path(__file__).resolve().parent / "live_checkpoints"
RUNS = ROOT / ".cache" / "workflow-runs"
# live name -> the workflow run it comes from
TRAINED = {"copy": "copy", "reverse": "reverse", "sort": "sort-decoder-only",
           "dates": "dates", "sentiment": "sentiment"}  # fmt: skip
INDUCTION = ROOT / "docs" / "figures" / "induction"
LIVE = (*TRAINED, "basic", "minilm", "induction")


class BasicLive(nn.Module):
    r"""Basic self-attention (no parameters of its own) over the sentiment model's
    word embeddings $X$: $\nfun{seq}{softmax}(X \ndot{layer} X') \ndot{seq} X$, with a
    causal mask when ``causal`` is true."""

    onnx_interface = Interface(
        "encoder",
        (("tokens", ("batch", "seq")), ("causal", ())),
        ("outputs", ("batch", "seq", "layer")),
        (("weights", "basic.{}.self", "basic self-attention", "tokens", "tokens"),),
        lambda model, tokens, causal: model(tokens, causal),
    )

    def __init__(self, table: Float[Tensor, "vocab layer"]) -> None:
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)

    @checked
    def forward(
        self, tokens: Int[Tensor, "batch seq"], causal: Bool[Tensor, ""]
    ) -> Float[Tensor, "batch seq layer"]:
        """The outputs; the weights, one head's, are tapped (``weights``)."""
        inputs = nt.embed(tokens, self.table, scale=False)
        allowed = nt.causal_mask(tokens.shape[-1], device=tokens.device)
        weights = nt.softmax(nt.dot_score(inputs, inputs), allowed | ~causal)
        by_head = rearrange(weights, "... seq_q seq -> ... 1 seq_q seq")
        inside.tap("weights", by_head, "*batch heads seq_q seq")
        return nt.attend(weights, inputs)


@dataclass
class Live:
    """A live model's PyTorch side: the graph's module, its sidecar entries, and
    Python's reading of a text (ids per input, before cutting) and answer."""

    module: AttentionOutputs
    metadata: dict[str, Any]
    tokenize: Callable[[str], dict[str, list[int]]]
    predict: Callable[[str], str]


def _trained(name: str) -> Live:
    run = load_run(CHECKPOINTS / f"{name}.pt")
    task, vocabulary = run["spec"].task, run["vocabulary"]
    kind = run["spec"].kind.name

    def ids(text: str) -> dict[str, list[int]]:
        source = vocabulary.encode(tokenize(task, text))
        if kind == "decoder-only":
            return {"tokens": [*source, vocabulary.bos]}
        return {"source" if kind == "encoder-decoder" else "tokens": source}

    def predict(text: str) -> str:
        source = tokenize(task, text)
        (answer,) = decode_examples(run["model"], run["spec"], vocabulary, [source])
        return detokenize(task, answer)

    metadata = task_metadata(run) | {"name": name}
    return Live(AttentionOutputs(run["model"]).eval(), metadata, ids, predict)


def _basic() -> Live:
    sentiment = _trained("sentiment")
    table = sentiment.module.model.embedding.table.detach()
    metadata = sentiment.metadata | {
        "name": "basic", "output": "none", "causal": {"input": "causal"},
        "title": "basic self-attention over word embeddings",
        "example": "the acting was good and the plot was bad",
    }  # fmt: skip
    metadata.pop("labels")
    return Live(AttentionOutputs(BasicLive(table)).eval(), metadata,
                sentiment.tokenize, lambda text: "")  # fmt: skip


def _minilm() -> Live:
    encoder = nt.load_minilm()

    def ids(text: str) -> dict[str, list[int]]:
        return {"tokens": encoder.tokenize([text]).tokens[0].tolist()}

    return Live(AttentionOutputs(encoder).eval(), {}, ids, lambda text: "")


#: the attention-only model's export: a language model that reads the reader's
#: characters once (no decoding loop): its next-token log-probabilities at every
#: position and both layers' weights
INDUCTION_INTERFACE = replace(INTERFACES[nt.LanguageModel], kind="language-model")


# The characters of the induction model: token i is ALPHABET[i], as the recipe reads
# them (``induction.encode`` where the recipe has one).
ALPHABET: str = getattr(induction, "ALPHABET", "abcdefghijklmnopqrstuvwxyz .")


def read_characters(text: str) -> list[int]:
    """The induction model's ids of ``text``: the recipe's ``encode``, or, for a
    recipe without one, letters lowercased, every whitespace the space and every
    other character ``.``, one token per character."""
    if hasattr(induction, "encode"):
        return induction.encode(text).tolist()
    space, other = ALPHABET.index(" "), ALPHABET.index(".")
    return [ALPHABET.find(c.lower()) if c.lower() in ALPHABET
            else space if c.isspace() else other for c in text]  # fmt: skip


def induction_model() -> nt.LanguageModel:
    """The trained attention-only model of ``docs/figures/induction/model.pt``, its
    sizes read off its weights."""
    state = torch.load(INDUCTION / "model.pt", map_location="cpu", weights_only=True)
    vocab, layer = state["embedding.table"].shape
    layers = len({k.split(".")[2] for k in state if k.startswith("blocks.layers.")})
    heads = state["blocks.layers.0.self_attention.w_q"].shape[0]
    if vocab != len(ALPHABET):
        raise ValueError(f"the induction model reads {vocab} tokens, ALPHABET has "
                         f"{len(ALPHABET)} characters")  # fmt: skip
    settings = induction.InductionSettings(layers=layers, layer=layer, heads=heads)
    model = induction.attention_only_model(settings)
    model.load_state_dict(state)
    model.onnx_interface = INDUCTION_INTERFACE
    return model.eval()


@torch.no_grad()
def head_roles(model: nt.LanguageModel, period: int = 11) -> dict[str, list[int]]:
    """The best previous-token head of the first layer and the best induction head of
    the last, as ``[layer, head]``, by the library's scores on 32 random sequences of
    ``period`` tokens repeated once."""
    tokens = inside.repeated_tokens(len(ALPHABET), period, 32, seed=period)
    with inside.record(model, "*.weights") as found:
        model(tokens)
    induction_ = inside.induction_scores(found, tokens).tensor
    previous = inside.previous_token_scores(found).tensor
    last = len(induction_) - 1
    return {"previous-token": [0, int(previous[0].argmax())],
            "induction": [last, int(induction_[last].argmax())]}  # fmt: skip


def _context() -> int:
    """The length of the rows the induction model was trained on."""
    try:
        results = json.loads((INDUCTION / "results.json").read_text())
        return int(results["two_layers"]["settings"]["context"])
    except (OSError, KeyError, TypeError, ValueError):
        return induction.InductionSettings().context


def _induction() -> Live:
    model = induction_model()
    metadata = {
        "name": "induction", "output": "next",
        "title": "induction heads: a two-layer attention-only model",
        "example": "the quick fox. the quick fox.",
        # what a character outside the alphabet is read as, asked of the reader
        "tokenizer": {"reads": "alphabet", "vocabulary": list(ALPHABET),
                      "whitespace": read_characters("\t")[0],
                      "other": read_characters("#")[0], "lowercase": True},
        "max_length": _context(), "roles": head_roles(model),
    }  # fmt: skip

    def predict(text: str) -> str:
        with torch.no_grad():
            log_probs = model(torch.tensor([read_characters(text)]))
        return "".join(ALPHABET[i] for i in log_probs[0].argmax(-1).tolist())

    return Live(AttentionOutputs(model).eval(), metadata,
                lambda text: {"tokens": read_characters(text)}, predict)  # fmt: skip


def reference(name: str) -> Live:
    """The PyTorch side of live model ``name`` (one of :data:`LIVE`)."""
    if name == "basic":
        return _basic()
    if name == "induction":
        return _induction()
    return _minilm() if name == "minilm" else _trained(name)


def export_all(out: Path) -> list[Path]:
    """Export every live model into ``out``; return the files written. Models of one
    architecture (copy and reverse) are traced once (``_export_onnx_each``)."""
    export_minilm(out / "minilm.onnx")
    lives = {name: reference(name) for name in LIVE if name != "minilm"}
    _export_onnx_each([(live.module.model, out / f"{name}.onnx", live.metadata)
                      for name, live in lives.items()])  # fmt: skip
    return sorted(out.iterdir())


def publish(runs: Path = RUNS) -> None:
    """Copy the trained runs' weights and settings into :data:`CHECKPOINTS`."""
    CHECKPOINTS.mkdir(exist_ok=True)
    for name, run in TRAINED.items():
        state = load_checkpoint(runs / run / "checkpoint.pt")
        kept = {k: state[k] for k in ("model", "step", "meta", "format")}
        empty = {"optimizer": {}, "scheduler": {}, "rng": {}, "history": []}
        torch.save(kept | empty, CHECKPOINTS / f"{name}.pt")
        print(f"{name}: {(CHECKPOINTS / f'{name}.pt').stat().st_size / 1e3:.0f} kB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("publish", "export"))
    parser.add_argument("out", nargs="?", type=Path, help="export: the folder")
    args = parser.parse_args()
    if args.command == "publish":
        publish()
    else:
        for path in export_all(args.out):
            print(path)


if __name__ == "__main__":
    main()
