"""``python -m named_transformer rasp``: both outputs, the maps, one-line errors."""

from named_transformer.workflows.cli import main


def test_rasp_prints_the_interpreter_and_the_compiled_model(tmp_path, capsys):
    out = tmp_path / "maps.png"
    assert main(["rasp", "sort", "dbcab", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "interpreter: ['a', 'b', 'b', 'c', 'd']" in printed
    assert "compiled:    ['a', 'b', 'b', 'c', 'd']" in printed
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rasp_reads_space_separated_tokens_and_draws_nothing_when_asked(capsys):
    assert main(["rasp", "dyck1", "( ( ) )", "--out", ""]) == 0
    assert "compiled:    [0, 0, 0, 1]" in capsys.readouterr().out


def test_a_bad_program_or_token_is_one_line_and_exit_2(capsys):
    assert main(["rasp", "sorted", "abc"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown RASP program 'sorted'" in error
    assert main(["rasp", "sort", "abz"]) == 2
    assert "token 'z' is not in the vocabulary of 'sort'" in capsys.readouterr().err
    assert main(["rasp", "sort", "abcdabcda"]) == 2
    assert "compiled for at most 8" in capsys.readouterr().err
