"""A newcomer's first minutes with the command line: nothing lost, nothing silent.

Every output path is checked before any work (one line, exit status 2); a length the
model cannot read is refused before decoding; ``--resume`` with no checkpoint is
refused; Ctrl-C at any moment (during the imports, before the first step, while
training, while saving) is one true line and exit status 130, naming a checkpoint only
when one exists; training shows progress from its first step and checks its time cap
every step.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
import torch
from test_training import make_trainer

from named_transformer.workflows import cli, training
from named_transformer.workflows.training import TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT_0_1_0 = Path(__file__).parent / "data" / "copy-tiny-0.1.0.pt"
# one evaluation (of the recipe's 1,000 validation items), at the last step
TINY = ["--size", "tiny", "--steps", "2", "--train-size", "32", "--test-size", "4",
        "--eval-every", "2", "--batch-size", "8", "--min-len", "2",
        "--max-len", "4", "--no-progress"]  # fmt: skip


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


# --- refuse before working ---------------------------------------------------------


def test_train_out_an_existing_file_is_refused_before_training(tmp_path, capsys):
    out = tmp_path / "taken"
    out.write_text("keep me\n")
    assert cli.main(["train", "copy", *TINY, "--out", str(out)]) == 2
    assert "is a file, not a folder" in _one_error_line(capsys)
    assert out.read_text() == "keep me\n"  # nothing written, nothing trained


def test_train_out_under_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    argv = ["train", "copy", *TINY, "--out", str(tmp_path / "file" / "run")]
    assert cli.main(argv) == 2
    assert "is a file, so nothing can be written under it" in _one_error_line(capsys)


@pytest.mark.parametrize("task", ["copy", "text"])
def test_a_figure_path_that_is_a_folder_is_refused_before_training(
    tmp_path, capsys, task
):
    figure = tmp_path / "maps.png"
    figure.mkdir()
    out = tmp_path / "run"
    argv = ["train", task, *TINY, "--out", str(out), "--figure", str(figure)]
    assert cli.main(argv) == 2
    assert f"--figure {figure} is a folder" in _one_error_line(capsys)
    assert not (out / "checkpoint.pt").exists()


@pytest.mark.parametrize("command", ["evaluate", "decode"])
def test_evaluate_and_decode_check_their_figure_before_loading(
    tmp_path, capsys, monkeypatch, command
):
    from named_transformer.workflows import runner

    def never(*_, **__):
        raise AssertionError("the checkpoint was loaded before the figure's check")

    monkeypatch.setattr(runner, "load_run", never)
    figure = tmp_path / "maps.png"
    figure.mkdir()
    extra = ["3 1 4"] if command == "decode" else []
    argv = [command, str(CHECKPOINT_0_1_0), *extra, "--figure", str(figure)]
    assert cli.main(argv) == 2
    assert "is a folder" in _one_error_line(capsys)


@pytest.mark.parametrize("source", ["minilm", "checkpoint"])
def test_export_to_a_folder_is_refused_before_exporting(
    tmp_path, capsys, monkeypatch, source
):
    from named_transformer.workflows import export

    exported = []
    monkeypatch.setattr(export, "export_minilm", lambda *a: exported.append(a))
    monkeypatch.setattr(export, "export_checkpoint", lambda *a: exported.append(a))
    target = tmp_path / "model.onnx"
    target.mkdir()
    checkpoint = "minilm" if source == "minilm" else str(CHECKPOINT_0_1_0)
    assert cli.main(["export", checkpoint, str(target)]) == 2
    assert f"export target {target} is a folder" in _one_error_line(capsys)
    assert exported == []


def test_export_refuses_a_sidecar_path_that_is_a_folder(tmp_path, capsys):
    (tmp_path / "model.json").mkdir()
    argv = ["export", str(CHECKPOINT_0_1_0), str(tmp_path / "model.onnx")]
    assert cli.main(argv) == 2
    assert "model.json is a folder" in _one_error_line(capsys)
    assert not (tmp_path / "model.onnx").exists()


def test_attention_out_a_folder_is_refused_before_the_model_loads(
    tmp_path, capsys, monkeypatch
):
    pytest.importorskip("matplotlib")
    from named_transformer.workflows import pretrained as commands

    def never():
        raise AssertionError("the model was loaded before the --out check")

    monkeypatch.setattr(commands, "_encoder", never)
    assert cli.main(["attention", "The cat sat.", "--out", str(tmp_path)]) == 2
    assert "--out" in _one_error_line(capsys)


def test_decoding_more_tokens_than_the_model_reads_is_refused(capsys):
    """The copy model reads at most 128 positions (trained on 3 to 5 digits): 500
    digits are refused at once, where the old code decoded them at length."""
    argv = ["decode", str(CHECKPOINT_0_1_0), "7" * 500, "--no-figure"]
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == ("error: the input has 500 tokens; this model reads at most 128 "
                    "(it was trained on 3 to 5)")  # fmt: skip


def test_a_new_spec_refuses_more_tokens_than_its_learned_positions():
    """Since 0.9 a spec keeps its positions in its configuration: the limit is read
    there (0.9.0 read the spec's top level, and refused nothing)."""
    from named_transformer.workflows.runner import make_spec

    spec = make_spec("copy", vocab=14, positions="learned", max_positions=64)
    trained = {"min_len": 3, "max_len": 5}
    cli._within_positions(spec, ["7"] * 64, trained)  # within: no error
    with pytest.raises(ValueError, match="65 tokens; this model reads at most 64 "):
        cli._within_positions(spec, ["7"] * 65, trained)
    untabled = make_spec("copy", vocab=14, positions="sinusoidal")
    cli._within_positions(untabled, ["7"] * 500, trained)  # no table to run out of
    with pytest.raises(ValueError, match="with sinusoidal positions, at most 4,096"):
        cli._within_positions(untabled, ["7"] * 100_000, trained)  # hours of work


@pytest.mark.parametrize("task", ["copy", "text"])
def test_resume_with_no_checkpoint_is_refused(tmp_path, capsys, task):
    out = tmp_path / "run"
    argv = ["train", task, *TINY, "--out", str(out), "--no-figure", "--resume"]
    assert cli.main(argv) == 2
    line = _one_error_line(capsys)
    assert f"--resume: there is no checkpoint at {out / 'checkpoint.pt'}" in line
    assert not out.exists()


def test_resume_continues_a_text_run(tmp_path, capsys):
    """The resumed run says it trains for 4 steps, and its progress starts at step 3.
    Shape checks off and the first run quiet: each run samples 300 characters at its
    end (and, with progress, 120 more at its first evaluation) from the recipe's
    4-layer model, which is most of the work and none of what is checked."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("abcabcabd " * 40)
    out = tmp_path / "text"
    small = ["--corpus", str(corpus), "--context", "8", "--batch-size", "4",
             "--eval-every", "2", "--no-figure", "--no-shape-checks",
             "--out", str(out)]  # fmt: skip
    assert cli.main(["train", "text", *small, "--steps", "2", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["train", "text", *small, "--steps", "4", "--resume"]) == 0
    captured = capsys.readouterr()
    assert " for 4 steps " in captured.out.splitlines()[-2]
    steps = [line.split()[1] for line in captured.err.splitlines()
             if line.startswith("step ")]  # fmt: skip
    assert steps[0] == "3/4", captured.err  # it went on from step 2
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    assert state["step"] == 4


# --- Ctrl-C -------------------------------------------------------------------------


def test_ctrl_c_while_saving_leaves_no_half_file_and_names_no_checkpoint(
    tmp_path, monkeypatch
):
    def interrupted_save(state, path):
        Path(path).write_bytes(b"half")  # a half-written file, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(training.torch, "save", interrupted_save)
    trainer = make_trainer(tmp_path, steps=3)
    with pytest.raises(TrainingInterrupted) as caught:
        trainer.fit()
    assert caught.value.step == 3 and caught.value.checkpoint is None
    assert list(tmp_path.iterdir()) == []  # no .tmp, no checkpoint
    line = cli.interrupted_line(caught.value, tmp_path / "checkpoint.pt", None)
    assert line == "interrupted after step 3, before this run saved a checkpoint"


def test_ctrl_c_while_exporting_leaves_no_half_written_graph(
    tmp_path, capsys, monkeypatch
):
    from named_transformer.workflows import export

    def interrupted(checkpoint, out):
        Path(out).write_bytes(b"half a graph")
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "export_checkpoint", interrupted)
    target = tmp_path / "copy.onnx"
    try:
        status = cli.main(["export", str(CHECKPOINT_0_1_0), str(target)])
    except KeyboardInterrupt:  # not left to stop the test session
        pytest.fail("Ctrl-C escaped the command line")
    assert status == 130
    assert capsys.readouterr().err == "interrupted: export stopped before it finished\n"
    assert not target.exists()


def test_a_ctrl_c_before_training_names_no_checkpoint(tmp_path):
    line = cli.interrupted_line(KeyboardInterrupt(), tmp_path / "checkpoint.pt", None)
    assert line == "interrupted before the first step; nothing was saved"


def _start(tmp_path: Path, *argv: str) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "named_transformer", *argv], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )  # fmt: skip


def _ctrl_c_as_in_a_terminal() -> None:
    """A shell starts a background job (``cmd &``, as a CI script may run pytest) with
    Ctrl-C ignored, and the children inherit it, so Python would install no handler;
    a command run in a terminal gets Ctrl-C's default, which these tests are about."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt(process: subprocess.Popen[str]) -> tuple[str, list[str]]:
    """Send Ctrl-C; the interruption's line and every line of stderr."""
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert process.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    said = [line for line in lines if line.startswith("interrupted")]
    assert len(said) == 1 and said[0] == lines[-1], err
    return said[0], lines


def _true(line: str, out: Path) -> None:
    """The line names a checkpoint exactly when one exists, and it is whole."""
    if "checkpoint: " in line:
        named = Path(line.split("checkpoint: ")[1].split(" (")[0])
        named = named if named.is_absolute() else out.parent / named
        assert named.is_file(), line
        assert training.load_checkpoint(named)["step"] >= 1
    else:
        assert not (out / "checkpoint.pt").exists(), line


def _wait_for(predicate, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 240
    while not predicate():
        assert process.poll() is None, f"exited before {what}"
        assert time.monotonic() < deadline, f"never reached {what}"
        time.sleep(0.01)


SLOW = ["train", "copy", "--size", "tiny", "--steps", "100000", "--eval-every", "0",
        "--batch-size", "8", "--min-len", "2", "--max-len", "4", "--test-size", "4",
        "--no-figure", "--out", "run"]  # fmt: skip


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc")
def test_ctrl_c_during_the_imports_is_one_line(tmp_path):
    process = _start(tmp_path, *SLOW)
    maps = Path(f"/proc/{process.pid}/maps")

    def importing_torch() -> bool:
        try:
            return "libtorch" in maps.read_text()
        except OSError:
            return False

    _wait_for(importing_torch, process, "import torch")
    line, lines = _interrupt(process)
    assert len(lines) == 1, lines  # nothing had started: nothing else to say
    assert line in (
        "interrupted while starting; nothing was done",
        "interrupted before the first step; nothing was saved",
    )
    assert not (tmp_path / "run").exists()


def _stderr_lines(process: subprocess.Popen[str], until: str) -> list[str]:
    """Read stderr up to a line starting with ``until``."""
    seen = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        assert line, f"stderr ended before {until!r}: {seen}"
        seen.append(line.rstrip("\n"))
        if line.startswith(until):
            return seen
    raise AssertionError(f"no {until!r} line in time: {seen}")


def test_ctrl_c_before_the_first_step_is_one_true_line(tmp_path):
    process = _start(tmp_path, *SLOW, "--train-size", "200000")
    first = _stderr_lines(process, "training a tiny encoder-decoder model on copy")
    line, _ = _interrupt(process)
    _true(line, tmp_path / "run")
    assert first[-1].endswith("Ctrl-C stops and saves a checkpoint")


def test_ctrl_c_while_training_saves_and_names_the_checkpoint(tmp_path):
    process = _start(tmp_path, *SLOW, "--train-size", "64")
    _stderr_lines(process, "step 1/100000")  # progress from the very first step
    line, _ = _interrupt(process)
    assert line.startswith("interrupted after step ") and "--resume" in line, line
    _true(line, tmp_path / "run")
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


# --- never silent -------------------------------------------------------------------


def test_progress_starts_at_the_first_step_and_is_never_quiet(capsys, monkeypatch):
    monkeypatch.setattr(training._Progress, "QUIET", 0.05)
    trainer = make_trainer(steps=40, progress=True)
    slow = trainer.loss

    def loss(model, batch):
        if trainer.step == 3:  # one slow step, as on a busy machine
            time.sleep(0.5)
        return slow(model, batch)

    trainer.loss = loss
    trainer.fit()
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("step 1/40  loss ")
    # step 3 has no line of its own (every other step has one), but the quiet spell
    # during step 4 repeats its line
    assert any(line.startswith("step 3/40  loss ") for line in lines), lines


def test_the_time_cap_is_checked_every_step():
    """A cap shorter than a step stops after the first step (no evaluation was due
    for 1,000 steps), with an evaluation so that the run ends with a score."""
    scores = []

    def evaluate(model):
        scores.append(1)
        return {"valid": 0.5}

    trainer = make_trainer(steps=10_000, eval_every=1000, max_seconds=1e-6,
                           evaluate=evaluate)  # fmt: skip
    trainer.fit()
    assert trainer.step == 1 and scores == [1]
    assert trainer.history[-1].metrics == {"valid": 0.5}
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        training.TrainConfig(max_seconds=0)


# --- clean --------------------------------------------------------------------------


def test_exercises_check_leaves_no_hypothesis_folder(tmp_path):
    """A passing property check (hypothesis draws the sizes) in a fresh folder: its
    cache of the learner's constants lived in a temporary folder, now gone."""
    from named_transformer.exercises.learner import write_exercises

    write_exercises(tmp_path / "ex")
    mine = tmp_path / "ex" / "basic_self_attention.py"
    mine.write_text(mine.read_text().replace(
        "    raise NotImplementedError",
        "    from named_transformer import basic_self_attention as library\n"
        "    return library(inputs)",
    ))  # fmt: skip
    before = set(Path(tempfile.gettempdir()).glob("named_transformer-hypothesis-*"))
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    done = subprocess.run(
        [sys.executable, "-m", "named_transformer", "exercises", "check", "ex",
         "basic_self_attention"], cwd=tmp_path, env=environment,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "basic_self_attention: passed" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ex"]
    after = set(Path(tempfile.gettempdir()).glob("named_transformer-hypothesis-*"))
    assert after <= before


@pytest.mark.parametrize("made", [False, True])
def test_exercises_check_of_a_folder_without_exercises_is_one_line(
    tmp_path, capsys, made
):
    folder = tmp_path / "nowhere"
    if made:
        folder.mkdir()
    assert cli.main(["exercises", "check", str(folder)]) == 2
    line = _one_error_line(capsys)
    assert line.endswith(f"write the exercises first: python -m named_transformer "
                         f"exercises init {folder}")  # fmt: skip


def _hooks():
    pytest.importorskip("nbformat")
    pytest.importorskip("mkdocs")
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import notebooks
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    return notebooks


def test_the_notebooks_install_cell_runs_where_installed_else_says_how(tmp_path):
    cell = _hooks().INSTALL
    installed = subprocess.run(
        [sys.executable, "-c", cell], cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False,
    )  # fmt: skip
    assert installed.returncode == 0 and not installed.stdout + installed.stderr
    # -S: no site-packages, so named_transformer is not installed
    missing = subprocess.run([sys.executable, "-S", "-I", "-c", cell], cwd=tmp_path,
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "named_transformer is not installed: in a clone of its repository run "
        "pip install -e '.[docs]', then restart the kernel"
    )


def test_the_notebooks_files_cell_leaves_no_folder_behind(tmp_path):
    import nbformat

    reads = nbformat.v4.new_code_cell('print(open("benchmarks/results.md").read())')
    cell = _hooks().files_cell([reads])
    assert cell is not None
    code = cell.source + "\nprint(len(open('benchmarks/results.md').read()))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len((ROOT / "benchmarks" / "results.md").read_text())
    assert list(tmp_path.iterdir()) == []  # the working folder went with the kernel


def test_a_run_that_will_replace_a_checkpoint_says_so_first(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "copy", *TINY, "--no-figure", "--out", str(out)]
    assert cli.main(argv) == 0
    assert "warning" not in capsys.readouterr().err
    assert cli.main(argv) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"warning: this run replaces {out / 'checkpoint.pt'} when it saves "
        "(--resume would continue it instead)"
    )


def test_train_copy_stops_at_its_time_cap_after_any_step(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "copy", *TINY, "--steps", "300", "--eval-every", "100",
            "--max-seconds", "0.001", "--no-figure", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    assert " for 1 steps " in capsys.readouterr().out
    assert training.load_checkpoint(out / "checkpoint.pt")["step"] == 1


def test_importing_the_package_imports_neither_jax_nor_transformers_nor_dynamo():
    """Issue 45, item 4: jax (which Tracr brings, and jaxtyping imports when it is
    installed), transformers, matplotlib and ``torch._dynamo`` (over a second) stay out
    of ``import named_transformer``; the same fresh process then imports the command
    line, which loads none of the command modules (``cli.COMMAND_MODULES``; the static
    half, that nothing the CLI imports imports it back, is
    ``test_cli.py::test_the_cli_and_the_command_modules_do_not...``); jax still imports
    afterwards for whoever asks for it, and, after a lookup of ``torch._dynamo`` that
    imports nothing, the first ``torch.compile`` (which imports dynamo) records an
    einops call as one node of the graph (the package registers einops' functions
    then: ``named_transformer._tracing``; tests/test_checking.py checks a model's
    graph)."""
    pytest.importorskip("jax")  # installed with the test extras (Tracr)
    code = (
        "import sys, named_transformer\n"
        "heavy = ('jax', 'transformers', 'matplotlib', 'torch._dynamo')\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "from named_transformer.workflows import cli\n"
        "print([m for m in cli.COMMAND_MODULES if m in sys.modules])\n"
        "import jax.numpy\n"
        "print(float(jax.numpy.ones(2).sum()))\n"
        "import importlib.util\n"  # a lookup alone: the finder must keep waiting
        "assert importlib.util.find_spec('torch._dynamo')\n"
        "import einops, torch\n"
        "def graph(gm, inputs):\n"
        "    print([node.target.__name__ for node in gm.graph.nodes\n"
        "           if node.op == 'call_function'])\n"
        "    return gm.forward\n"
        "turn = torch.compile(lambda x: einops.rearrange(x, 'a b -> b a'),\n"
        "                     backend=graph, fullgraph=True)\n"
        "print(turn(torch.ones(2, 3)).shape == (3, 2))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=True, timeout=300)  # fmt: skip
    assert done.stdout.split() == ["[]", "[]", "2.0", "['rearrange']", "True"], (
        done.stdout + done.stderr
    )


def test_train_induction_checks_its_paths_and_options_before_training(
    tmp_path, capsys, monkeypatch
):
    """The induction recipe refuses a file as its folder, and the options it does not
    take, in one line each on stderr (and no warning, which a process would print
    there too), exit status 2, before any step: ``main`` in this process (what
    ``python -m named_transformer`` returns as its exit status; the process itself,
    its start, Ctrl-C and exit status, is checked by the tests above on ``train
    copy``)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    argv = ["train", "induction", "--steps", "2", "--no-figure"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli.main([*argv, "--out", str(a_file)]) == 2
    assert [str(w.message) for w in caught] == []
    assert "is a file, not a folder" in _one_error_line(capsys)
    monkeypatch.chdir(tmp_path)  # the default --out, runs/induction, lies here
    refused = [(["--resume"], "takes no --resume"),
               (["--max-seconds", "5"], "takes no --max-seconds")]  # fmt: skip
    for extra, said in refused:
        assert cli.main([*argv, *extra]) == 2
        assert said in _one_error_line(capsys)
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written


def _commands(parser, words=()) -> list[tuple[str, ...]]:
    """Every command line the parser answers --help for: the main one, each command,
    each command's own commands (``exercises init``)."""
    found = [tuple(words)]
    for action in parser._actions:  # argparse keeps its commands there
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                found += _commands(command, (*words, name))
    return found


def _imported(importtime: str) -> set[str]:
    """The modules a ``-X importtime`` report lists (its last column)."""
    return {line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines()
            if line.startswith("import time:")}  # fmt: skip


@pytest.mark.parametrize("words", _commands(cli.parser()), ids=" ".join)
def test_every_help_answers_without_importing_torch(words):
    """Issue 45, item 4: ``python -m named_transformer [COMMAND] --help`` parses
    before the package imports torch (its ``-X importtime`` lists every module it
    imported: torch is not among them)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "named_transformer", *words,
         "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: python -m named_transformer")
    imported = _imported(done.stderr)
    assert "named_transformer.workflows.cli" in imported  # the parser did answer
    assert "torch" not in imported


def test_a_usage_mistake_is_one_line_without_importing_torch():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "named_transformer", "train",
         "nosuchtask"], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines()
             if not line.startswith("import time:")]  # fmt: skip
    assert done.returncode == 2
    assert len(lines) == 1 and "invalid choice: 'nosuchtask'" in lines[0], lines
    assert "torch" not in _imported(done.stderr)


def test_the_parsers_numbers_are_the_registries():
    """The parser's choices come from torch-free recipes: the model kinds and the
    generated tasks they name are the registries' own."""
    from named_transformer.workflows import kinds, recipes, tasks

    assert recipes.KINDS == tuple(kinds.MODEL_KINDS)
    assert sorted(recipes.RECIPES) == sorted(tasks.TASKS)


def test_a_ctrl_c_that_python_could_only_print_is_delivered_again(monkeypatch):
    # hypothesis's garbage-collector callback once swallowed Ctrl-C in `exercises
    # check`: Python printed "Exception ignored in ..." and the command carried on
    from named_transformer import _startup

    class SwallowsCtrlC:
        def __del__(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _startup.started()
        assert sys.unraisablehook is _startup._deliver_again
        with pytest.raises(KeyboardInterrupt):
            SwallowsCtrlC()  # its __del__ runs at once and cannot raise
            give_up = time.monotonic() + 5
            while time.monotonic() < give_up:  # the Ctrl-C delivered again lands here
                pass
    finally:
        signal.signal(signal.SIGINT, previous)
