"""``generate``: the packaged SmolLM2 with a prompt alone, a ``train text`` checkpoint
when one comes first."""

from __future__ import annotations

from named_transformer.workflows import cli
from named_transformer.workflows.text import (
    TextSettings,
    generate_from_checkpoint,
    train_text,
)


def test_generate_with_a_checkpoint_continues_it(tmp_path, capsys):
    settings = TextSettings(context=8, layers=1, layer=16, heads=2, batch_size=4,
                            steps=3, eval_every=3)  # fmt: skip
    train_text("the cat sat. " * 40, settings, directory=tmp_path, progress=False,
               show=lambda line: None)  # fmt: skip
    checkpoint = tmp_path / "checkpoint.pt"
    argv = ["generate", str(checkpoint), "the cat", "--max-new-tokens", "12",
            "--temperature", "0.5", "--seed", "3"]  # fmt: skip
    assert cli.main(argv) == 0
    expected = generate_from_checkpoint(checkpoint, "the cat", 12, 0.5, 3)
    assert capsys.readouterr().out == expected + "\n"


def test_generate_with_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    missing = str(tmp_path / "none.pt")
    assert cli.main(["generate", missing, "the cat"]) == 2
    assert capsys.readouterr().err == f"error: no checkpoint at {missing}\n"
