"""The figure script runs in quick mode; every figure a page links is committed.

Figures of long runs (training curves, alignments) may come from their own scripts under
docs/scripts/; they are committed like the rest, and every image a page shows must be
one that a script under docs/scripts/ writes.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCRIPTS = DOCS / "scripts"
SCRIPT = SCRIPTS / "make_figures.py"
REGISTRIES = ("EXPERIMENTS", "FIGURE_MAKERS")  # names of what a docs script draws
FIGURE_LINK = re.compile(r"\]\((?:\.\./)*figures/(?P<name>[\w./-]+?)\.(?:png|svg)\)")
# every image a page shows: Markdown links (an optional title after the path) and <img>
IMAGE_LINK = re.compile(
    r"!\[[^\]]*\]\(\s*<?(?P<md>[^)\s>]+\.(?:png|svg))"
    r"|<img\b[^>]*?\bsrc=[\"'](?P<html>[^\"']+\.(?:png|svg))",
    re.IGNORECASE,
)


def linked_figures() -> set[str]:
    return {
        m["name"]
        for page in DOCS.rglob("*.md")
        for m in FIGURE_LINK.finditer(page.read_text())
    }


def load_script(path: Path = SCRIPT):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shown_images() -> dict[Path, list[str]]:
    """Each image file the site's pages show, with the pages that show it."""
    shown: dict[Path, list[str]] = {}
    for page in DOCS.rglob("*.md"):
        if page.is_relative_to(SCRIPTS):  # tables the pages include, not pages
            continue
        for match in IMAGE_LINK.finditer(page.read_text()):
            target = match["md"] or match["html"]
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            shown.setdefault(path, []).append(page.relative_to(DOCS).as_posix())
    return shown


def script_outputs() -> set[str]:
    """The file names (or stems) the docs scripts write: their string literals, the
    names of their ``EXPERIMENTS`` and ``FIGURE_MAKERS`` registries, and each f-string
    with a literal prefix (``f"attention-{n}.png"``) filled with every name of its own
    script's registries."""
    outputs: set[str] = set()
    for script in sorted(SCRIPTS.glob("*.py")):
        tree = ast.parse(script.read_text())
        templates, in_fstrings = [], set()  # (prefix, suffix) around one placeholder
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                in_fstrings.update(id(part) for part in node.values)
                texts = [
                    p.value if isinstance(p, ast.Constant) else None
                    for p in node.values
                ]
                # placeholders after a literal prefix: f"{name}.png" is no template
                if texts[0] and None in texts:
                    templates.append(texts)
        outputs |= {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in in_fstrings
        }
        source = script.read_text()
        if not any(f"{name}: dict" in source for name in REGISTRIES):
            continue
        module = load_script(script)
        registered = {n for r in REGISTRIES for n in getattr(module, r, {})}
        outputs |= registered
        for texts in templates:  # the first placeholder is a registered name
            first = texts.index(None)
            head, tail = "".join(texts[:first]), texts[first + 1 :]
            pattern = "".join(r"[\w.-]+" if t is None else re.escape(t) for t in tail)
            outputs |= {f"re:{re.escape(head + name)}{pattern}" for name in registered}
    return outputs


def written_by_a_script(name: str, outputs: set[str]) -> bool:
    """``name`` (or its stem) is a literal output, or fills an f-string template."""
    stem = Path(name).stem
    patterns = [o.removeprefix("re:") for o in outputs if o.startswith("re:")]
    return bool({name, stem} & outputs) or any(
        re.fullmatch(p, n) for p in patterns for n in (name, stem)
    )


