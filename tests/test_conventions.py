"""The project's code conventions, read from the package's AST.

Axes move through einops only; every public function and ``forward`` that touches a
tensor carries jaxtyping annotations and is ``@checked``; every axis name is in the
vocabulary. A line may opt out of the raw-operation rule with ``# allow-raw: <why>``.
"""

import ast
import re
from pathlib import Path

import pytest

from named_transformer.axes import AXES

PACKAGE = Path(__file__).resolve().parents[1] / "named_transformer"
FILES = sorted(PACKAGE.rglob("*.py"))

RAW_METHODS = {
    "view",
    "reshape",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "flatten",
}
RAW_TORCH = {
    "matmul",
    "einsum",
    "bmm",
    "mm",
    "mv",
    "tensordot",
    "cat",
    "stack",
    "flatten",
}
RAW_ATTRIBUTES = {"T", "mT"}
JAXTYPING = re.compile(
    r"\b(Float|Int|Bool|Shaped|Num|Integer|Real|Inexact|Complex|UInt)\["
)
# the fast softmax beneath the named one: PyTorch's softmax over seq, and the rows
# with a key to attend
DIM_KEYWORD_ALLOWED = {("fast.py", "normalise"), ("fast.py", "softmax_of_alive_rows")}
# modules whose functions run beneath a checked equation (core/fast.py: the speed
# level, which the equation it stands in for checks once per call; a check of its own
# would pay twice)
CHECKED_ABOVE = {"fast.py"}


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def _annotations_of(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, ast.FunctionDef) and node.returns is not None:
        return [node.returns]
    return []


