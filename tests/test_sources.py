"""The repository stands alone: it cites its course texts and papers by name.

The pages, docstrings, scripts and tests refer to the course texts by their names,
linked to (or, in docstrings, matching) the entries of the Sources page, never by
numbered working labels or by files that live outside the repository. The Sources page
names each text as it identifies itself and gives the papers' arXiv identifiers.
"""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "docs" / "reference" / "sources.md"
SUFFIXES = {".py", ".md", ".txt", ".yml", ".yaml", ".toml", ".json", ".css", ".js"}

# Working labels of the course texts and files outside the repository.
FORBIDDEN = re.compile(
    r"(?<![a-z])seeds?[ _]0[1-5](?!\d)|EQUATIONS\.md|DESIGN\.md|\.\./shared",
    re.IGNORECASE,
)

TEXTS = {
    "bloem": ["Peter Bloem", "Transformers from scratch", "peterbloem.nl"],
    "chai": ["Yekun Chai", "chai2019attn-summary"],
    "cars": ["scoring functions", "five", "car"],
    "nyu": [
        "Attention and the Transformer",
        "NYU Deep Learning",
        "Alfredo Canziani",
        "Francesca Guiso",
        "21 April 2020",
    ],
    "dataflowr": ["dataflowr", "Marc Lelarge", "Module 12"],
}
PAPERS = {
    "vaswani2017": "1706.03762",
    "chiang2023": "2102.13196",
    "bahdanau2015": "1409.0473",
    "luong2015": "1508.04025",
    "shaw2018": "1803.02155",
    "cho2014": "1406.1078",
    "sutskever2014": "1409.3215",
    "raffel2015": "1512.08756",
    "wu2016": "1609.08144",
    "press2017": "1608.05859",
    "xiong2020": "2002.04745",
}
ANCHOR = re.compile(r"\{#([\w-]+)\}")
LINK = re.compile(r"\]\((?:\.\./)*(?:reference/)?sources\.md#([\w-]+)\)")


def _files():
    yield ROOT / "README.md"
    for top in ("named_transformer", "docs", "tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "__pycache__" not in path.parts
                and path != Path(__file__).resolve()
            ):
                yield path


def _entries() -> dict[str, str]:
    """Each entry of the Sources page (a term with an anchor and its definition)."""
    text = SOURCES.read_text(encoding="utf-8")
    parts = ANCHOR.split(text)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_nothing_refers_to_working_labels_or_outside_files():
    hits = []
    for path in _files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "cite the course texts by name (docs/reference/sources.md):\n" + (
        "\n".join(hits)
    )


def test_sources_page_names_the_five_course_texts():
    entries = _entries()
    for anchor, names in TEXTS.items():
        assert anchor in entries, f"no entry {{#{anchor}}} on the Sources page"
        for name in names:
            assert name in entries[anchor], f"entry {anchor} does not say {name!r}"


def test_sources_page_gives_the_papers_arxiv_ids():
    entries = _entries()
    for anchor, arxiv in PAPERS.items():
        assert anchor in entries, f"no entry {{#{anchor}}} on the Sources page"
        assert f"arXiv:{arxiv}" in entries[anchor], f"{anchor}: arXiv:{arxiv} missing"
    assert "Maas" in entries["maas2011"] and "ACL 2011" in entries["maas2011"]


def test_links_to_the_sources_page_reach_an_entry():
    anchors = set(_entries())
    for path in sorted((ROOT / "docs").rglob("*.md")):
        for anchor in LINK.findall(path.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{path.relative_to(ROOT)}: no entry #{anchor}"


def test_sources_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = yaml.load(config, Loader=_IgnoreTags)["nav"]
    assert "reference/sources.md" in str(nav)


class _IgnoreTags(yaml.SafeLoader):
    """mkdocs.yml uses tags such as ``!relative``; their values do not matter here."""


_IgnoreTags.add_multi_constructor("!", lambda loader, suffix, node: None)