def test_quick_mode_draws_every_figure(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    script = load_script()  # in-process: torch is already imported, which saves seconds
    written = script.main(["--quick", "--out", str(tmp_path)])
    drawn = {p.stem for p in tmp_path.glob("*.png")}
    assert drawn == set(script.FIGURE_MAKERS) == {p.stem for p in written}
    for path in written:
        assert path.read_bytes().startswith(b"\x89PNG"), path


def test_linked_figures_are_committed() -> None:
    figures = DOCS / "figures"
    missing = [name for name in linked_figures() if not any(figures.glob(f"{name}.*"))]
    assert not missing, (
        f"pages link figures that are not committed under docs/figures/: {missing}; "
        "draw them with their script (docs/scripts/make_figures.py or the "
        "experiment's own) and commit them"
    )


def test_shown_images_are_committed_and_drawn_by_a_script() -> None:
    """Every image a page shows is under docs/figures/ and written by a docs script."""
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    figures = (DOCS / "figures").resolve()
    shown = shown_images()
    assert shown, "no page shows an image: the link pattern is out of date"
    outside = {
        str(path): pages
        for path, pages in shown.items()
        if not (path.is_relative_to(figures) and path.is_file())
    }
    assert not outside, f"images missing or outside docs/figures/: {outside}"
    outputs = script_outputs()
    orphans = {
        path.relative_to(figures).as_posix(): pages
        for path, pages in shown.items()
        if not written_by_a_script(path.name, outputs)
    }
    assert not orphans, (
        f"pages show figures that no script under docs/scripts/ writes: {orphans}; "
        "draw every figure with a script (make_figures.py's FIGURE_MAKERS, or the "
        "experiment's own script)"
    )


def test_plot_functions_check_shapes() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    import matplotlib

    matplotlib.use("Agg")
    from jaxtyping import TypeCheckError

    from named_transformer import plot

    ax = plot.attention_heatmap(torch.rand(3, 5), ["a", "b", "c"], list("vwxyz"))
    assert len(ax.texts) == 15  # one annotation per weight
    # the axes named in the library's vocabulary, the tokens as ticks, a colour bar
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("seq_q (queries)", "seq (keys)")
    assert [t.get_text() for t in ax.get_xticklabels()] == list("vwxyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert len(ax.figure.axes) == 2  # the heatmap and its colour bar
    ax = plot.line_plot([1, 2, 3], {"a": torch.tensor([1.0, 2.0, 3.0]), "b": [3, 2, 1]})
    assert len(ax.lines) == 2
    ax = plot.table_heatmap(torch.randn(4, 6))
    assert ax.images[0].get_array().shape == (4, 6)
    with pytest.raises(TypeCheckError, match="weights"):
        plot.attention_heatmap(torch.rand(2, 3, 4))
    import matplotlib.pyplot as plt

    plt.close("all")


def test_plot_options_are_one_object_or_its_fields_one_by_one() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is in the docs extra")
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from named_transformer import plot

    def png(function, *args, **kwargs) -> bytes:
        ax = function(*args, **kwargs)
        buffer = io.BytesIO()
        ax.figure.savefig(buffer, format="png", metadata={"Software": None})
        plt.close("all")
        return buffer.getvalue()

    weights, keys = torch.rand(3, 4), list("wxyz")
    fields = {"annotate": False, "cmap": "magma", "vmin": -1.0, "colorbar": False}
    options = plot.HeatmapOptions(**fields)
    assert png(plot.attention_heatmap, weights, list("abc"), keys, **fields) == png(
        plot.attention_heatmap, weights, list("abc"), keys, options=options
    )
    x, curves = [1, 2, 4], {"a": [1.0, 2.0, 3.0], "b": [3.0, 2.0, 1.0]}
    fields = {"xlabel": "β", "logx": True, "styles": {"b": {"linestyle": "--"}}}
    assert png(plot.line_plot, x, curves, **fields) == png(
        plot.line_plot, x, curves, options=plot.LinePlotOptions(**fields)
    )
    # a keyword goes over the object's field
    ax = plot.line_plot(x, curves, options=plot.LinePlotOptions(**fields), xlabel="t")
    assert ax.get_xlabel() == "t"
    plt.close("all")
    with pytest.raises(TypeError, match="unexpected keyword argument 'cmp'"):
        plot.attention_heatmap(weights, cmp="magma")
    with pytest.raises(ValueError, match=r"HeatmapOptions\.vmax must be > vmin"):
        plot.HeatmapOptions(vmin=1.0, vmax=1.0)
