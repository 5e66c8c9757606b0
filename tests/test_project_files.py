"""The files at the repository root that say what the project is: its licence and how
to cite it, in step with pyproject.toml and the changelog.

That pyproject's version is the changelog's top entry is checked in test_layout.py.
"""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

MIT_BODY = """\
Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _top_changelog_entry() -> tuple[str, str]:
    """(version, date) of the changelog's newest entry."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    top = re.search(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", changelog, re.M)
    assert top is not None, "CHANGELOG.md has no dated version entry"
    return top[1], top[2]


def test_the_licence_is_mit_as_pyproject_declares():
    assert _project()["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text()
    heading, copyright_line, body = text.split("\n\n", 2)
    assert heading == "MIT License"
    authors = r"Copyright \(c\) \d{4} the named_transformer authors"
    assert re.fullmatch(authors, copyright_line)
    assert body == MIT_BODY


def test_citation_cff_is_valid_yaml_in_step_with_the_release():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    version, date = _top_changelog_entry()
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] == "software"
    assert citation["version"] == _project()["version"] == version
    assert str(citation["date-released"]) == date
    assert citation["license"] == "MIT"
    assert citation["authors"] == [{"name": "the named_transformer authors"}]
    for field in ("title", "message", "abstract"):
        assert isinstance(citation[field], str) and citation[field].strip(), field
    keywords = citation["keywords"]
    assert keywords and all(isinstance(keyword, str) for keyword in keywords)
