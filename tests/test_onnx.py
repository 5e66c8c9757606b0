"""ONNX export: onnxruntime runs the exported graph and gives what PyTorch gives.

A model of every exportable kind is exported once and run at sizes other than the
traced ones (the ``batch``, ``seq`` and ``seq_q`` axes are dynamic): tiny random
models, and for the encoder-decoder the live model copy's checkpoint, exported by the
command line (``export``) once for these tests and the command's own.
The site's live models are the files the docs build served (``NT_SITE_DIR``), or are
exported here when no built site is given; each is run on a dozen real inputs.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import built_site, live_models_script
from hypothesis import given, settings
from hypothesis import strategies as st

import named_transformer as nt
import named_transformer.interop.onnx as onnx_export
from named_transformer.interop.onnx import WEIGHT_AXES, AttentionOutputs
from named_transformer.workflows import cli

ROOT = Path(__file__).resolve().parents[1]
VOCAB, CLASSES = 11, 3
TINY = nt.TransformerConfig(encoder_layers=2, decoder_layers=1, layer=8, heads=2,
                            hidden=16, dropout=0.0)  # fmt: skip
TOL = {"atol": 1e-5, "rtol": 1e-5}


def _tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return {
        "decoder-only": lambda: nt.LanguageModel(VOCAB, TINY),
        "classifier": lambda: nt.TransformerClassifier(
            VOCAB, CLASSES, num_layers=2, layer=8, heads=2, hidden=16, dropout=0.0
        ),
        "encoder": lambda: nt.TextEncoder(VOCAB, TINY),
    }[kind]().eval()


KINDS = ("encoder-decoder", "decoder-only", "classifier", "encoder")
LAYERS = {"encoder-decoder": 1 + 1 + 1, "decoder-only": 1, "classifier": 2,
          "encoder": 2}  # fmt: skip
CHECKPOINT = ROOT / "docs" / "scripts" / "live_checkpoints" / "copy.pt"


@pytest.fixture(scope="module")
def cli_export(tmp_path_factory) -> tuple[int, str, Path]:
    """``python -m named_transformer export`` of the live model copy's checkpoint (an
    encoder-decoder of 1 + 1 layers over 14 tokens), in this process: its exit status,
    what it printed and the graph it wrote. The only export of an encoder-decoder
    here: the tests of that kind read this graph."""
    out = tmp_path_factory.mktemp("cli") / "copy.onnx"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = cli.main(["export", str(CHECKPOINT), str(out)])
    return code, printed.getvalue(), out


@pytest.fixture(scope="module")
def exported(
    tmp_path_factory, cli_export
) -> dict[str, tuple[torch.nn.Module, Path, dict]]:
    from named_transformer.workflows.runner import load_run

    folder = tmp_path_factory.mktemp("onnx")
    path = cli_export[2]
    done = {
        "encoder-decoder": (
            load_run(CHECKPOINT)["model"].eval(),
            path,
            json.loads(path.with_suffix(".json").read_text()),
        )
    }
    for kind in KINDS[1:]:
        model = _tiny(kind)
        sidecar = nt.export_onnx(model, folder / f"{kind}.onnx", {"name": kind})
        done[kind] = (model, folder / f"{kind}.onnx", sidecar)
    return done


def _inputs(sidecar: dict, sizes: dict[str, int], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randint(VOCAB, [sizes[a] for a in spec["axes"]], generator=generator)
        for spec in sidecar["inputs"]
    ]


def _about(name: str):
    return lambda message: f"{name}: {message}"


def _same(
    onnx: dict[str, torch.Tensor],
    expected: tuple,
    names: list[str],
    exact: tuple | None = None,
) -> None:
    """Every attention weight to 1e-5. The model's output to 1e-5 plus 1e-4 of its
    size: a confident model's logits reach 40 or more, and the two runtimes' float32
    matrix products, summed in different orders, differ in their last digits. Given
    ``exact``, the same model's outputs in float64, an output outside that tolerance
    passes if it is as close to them as PyTorch's own float32 run (within twice its
    largest error, plus 1e-5): a trained model's long input can carry either runtime's
    float32 rounding further than the fixed tolerance."""
    assert list(onnx) == names
    for index, (name, want) in enumerate(zip(names, expected, strict=True)):
        tolerance = TOL if ".weights:" in name else {**TOL, "rtol": 1e-4}
        close = torch.allclose(onnx[name], want, **tolerance)
        if not close and exact is not None and ".weights:" not in name:
            truth = exact[index]
            ours = (want.double() - truth).abs().max().item()
            theirs = (onnx[name].double() - truth).abs().max().item()
            assert theirs <= 2 * ours + TOL["atol"], (name, theirs, ours)
            continue
        torch.testing.assert_close(onnx[name], want, **tolerance, msg=_about(name))


@pytest.mark.parametrize("kind", KINDS)
def test_onnxruntime_equals_pytorch_at_untraced_sizes(exported, kind):
    model, path, sidecar = exported[kind]
    names = [o["name"] for o in sidecar["outputs"]]
    wrapped = AttentionOutputs(model).eval()
    for seed, sizes in enumerate(({"batch": 1, "seq": 1, "seq_q": 1},
                                  {"batch": 3, "seq": 13, "seq_q": 2},
                                  {"batch": 2, "seq": 4, "seq_q": 9})):  # fmt: skip
        inputs = _inputs(sidecar, sizes, seed)
        with torch.no_grad():
            _same(nt.run_onnx(path, *inputs), wrapped(*inputs), names)


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 3), seq=st.integers(1, 12), seed=st.integers(0, 99))
def test_decoder_only_graph_equals_pytorch_for_any_sizes(exported, batch, seq, seed):
    model, path, sidecar = exported["decoder-only"]
    inputs = _inputs(sidecar, {"batch": batch, "seq": seq}, seed)
    with torch.no_grad():
        expected = AttentionOutputs(model)(*inputs)
    _same(nt.run_onnx(path, *inputs), expected, [o["name"] for o in sidecar["outputs"]])


@pytest.mark.parametrize("kind", KINDS)
def test_outputs_are_named_with_their_axes(exported, kind):
    _, path, sidecar = exported[kind]
    assert json.loads(path.with_suffix(".json").read_text()) == sidecar
    assert sidecar["kind"] == kind
    assert sidecar["name"] == ("copy" if kind == "encoder-decoder" else kind)
    maps = sidecar["attention"]
    assert len(maps) == LAYERS[kind]
    for entry, output in zip(maps, sidecar["outputs"][1:], strict=True):
        assert output["name"] == entry["output"]
        assert output["name"].endswith(": batch heads seq_q seq")
        assert tuple(output["axes"]) == WEIGHT_AXES and entry["heads"] == 2
    inputs = {i["name"] for i in sidecar["inputs"]}
    assert {m["queries"] for m in maps} | {m["keys"] for m in maps} <= inputs
    first = sidecar["outputs"][0]
    assert first["name"] == f"{first['name'].split(':')[0]}: {' '.join(first['axes'])}"


def test_cross_attention_reads_target_queries_and_source_keys(exported):
    *_, sidecar = exported["encoder-decoder"]
    cross = [m for m in sidecar["attention"] if m["group"] == "cross-attention"]
    assert [m["output"] for m in cross] == [
        "decoder.0.cross.weights: batch heads seq_q seq"
    ]
    assert (cross[0]["queries"], cross[0]["keys"]) == ("target", "source")


def test_a_model_it_cannot_export_is_named(tmp_path):
    with pytest.raises(TypeError, match="cannot export a Linear: export_onnx knows"):
        nt.export_onnx(torch.nn.Linear(2, 2), tmp_path / "x.onnx")


def test_run_onnx_names_the_inputs_it_needs(exported):
    _, path, _ = exported["encoder-decoder"]
    with pytest.raises(ValueError, match=r"takes 2 inputs \(source, target\), got 1"):
        nt.run_onnx(path, torch.zeros(1, 3, dtype=torch.long))


def test_one_trace_serves_only_models_of_its_architecture(exported):
    """_export_onnx_each traces a model once per architecture key: models that differ
    only in their weights share one; another configuration (the activation, the
    vocabulary) gets its own. The check run on each graph that reuses a trace passes
    for the model the graph computes and refuses one whose weights it does not hold.
    (The live models copy and reverse share a trace: the test below runs theirs.)"""
    model, path, _ = exported["decoder-only"]
    torch.manual_seed(1)
    other = nt.LanguageModel(VOCAB, TINY).eval()  # the same architecture, new weights
    gelu = nt.LanguageModel(VOCAB, replace(TINY, activation="gelu")).eval()
    wider = nt.LanguageModel(VOCAB + 1, TINY).eval()
    key = onnx_export._architecture(AttentionOutputs(model))
    assert onnx_export._architecture(AttentionOutputs(other)) == key
    assert onnx_export._architecture(AttentionOutputs(gelu)) != key
    assert onnx_export._architecture(AttentionOutputs(wider)) != key
    example = onnx_export._example(AttentionOutputs(model).interface)
    onnx_export._check_shared(onnx_export._wrapped(model)[0], example, path)
    with pytest.raises(ValueError, match="differs from the model's"):
        onnx_export._check_shared(onnx_export._wrapped(other)[0], example, path)


# ----------------------------------------------------------------- the site's models


LIVE = live_models_script()
TEXTS = {
    "digits": ["0123456789", "9", "55555", "31415926535897932384", "1 2 3",
               "8080", "70", "123321", "9081726354", "44", "20202020", "5"],
    "characters": ["12 March 2021", "2021-03-12", "March 12, 2021", "12/03/2021",
                   "Friday, 12 March 2021", "1 JAN 1900", "31.12.2099", "5 May 1955",
                   "the 3rd of June 1999", "JUNE 3 1999", "03-06-1999", "7 Jul 2000"],
    "words": ["the acting was good", "the plot was bad", "not good", "great",
              "the film was not bad at all", "boring", "the music was wonderful",
              "the ending felt weak", "good good good", "the cast", "bad acting",
              "the story was moving"],
    "wordpiece": ["The cat sat on the mat.", "Hello!", "naïve café déjà vu",
                  "A man is eating food.", "attention is all you need", "ok",
                  "Transformers read every token at once.", "1 2 3", "¿qué?",
                  "The animal didn't cross the street because it was too tired.",
                  "UPPER lower", "tokens, tokens, tokens"],
    "alphabet": ["the cat sat. the cat sat.", "a", "abcabcabc", "Hello, World!",
                 "naïve café 日本", "  ", "zzzz", "the end.", "qwerty qwerty",
                 "1 2 3", "abcdefghijklmnopqrstuvwxyz .", "to be or not to be"],
}  # fmt: skip


@pytest.fixture(scope="module")
def live_models(tmp_path_factory) -> Path:
    """The site's exported models: those the build served, or fresh ones."""
    site = built_site()
    if site is not None and (site / "assets" / "live" / "models").is_dir():
        return site / "assets" / "live" / "models"
    folder = tmp_path_factory.mktemp("live")
    LIVE.export_all(folder)
    return folder


