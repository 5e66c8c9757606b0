"""The command line (train, evaluate, decode) on tiny configurations, and the workflow
results script in its quick mode."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from named_transformer.workflows import cli

CHECKPOINT_0_1_0 = Path(__file__).parent / "data" / "copy-tiny-0.1.0.pt"

# one evaluation (of the recipe's validation items: copy 1,000), at the last step
TINY = ["--size", "tiny", "--steps", "2", "--train-size", "32", "--test-size", "4",
        "--eval-every", "2", "--batch-size", "8", "--min-len", "2",
        "--max-len", "4"]  # fmt: skip


def run(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr().out


def test_train_evaluate_decode_copy(tmp_path, capsys):
    out = tmp_path / "copy"
    printed = run(capsys, "train", "copy", *TINY, "--out", str(out))
    assert re.search(r"^held-out exact match: \d+\.\d%$", printed, re.MULTILINE)
    for name in ("checkpoint.pt", "metrics.json", "attention.png"):
        assert (out / name).stat().st_size > 0, name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] <= 2 and metrics["kind"] == "encoder-decoder"

    printed = run(capsys, "evaluate", str(out / "checkpoint.pt"), "--n", "4")
    assert "4 held-out examples of copy" in printed
    assert re.search(r"^held-out exact match: \d+\.\d%$", printed, re.MULTILINE)
    assert (out / "attention-evaluate.png").exists()

    # the figure is the same for every method (greedy decoding's attention maps):
    # drawn once, with greedy; beam and sample are told --no-figure and draw none
    for method in ("greedy", "beam", "sample"):
        figure = (
            ["--figure", str(tmp_path / "greedy.png")]
            if method == "greedy"
            else ["--no-figure"]
        )
        printed = run(capsys, "decode", str(out / "checkpoint.pt"), "3 1 4",
                      "--method", method, *figure)  # fmt: skip
        assert re.fullmatch(r"\d*", printed.splitlines()[0])
    assert [p.name for p in tmp_path.glob("*.png")] == ["greedy.png"]
    assert not list(out.glob("attention-decode*.png"))
    assert cli.main(["decode", str(out / "checkpoint.pt"), "abc"]) == 2
    assert "'abc' has no tokens for task 'copy'" in capsys.readouterr().err


def test_train_decoder_only_with_relative_positions_and_no_shape_checks(
    tmp_path, capsys
):
    out = tmp_path / "sort"
    printed = run(capsys, "train", "sort", *TINY, "--model", "decoder-only",
                  "--positions", "relative", "--no-shape-checks", "--no-progress",
                  "--out", str(out))  # fmt: skip
    assert "held-out exact match:" in printed and (out / "attention.png").exists()
    assert json.loads((out / "metrics.json").read_text())["kind"] == "decoder-only"


@pytest.mark.parametrize("positions", ["rotary", "alibi"])
def test_train_and_decode_with_rotary_and_alibi_positions(tmp_path, capsys, positions):
    from named_transformer.workflows.runner import load_run

    out = tmp_path / positions
    printed = run(capsys, "train", "copy", *TINY, "--positions", positions,
                  "--no-figure", "--no-progress", "--out", str(out))  # fmt: skip
    assert "held-out exact match:" in printed
    loaded = load_run(out / "checkpoint.pt")
    assert loaded["spec"].config.positions.kind == positions
    attention = loaded["model"].stacks.decoder.layers[0].self_attention
    expected = {"rotary": "Rotary", "alibi": "LinearBiases"}[positions]
    assert type(attention.positions).__name__ == expected
    printed = run(capsys, "decode", str(out / "checkpoint.pt"), "3 1 4",
                  "--figure", str(tmp_path / "decode.png"))  # fmt: skip
    assert re.fullmatch(r"\d*", printed.splitlines()[0])


def test_train_sentiment_classifier_and_bag_of_words(tmp_path, capsys):
    printed = run(capsys, "train", "sentiment", *TINY, "--out", str(tmp_path / "s"))
    assert re.search(r"^held-out accuracy: \d+\.\d%$", printed, re.MULTILINE)
    assert re.search(r"^negation contrast accuracy: \d+\.\d%$", printed, re.MULTILINE)
    printed = run(capsys, "train", "sentiment", *TINY, "--model", "bag-of-words",
                  "--out", str(tmp_path / "b"))  # fmt: skip
    assert "attention maps: none" in printed
    printed = run(
        capsys,
        "decode",
        str(tmp_path / "s" / "checkpoint.pt"),
        "The plot was not good.",
    )
    assert printed.splitlines()[0] in ("positive", "negative")


def test_a_mismatched_model_kind_is_a_clear_error(tmp_path, capsys):
    """One line on stderr and exit status 2, from ``main`` in this process
    (``_in_process``): the check runs after the parser, where torch is imported, so a
    process of its own would only import torch again."""
    argv = ["train", "copy", *TINY, "--model", "classifier", "--no-figure", "--out",
            str(tmp_path / "run")]  # fmt: skip
    line = _one_line_error(_in_process(capsys, *argv))
    assert "task 'copy' cannot be learned by a classifier model" in line
    assert not (tmp_path / "run").exists()


def test_missing_extra_names_it(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    with pytest.raises(
        SystemExit, match=r"matplotlib.*`train` extra.*pip install -e '\.\[train\]'"
    ):
        cli.main(["train", "copy", *TINY, "--out", str(tmp_path)])


def test_python_dash_m_entry_point():
    result = subprocess.run([sys.executable, "-m", "named_transformer", "--help"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0
    assert all(c in result.stdout for c in ("train", "evaluate", "decode"))


def test_results_script_quick_mode(tmp_path):
    script = (
        Path(__file__).resolve().parents[1] / "docs" / "scripts" / "run_workflows.py"
    )
    spec = importlib.util.spec_from_file_location("run_workflows", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path)])
    results = tmp_path / "docs" / "scripts" / "workflow_results"
    summary = (results / "summary.md").read_text()
    assert "| dates |" in summary
    assert re.search(
        r"\| histogram \|.*\| 8 \|", summary
    )  # trained in two phases: 4 + 4 steps
    assert "| relative |" in (results / "length.md").read_text()
    assert (results / "decoding.md").exists()
    figures = tmp_path / "docs" / "figures" / "workflows"
    assert (figures / "curves-seq2seq.png").exists()
    drawn = {p.name for p in figures.glob("attention-*.png")}
    assert {"attention-dates-encoder.png", "attention-dates-decoder.png",
            "attention-dates-cross.png", "attention-sentiment-encoder.png",
            "attention-sort-decoder-only-causal.png"} <= drawn, drawn  # fmt: skip


def test_resumed_training_ends_with_the_same_weights(tmp_path, capsys):
    import torch

    fast = [*TINY[:2], "--train-size", "32", "--test-size", "2", "--eval-every", "100",
            "--batch-size", "8", "--min-len", "2", "--max-len", "4",
            "--no-progress", "--no-figure"]  # fmt: skip
    run(capsys, "train", "copy", *fast, "--steps", "4", "--out", str(tmp_path / "a"))
    run(capsys, "train", "copy", *fast, "--steps", "2", "--out", str(tmp_path / "b"))
    run(
        capsys,
        "train",
        "copy",
        *fast,
        "--steps",
        "4",
        "--out",
        str(tmp_path / "b"),
        "--resume",
    )
    a = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=False)
    b = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert a["step"] == b["step"] == 4
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


class _RunsCode:
    """Unpickling this calls os.system: what a malicious checkpoint would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("kind", ["missing", "text", "foreign", "malicious"])