def raw_operations(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    functions = {
        line: node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
    }
    annotations = {
        id(inner)
        for node in ast.walk(tree)
        for annotation in _annotations_of(node)
        for inner in ast.walk(annotation)
    }
    found = []

    def flag(node: ast.AST, what: str) -> None:
        span = range(
            node.lineno, (getattr(node, "end_lineno", None) or node.lineno) + 1
        )
        if not any("# allow-raw:" in lines[i - 1] for i in span):
            found.append(f"{path.name}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            flag(node, "@")
        elif isinstance(node, ast.Attribute) and node.attr in RAW_ATTRIBUTES:
            flag(node, f".{node.attr}")
        elif (
            isinstance(node, ast.Subscript)
            and id(node) not in annotations
            and any(
                isinstance(n, ast.Constant) and n.value is None
                for n in (
                    node.slice.elts
                    if isinstance(node.slice, ast.Tuple)
                    else [node.slice]
                )
            )
        ):
            flag(node, "None-indexing")
        elif isinstance(node, ast.Call):
            name = dotted(node.func)
            if isinstance(node.func, ast.Attribute) and node.func.attr in RAW_METHODS:
                flag(node, f".{node.func.attr}()")
            if name in {f"torch.{op}" for op in RAW_TORCH} | {"torch.Tensor.matmul"}:
                flag(node, f"{name}()")
            if name.split(".")[-1] in {"Linear", "linear"} and name not in {
                "Linear",
                "linear",
            }:
                flag(node, f"{name}()")
            if any(k.arg == "dim" for k in node.keywords):
                if (path.name, functions.get(node.lineno)) not in DIM_KEYWORD_ALLOWED:
                    flag(node, f"{name}(dim=...)")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_raw_axis_operations(path):
    found = raw_operations(path)
    assert not found, "raw operations without '# allow-raw: <why>':\n" + "\n".join(
        found
    )


def public_callables(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node.name, node
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    yield f"{node.name}.forward", item


def bare_tensor(annotation: str) -> bool:
    """A ``Tensor`` with no axis names (a callable's signature,
    ``Callable[[Tensor], ...]``, is fine)."""
    return (
        "Tensor" in annotation
        and "Callable" not in annotation
        and not JAXTYPING.search(annotation)
    )


def annotation_problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    problems = []
    if path.name in CHECKED_ABOVE:
        return problems
    for name, function in public_callables(tree):
        arguments = [
            *function.args.posonlyargs,
            *function.args.args,
            *function.args.kwonlyargs,
        ]
        arguments = [a for a in arguments if a.arg not in {"self", "cls"}]
        annotations = [
            ast.unparse(a.annotation) if a.annotation else "" for a in arguments
        ]
        returns = ast.unparse(function.returns) if function.returns else ""
        touches_tensors = any("Tensor" in text for text in [*annotations, returns])
        if name.endswith(".forward") or touches_tensors:
            decorators = {ast.unparse(d) for d in function.decorator_list}
            if "checked" not in decorators:
                problems.append(f"{path.name}: {name} is not @checked")
        for argument, text in zip(arguments, annotations, strict=True):
            if bare_tensor(text):
                problems.append(f"{path.name}: {name}({argument.arg}) is a bare Tensor")
            if name.endswith(".forward") and not text:
                problems.append(
                    f"{path.name}: {name}({argument.arg}) has no annotation"
                )
        if touches_tensors or name.endswith(".forward"):
            if not returns:
                problems.append(f"{path.name}: {name} has no return annotation")
            elif bare_tensor(returns):
                problems.append(f"{path.name}: {name} returns a bare Tensor")
    return problems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_public_functions_and_forwards_are_annotated_and_checked(path):
    problems = annotation_problems(path)
    assert not problems, "\n".join(problems)


def axis_names(path: Path) -> set[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and JAXTYPING.match(ast.unparse(node))
            and isinstance(node.slice, ast.Tuple)
            and len(node.slice.elts) == 2
            and isinstance(node.slice.elts[1], ast.Constant)
            and isinstance(node.slice.elts[1].value, str)
        ):
            for token in node.slice.elts[1].value.split():
                for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", token):
                    names.add((node.lineno, name))
    return names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_axis_name_is_in_the_vocabulary(path):
    unknown = sorted(
        f"{path.name}:{line}: {name}"
        for line, name in axis_names(path)
        if name not in AXES
    )
    assert not unknown, (
        "axis names missing from named_transformer.axes.AXES:\n" + "\n".join(unknown)
    )


ROOT = PACKAGE.parent
# An axis in an equation: \mathsf{seq'}, \ndot{heads, val}, \nfun{seq}{softmax} (one
# backslash in a raw docstring, two in a plain one).
EQUATION_AXES = re.compile(r"\\{1,2}(?:mathsf|ndot|nfun)\{([^{}]*)\}")


def equation_files() -> list[Path]:
    return sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", *FILES])


def equation_axis_names(text: str) -> list[tuple[int, str]]:
    """Every axis name an equation writes, with its line: the symbols of ``AXES``
    spell primes (``seq'``) and escaped underscores (``kv\\_heads``)."""
    names = []
    for match in EQUATION_AXES.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        for name in match[1].split(","):
            names.append((line, re.sub(r"\\+_", "_", name.strip())))
    return names


def _spellings() -> set[str]:
    symbols = {
        name for axis in AXES.values() for _, name in equation_axis_names(axis.symbol)
    }
    return set(AXES) | symbols


@pytest.mark.parametrize(
    "path", equation_files(), ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_every_axis_in_an_equation_is_in_the_vocabulary(path):
    known = _spellings()
    unknown = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for line, name in equation_axis_names(path.read_text())
        if name not in known
    ]
    assert not unknown, (
        "axis names in equations missing from named_transformer.axes.AXES:\n"
        + "\n".join(unknown)
    )


def test_the_equation_scan_reads_every_spelling():
    text = (
        "$\\mathsf{seq'}$ $A \\ndot{heads, val} B$ $\\nfun{layer}{mean} X$\n"
        "$\\mathsf{kv\\_heads}$ and '\\\\mathsf{topics}' '\\\\mathsf{kv\\\\_heads}'"
    )
    assert equation_axis_names(text) == [
        (1, "seq'"), (1, "heads"), (1, "val"), (1, "layer"), (2, "kv_heads"),
        (2, "topics"), (2, "kv_heads"),
    ]  # fmt: skip
    assert {"seq'", "kv_heads", "memory_v", "seq_q"} <= _spellings()
    assert "topics" not in _spellings()


def test_the_vocabulary_documents_every_name():
    for name, axis in AXES.items():
        assert re.fullmatch(r"[a-z_]+", name)
        assert axis.symbol and axis.meaning, name


def test_the_checker_catches_what_it_should(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\n"
        "def f(x: torch.Tensor) -> torch.Tensor:\n"
        "    y = x.view(2, 3) @ x.T\n"
        "    z = x[None].sum(dim=0)  # allow-raw: a test of the escape hatch\n"
        "    return torch.einsum('ij->ji', y)\n"
    )
    assert len(raw_operations(sample)) == 4  # .view, @, .T, torch.einsum
    assert len(annotation_problems(sample)) == 3  # not checked, bare arg, bare return


def test_no_docstring_holds_a_control_character():
    """A non-raw docstring turns TeX's ``\\beta`` into a backspace and ``\\frac``
    into a form feed, which KaTeX then refuses on the API pages: write ``r\"\"\"``."""
    import importlib
    import inspect
    import pkgutil

    import named_transformer

    control = {"\x07", "\x08", "\x0b", "\x0c"}
    found = []
    for info in pkgutil.walk_packages(named_transformer.__path__, "named_transformer."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        objects = [("", module), *vars(module).items()]
        for name, obj in objects:
            members = [(name, obj)]
            if inspect.isclass(obj):
                members += [(f"{name}.{n}", o) for n, o in vars(obj).items()]
            for label, member in members:
                doc = getattr(member, "__doc__", None)
                if isinstance(doc, str) and control & set(doc):
                    found.append(f"{info.name}:{label}")
    assert not found, f"docstrings with control characters: {sorted(set(found))}"