def _feeds(live, sidecar: dict, text: str) -> list[torch.Tensor]:
    ids = live.tokenize(text)
    if sidecar["kind"] == "encoder-decoder":  # the target: <bos> and a few tokens
        ids["target"] = [sidecar["tokenizer"]["bos"], *ids["source"][:3]]
    feeds = [torch.tensor([ids[i["name"]]]) for i in sidecar["inputs"][:2]
             if i["axes"]]  # fmt: skip
    if sidecar.get("causal"):
        feeds.append(torch.tensor(len(text) % 2 == 0))  # both settings over the texts
    return feeds


@pytest.mark.parametrize("name", LIVE.LIVE)
def test_every_live_model_equals_pytorch_on_a_dozen_inputs(live_models, name):
    live = LIVE.reference(name)
    sidecar = json.loads((live_models / f"{name}.json").read_text())
    names = [o["name"] for o in sidecar["outputs"]]
    reads = sidecar["tokenizer"]["reads"]
    assert len(TEXTS[reads]) == 12
    in_float64 = copy.deepcopy(live.module).double()
    for text in TEXTS[reads]:
        feeds = _feeds(live, sidecar, text)
        with torch.no_grad():
            expected, exact = live.module(*feeds), in_float64(*feeds)
        onnx = nt.run_onnx(live_models / f"{name}.onnx", *feeds)
        _same(onnx, expected, names, exact)


def test_live_sidecars_say_how_to_read_text(live_models):
    for name in LIVE.LIVE:
        sidecar = json.loads((live_models / f"{name}.json").read_text())
        assert sidecar["name"] == name and sidecar["max_length"] >= 1
        assert sidecar["example"] and sidecar["title"]
        size = (live_models / f"{name}.onnx").stat().st_size
        assert size < (100e6 if name == "minilm" else 2e6), (name, size)
    minilm = json.loads((live_models / "minilm.json").read_text())
    assert (live_models / minilm["tokenizer"]["file"]).is_file()


def test_cli_exports_a_checkpoint(cli_export):
    """The command exits 0, names the graph and each output, and the sidecar says
    how the task reads text; the graph computes the checkpoint's model
    (test_onnxruntime_equals_pytorch_at_untraced_sizes[encoder-decoder])."""
    code, printed, out = cli_export
    assert code == 0
    assert f"wrote {out}" in printed
    assert "output decoder.0.cross.weights: batch heads seq_q seq" in printed
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["tokenizer"]["reads"] == "digits" and sidecar["max_steps"] >= 2


def test_cli_export_of_a_bad_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    assert cli.main(["export", str(bad), str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a torch file" in err
