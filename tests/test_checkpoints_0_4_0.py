"""Checkpoints written by versions 0.4.0 and 0.8.3 load into the one multi-head pipeline
and give the same outputs.

``tests/data/0.4.0/`` holds tiny copy-task models (three training steps) of both
Transformer kinds with each kind of positions, written by 0.4.0's ``train_task``
(the optimizer moments dropped to keep the files small), and ``outputs.json`` what
0.4.0 computed from them: the summed cross-entropy of three examples and the greedy
(key/value-cached) decoding of their sources. ``tests/data/0.8.3/`` holds the same
for 0.8.3's spec with the options 0.9.0 moved into the configuration's positions (the
rotary base, kept in the configuration then) or now builds from it (grouped heads, the
Llama block; a classifier with ALiBi positions), written by 0.8.3's ``train_task``
with those options put into its spec.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import named_transformer as nt
from named_transformer.workflows.data import Example
from named_transformer.workflows.kinds import MODEL_KINDS
from named_transformer.workflows.runner import load_run, make_spec, position_choices
from named_transformer.workflows.spec import RunSpec

DATA = Path(__file__).parent / "data" / "0.4.0"
THEN = json.loads((DATA / "outputs.json").read_text())
SOURCES = [tuple("3141592653"), tuple("27182818284"), tuple("1123581321345")]


@pytest.mark.parametrize("name", sorted(THEN))
def test_a_0_4_0_checkpoint_computes_what_0_4_0_computed(name):
    run = load_run(DATA / f"{name}.pt")
    kind = run["spec"].kind
    batch = kind.collate([Example(s, s) for s in SOURCES], run["vocabulary"])
    with torch.no_grad():
        loss, count = kind.loss(run["model"], batch, run["vocabulary"], 0.0)
    decoded = kind.decode(run["model"], run["vocabulary"], SOURCES)
    assert run["spec"].config.positions.kind in name
    assert count.item() == THEN[name]["count"]
    assert loss.item() == pytest.approx(THEN[name]["loss"], rel=1e-6)
    assert ["".join(tokens) for tokens in decoded] == THEN[name]["decoded"]


DATA_0_8_3 = Path(__file__).parent / "data" / "0.8.3"
THEN_0_8_3 = json.loads((DATA_0_8_3 / "outputs.json").read_text())


@pytest.mark.parametrize("name", sorted(THEN_0_8_3))
def test_a_0_8_3_checkpoint_computes_what_0_8_3_computed(name):
    then = THEN_0_8_3[name]
    run = load_run(DATA_0_8_3 / f"{name}.pt")
    kind = run["spec"].kind
    sources = [tuple(source) for source in then["sources"]]
    targets = sources if kind.learns == "seq2seq" else [("positive",)] * len(sources)
    examples = [Example(s, t) for s, t in zip(sources, targets, strict=True)]
    batch = kind.collate(examples, run["vocabulary"])
    with torch.no_grad():
        loss, count = kind.loss(run["model"], batch, run["vocabulary"], 0.0)
    decoded = kind.decode(run["model"], run["vocabulary"], sources)
    joiner = "" if kind.learns == "seq2seq" else " "
    assert count.item() == then["count"]
    assert loss.item() == pytest.approx(then["loss"], rel=1e-6)
    assert [joiner.join(tokens) for tokens in decoded] == then["decoded"]
    # the options of the spec are in the model: the positions, and the rest
    positions = run["model"].config.positions
    assert positions.kind == name.split("-")[-1 if "classifier" in name else 3]
    if "llama" in name:
        assert positions == nt.Rotary(500.0)
        assert run["model"].blocks.layers[0].self_attention.kv_heads == 2


STORED = sorted(Path(__file__).parent.glob("data/**/*.pt"))


@pytest.mark.parametrize("path", [p for p in STORED if "outputs" not in p.name],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")  # fmt: skip
def test_a_stored_spec_of_any_version_reads_into_one_typed_spec(path):
    """A checkpoint's JSON spec (0.1.0 to 0.8.3 here) is read once, its kind looked up
    by name there; written back, it is the current form and reads the same."""
    stored = torch.load(path, weights_only=True)["meta"]["spec"]
    spec = RunSpec.from_dict(stored)
    assert spec.kind is MODEL_KINDS[stored["kind"]]
    assert spec.to_dict()["task"] == stored["task"] and spec.vocab == stored["vocab"]
    assert spec.size == stored["size"]
    assert spec.config.positions.kind == stored["positions"]  # before 0.9: beside it
    assert spec.max_positions == stored["max_positions"]  # decode's limit, kept
    again = json.loads(json.dumps(spec.to_dict()))
    assert "positions" in again["config"] and RunSpec.from_dict(again) == spec


@pytest.mark.parametrize("positions", position_choices())
@pytest.mark.parametrize("kind", list(MODEL_KINDS))
def test_a_spec_written_now_is_json_that_reads_back_the_same(kind, positions):
    task = "sentiment" if MODEL_KINDS[kind].learns == "classify" else "copy"
    spec = make_spec(task, kind, "tiny", vocab=14, positions=positions)
    stored = json.loads(json.dumps(spec.to_dict()))
    assert set(stored) == {"task", "kind", "size", "vocab", "config"}
    assert stored["kind"] == kind and stored["config"] == spec.config.to_dict()
    assert RunSpec.from_dict(stored) == spec and spec.max_positions is None


def test_a_spec_of_a_kind_that_cannot_learn_its_task_is_refused_in_one_line():
    copy = make_spec("copy", vocab=14)
    with pytest.raises(ValueError, match="^task 'copy' cannot be learned by a "
                       "classifier model$"):  # fmt: skip
        RunSpec("copy", MODEL_KINDS["classifier"], "tiny", 14, copy.config)
    with pytest.raises(ValueError, match="^model kind must be one of .*'lstm'$"):
        RunSpec.from_dict({**copy.to_dict(), "kind": "lstm"})