def test_a_bad_checkpoint_is_one_line_on_stderr_and_exit_2(tmp_path, capsys, kind):
    """Each is one line on stderr and exit status 2, from ``main`` in this process
    (``_in_process``: no torch to import again), any warning counted as a line of
    stderr. The malicious pickle's code would touch a file: it never exists."""
    path, marker = tmp_path / "checkpoint.pt", tmp_path / "code-ran"
    if kind == "text":
        path.write_text("not a checkpoint\n")
    elif kind == "foreign":
        torch.save({"weight": torch.ones(2)}, path)
    elif kind == "malicious":
        torch.save({"model": _RunsCode(marker)}, path)
    done = _in_process(capsys, "evaluate", str(path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and str(path) in lines[0]
    assert not marker.exists()  # the pickle was refused, never run


def test_checkpoints_are_read_with_weights_only(tmp_path, monkeypatch):
    from named_transformer.workflows import training

    seen = []
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(training.torch, "load", spy)
    state = training.load_checkpoint(CHECKPOINT_0_1_0)
    assert seen == [True] and state["step"] == 3


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "named_transformer", *argv],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def _in_process(capsys, *argv: str) -> subprocess.CompletedProcess[str]:
    """``main(argv)`` in this process, as :func:`_cli` would report it: the exit
    status, stdout, and stderr with every warning raised (which a process would
    print there) appended."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = cli.main(list(argv))
    captured = capsys.readouterr()
    said = "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return subprocess.CompletedProcess(list(argv), code, captured.out,
                                       captured.err + said)  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error: " in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "cpy"], "invalid choice: 'cpy'"),
        (["train", "copy", "--steps", "many"], "invalid int value: 'many'"),
        (["train", "copy", "--size", "huge"], "invalid choice: 'huge'"),
        (["decode", "x.pt", "1", "--method", "best"], "invalid choice: 'best'"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_on_stderr_and_exit_2(argv, says):
    """The parser's refusals, each in a ``python -m named_transformer`` process (they
    come before torch is imported: a process costs little). A model kind that does not
    fit the task is refused after the parser: ``test_a_mismatched_model_kind...``."""
    assert says in _one_line_error(_cli(*argv))


def _rewritten_checkpoint(tmp_path: Path, change) -> Path:
    state = torch.load(CHECKPOINT_0_1_0, weights_only=True)
    change(state)
    torch.save(state, tmp_path / "checkpoint.pt")
    return tmp_path / "checkpoint.pt"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda s: s["meta"]["spec"].update(task="translate"),
         "task 'translate', which this version does not know"),
        (lambda s: s.update(format=9), "was written by a newer named_transformer"),
        (lambda s: s["meta"]["spec"]["config"].update(layer=64),
         "its weights do not fit the encoder-decoder model"),
    ],
)  # fmt: skip
def test_a_checkpoint_of_another_task_or_version_is_one_line(
    tmp_path, capsys, change, says
):
    """One line and exit status 2, from ``main`` in this process (``_in_process``)."""
    path = _rewritten_checkpoint(tmp_path, change)
    done = _in_process(capsys, "evaluate", str(path), "--no-figure")
    assert says in _one_line_error(done)


def test_decode_warns_about_what_the_model_cannot_read(tmp_path, capsys):
    checkpoint = str(CHECKPOINT_0_1_0)
    assert cli.main(["decode", checkpoint, "31x4y1", "--no-figure"]) == 0
    captured = capsys.readouterr()
    assert "warning: not in the vocabulary of copy, so dropped: 'x' 'y'" in captured.err
    assert "the input has 4 tokens but the model was trained on 3 to 5" not in (
        captured.err
    )
    assert cli.main(["decode", checkpoint, "31415926", "--no-figure"]) == 0
    captured = capsys.readouterr()
    assert "the input has 8 tokens but the model was trained on 3 to 5" in captured.err
    assert not list(Path(CHECKPOINT_0_1_0).parent.glob("attention-*.png"))


def test_help_shows_the_defaults():
    text = cli.parser().format_help()
    train = _cli("train", "--help").stdout
    assert "train" in text
    assert "(default: 64)" in train and "(default: sinusoidal)" in train
    assert "copy       size tiny" in train  # the recipes' table
    decode = _cli("decode", "--help").stdout
    assert "beam width (default: 4)" in decode


def test_the_default_train_copy_learns_the_task(tmp_path, capsys):
    """The first command a newcomer runs, ``train copy``, trains with the copy recipe,
    and that recipe learns the task.

    1. With no flags the command's settings are the recipe, ``RECIPES["copy"]`` over
       ``RunSettings``' defaults: sources of 10 to 20 digits (the page's table), the
       tiny model, dropout 0, factor 0.3, at most 4,000 steps, early stop once 1,000
       validation items are right 3 times in a row.
    2. The same command, with only the sources shortened to 2 to 4 digits (a smaller
       instance of the task; everything else the recipe's) and shape checks off
       (they check values, never change them: 8% of the run's CPU), learns it: 100.0% of
       1,000 held-out items (99.9%, one item, is allowed: a run on a crowded machine
       has once ended there, for a reason not found yet), stopped early by the
       recipe's rule, before its 4,000 steps.

    The full-length run is not repeated here (it took most of this file's time): that
    10 to 20 digits are learned within 4,000 steps is no longer proven on every run."""
    from named_transformer.workflows.recipes import RECIPES
    from named_transformer.workflows.runner import RunSettings

    default = cli.run_settings(cli.parser().parse_args(["train", "copy"]))
    assert default == RunSettings().replace(**RECIPES["copy"])
    assert (default.min_len, default.max_len, default.size) == (10, 20, "tiny")
    assert (default.eval_size, default.patience, default.target) == (1000, 3, 1.0)
    out = tmp_path / "copy"
    argv = ["train", "copy", "--min-len", "2", "--max-len", "4", "--out", str(out),
            "--no-figure", "--no-progress", "--no-shape-checks"]  # fmt: skip
    assert cli.run_settings(cli.parser().parse_args(argv)) == default.replace(
        min_len=2, max_len=4
    )
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert re.search(r"held-out exact match: (100\.0|99\.9)%", printed), printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["held_out"] >= 0.999 and metrics["steps"] < 4000


PACKAGE = Path(cli.__file__).resolve().parents[1]


def _imported_modules(module: str) -> set[str]:
    """The package's modules that ``module``'s source imports, at any depth of its
    body (module level or inside a function)."""
    path = PACKAGE.parent / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found |= {name for name in [node.module, *names] if _in_package(name)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if _in_package(alias.name)}
    return found


def _in_package(name: str) -> bool:
    path = PACKAGE.parent / Path(*name.split("."))
    return name.startswith("named_transformer") and (
        path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    )


def test_the_cli_and_the_command_modules_do_not_import_each_other():
    """The command modules may import the CLI (``require``); nothing the CLI imports,
    directly or through other modules, imports the CLI back. (The package's start-up
    hook is left out: under ``python -m`` it is the command line's entry, parsing before
    the package's imports, not a module the CLI imports for its work.) That importing
    the CLI loads none of them at run time is checked in the fresh process of
    ``test_first_minutes.py::test_importing_the_package_imports_neither...``."""
    start = "named_transformer.workflows.cli"
    reached, todo = {"named_transformer._startup"}, [start]
    while todo:
        for name in _imported_modules(todo.pop()) - reached:
            reached.add(name)
            todo.append(name)
    assert start not in reached
    assert not reached & set(cli.COMMAND_MODULES)


def test_command_modules_add_their_subcommands_in_order():
    text = cli.parser().format_help()
    listed = re.search(r"\{([a-z,]+)\}", text)[1].split(",")
    assert listed == ["train", "evaluate", "decode", "exercises", "embed",
                      "attention", "chat", "generate", "export", "rasp"]  # fmt: skip
    before = list(cli.COMMAND_MODULES)
    cli.register_commands("named_transformer.rasp.commands")  # already there
    assert cli.COMMAND_MODULES == before


def test_train_builds_its_run_settings_once_from_the_recipe_and_the_flags():
    from named_transformer.workflows.runner import RunSettings

    args = cli.parser().parse_args(["train", "copy", "--paper", "--steps", "7",
                                    "--min-len", "3", "--seed", "5"])  # fmt: skip
    expected = RunSettings.recipe("copy", paper=True, steps=7, min_len=3, seed=5)
    assert cli.run_settings(args) == expected
    # the flags' own defaults are RunSettings' defaults
    plain = cli.run_settings(cli.parser().parse_args(["train", "sort"]))
    assert plain == RunSettings.recipe("sort")


def test_a_bad_setting_is_one_line_naming_it(capsys):
    assert cli.main(["train", "copy", "--min-len", "0", "--no-figure"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: RunSettings.min_len must be >= 1 and <= max_len, got min_len=0, "
        "max_len=20"
    )
