"""`train text`: real text, one character (or byte) a token, on tiny configurations.

References: Python's own str/bytes for the codec, slicing for the windows,
``F.cross_entropy`` for the bits per character, and a periodic corpus whose
continuation is known for the trained model and ``generate_from_checkpoint``.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from named_transformer.workflows import cli
from named_transformer.workflows.text import (
    TextCodec,
    TextSettings,
    _windows,
    bits_per_character,
    default_corpus,
    generate_from_checkpoint,
    load_text_model,
    read_corpus,
    text_model,
    train_text,
)
from named_transformer.workflows.training import (
    CheckpointError,
    TrainConfig,
    Trainer,
)

PERIODIC = "the cat sat. " * 200  # every character fixed by the four before it
TINY = ["--context", "16", "--batch-size", "16", "--steps", "300", "--eval-every",
        "10", "--target-bpc", "0.1", "--warmup", "20", "--factor", "0.5"]  # fmt: skip


def test_the_default_corpus_is_pydocs_help_topics():
    from pydoc_data.topics import topics

    text = default_corpus()
    assert len(text) == sum(len(t) for t in topics.values()) > 400_000
    assert topics["if"] in text  # what help("if") prints
    assert read_corpus(None, 64) == text


@pytest.mark.parametrize("level", ["chars", "bytes"])
def test_the_codec_round_trips_and_counts_as_python_does(level):
    text = "Größe — naïve café\n"
    codec = TextCodec.fit(text, level)
    ids = codec.encode(text)
    assert codec.decode(ids.tolist()) == text
    expected = len(text) if level == "chars" else len(text.encode("utf-8"))
    assert len(ids) == expected
    assert codec.vocab == (len(set(text)) if level == "chars" else 256)
    assert int(ids.max()) < codec.vocab


def test_an_unseen_character_is_one_line():
    with pytest.raises(ValueError, match=r"never saw: 'z'"):
        TextCodec.fit("abc").encode("abz")


def test_windows_are_the_text_and_the_text_shifted_by_one():
    ids = torch.arange(100) * 7
    inputs, targets = _windows(ids, torch.tensor([0, 5, 90]), 9)
    for row, start in enumerate([0, 5, 90]):
        assert inputs[row].tolist() == ids[start : start + 9].tolist()
        assert targets[row].tolist() == ids[start + 1 : start + 10].tolist()


def test_bits_per_character_is_the_cross_entropy_over_ln_2():
    torch.manual_seed(0)
    settings = TextSettings(context=8, layers=1, layer=16, heads=2)
    model = text_model(11, settings).eval()
    ids = torch.randint(11, (60,))
    starts = torch.linspace(0, 60 - 9, 5).long()
    inputs, targets = _windows(ids, starts, 8)
    with torch.no_grad():
        logits = model(inputs)
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / math.log(2)
    measured = bits_per_character(model, ids, 8, windows=5, batch_size=2)
    assert measured == pytest.approx(float(expected), rel=1e-6)


def _error(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_bad_corpus_is_one_line_and_exit_2(tmp_path, capsys):
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café".encode("latin-1") * 100)
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    short = tmp_path / "short.txt"
    short.write_text("x" * 300)
    cases = [
        (tmp_path / "missing.txt", "no corpus at"),
        (binary, "is binary (it holds NUL bytes)"),
        (latin, "is not UTF-8 text (byte 3 cannot be decoded)"),
        (empty, "is empty"),
        (short, "300 characters: too few for a context of 64"),
    ]
    for path, says in cases:
        line = _error(capsys, "train", "text", "--corpus", str(path), "--no-figure")
        assert line.startswith("error: ") and says in line, line


def test_train_text_learns_a_periodic_corpus_and_generate_continues_it(
    tmp_path, capsys
):
    """The CLI: samples while it trains, a loss figure, a checkpoint that stops at
    the target; the continuation of a periodic text is that text (at low T).
    Trained with shape checks off (the same numbers, a fifth less work: the checked
    text model is ``test_bytes_level_trains_and_reloads``); the continuations below
    are generated with them on."""
    corpus = tmp_path / "cat.txt"
    corpus.write_text(PERIODIC)
    out = tmp_path / "run"
    argv = ["train", "text", "--corpus", str(corpus), "--out", str(out), *TINY,
            "--no-shape-checks"]  # fmt: skip
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "sample at step" in captured.err  # samples while training
    printed = captured.out
    bpc = float(re.search(r"validation (\d+\.\d+) bits per character", printed)[1])
    assert bpc <= 0.1 and "(target 0.1: reached)" in printed
    steps = int(re.search(r"for (\d+) steps", printed)[1])
    assert steps < 300 and steps % 10 == 0  # stopped at an evaluation, early
    assert (out / "loss.png").stat().st_size > 0
    text = generate_from_checkpoint(out / "checkpoint.pt", "the cat", 40, 0.05)
    assert text == PERIODIC[: len("the cat") + 40]
    again = generate_from_checkpoint(out / "checkpoint.pt", "the cat", 40, 0.05)
    assert again == text


def test_bytes_level_trains_and_reloads(tmp_path):
    settings = TextSettings(level="bytes", context=8, layers=1, layer=16, heads=2,
                            batch_size=4, steps=3, eval_every=3)  # fmt: skip
    run = train_text("naïve café " * 40, settings, directory=tmp_path, progress=False)
    model, codec, loaded = load_text_model(tmp_path / "checkpoint.pt")
    assert codec.vocab == 256 and loaded == settings
    trained = run["model"].state_dict()
    for name, weight in model.state_dict().items():
        assert torch.equal(weight, trained[name]), name


def test_sample_length_is_the_final_samples_length():
    """The sample a run returns is the validation text's first 16 characters and
    ``sample_length`` sampled after them: none at 0 (no sampling work); a negative
    length is refused by name."""
    with pytest.raises(ValueError, match="sample_length must be >= 0, got -1"):
        TextSettings(sample_length=-1)
    for length in (0, 5):
        settings = TextSettings(context=8, layers=1, layer=16, heads=2,
                                batch_size=4, steps=1, eval_every=1,
                                eval_windows=2, sample_length=length)  # fmt: skip
        run = train_text(PERIODIC, settings, progress=False)
        validation = PERIODIC[int(0.9 * len(PERIODIC)) :]
        assert run["sample"][:16] == validation[:16]
        assert len(run["sample"]) == 16 + length


def test_a_checkpoint_of_a_task_is_refused_by_name(tmp_path):
    model = torch.nn.Linear(2, 2)
    trainer = Trainer(model, [0], list, None, TrainConfig(steps=1))
    trainer.save(tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match="not a text model's checkpoint"):
        load_text_model(tmp_path / "checkpoint.pt")


def test_python_dash_m_train_text_help_names_the_options():
    result = subprocess.run(
        [sys.executable, "-m", "named_transformer", "train", "--help"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    for option in ("--corpus", "--level", "--context", "--target-bpc", "--max-seconds"):
        assert option in result.stdout
