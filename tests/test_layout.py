"""The package's floors: every module imports only from its own floor or lower ones, no two
modules import each other (directly or round a longer circle), and no module outgrows its
size limit.  The floors, lowest first, are listed in docs/architecture.md."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_entropy"

#: top-level name inside the package -> floor (0 lowest)
FLOORS = {
    "version": 0, "errors": 0, "files": 0, "progress": 0, "checkpoint": 0, "numpy_compat": 0,
    "wheelhouse": 0,
    "scan": 1, "cogs": 1,
    "data": 2, "modules": 2, "models": 2, "criterions": 2, "optim": 2, "tasks": 2,
    "analysis": 3,
    "experiments": 4,
    "cli": 5,
}
MAX_LINES = 500
MAX_CLI_LINES = 250


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")


def dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path):
    """Package modules that ``path`` imports anywhere (module level or inside functions), as
    dotted names, with the line of each import."""
    name = dotted(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("fairseq_entropy"):
                yield node.lineno, target
                for alias in node.names:  # `from . import scan` names a module
                    yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fairseq_entropy"):
                    yield node.lineno, alias.name


def existing(target: str):
    """The package module ``target`` names, or None (a function or class imported by name)."""
    rel = Path(*target.split(".")[1:])
    for p in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if target != "fairseq_entropy" and p.is_file():
            return target
    return None


def floor(target: str):
    parts = target.split(".")
    return FLOORS.get(parts[1]) if len(parts) > 1 else None


def test_every_top_level_module_has_a_floor():
    names = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in modules()}
    assert names - {"__init__"} == set(FLOORS)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_floors(path):
    name = dotted(path)
    if name == "fairseq_entropy":
        return  # the package __init__ registers the components: it stands above them all
    own = floor(name)
    upward = [f"line {line}: {target}" for line, target in imported(path)
              if existing(target) and floor(target) is not None and floor(target) > own]
    assert not upward, f"{name} (floor {own}) imports from higher floors: {upward}"


def test_no_import_circle():
    graph = {}
    for path in modules():
        name = dotted(path)
        if name == "fairseq_entropy":
            continue
        graph[name] = {t for _, t in imported(path)
                       if existing(t) and t != name and t != "fairseq_entropy"
                       and not name.startswith(t + ".")}  # a submodule's own package
    # a package __init__ that only re-imports its submodules is not a circle with them
    for name in graph:
        graph[name] = {t for t in graph[name] if not (t.startswith(name + ".")
                                                      and PACKAGE.joinpath(
                                                          *name.split(".")[1:],
                                                          "__init__.py").is_file())}
    state, stack, circles = {}, [], []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                circles.append(stack[stack.index(m):] + [m])
            elif m in graph and not state.get(m):
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if not state.get(n):
            visit(n)
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_size(path):
    limit = MAX_CLI_LINES if path.parent.name == "cli" else MAX_LINES
    n = len(path.read_text().splitlines())
    assert n <= limit, f"{path.relative_to(PACKAGE)} has {n} lines (limit {limit})"


def test_the_checker_sees_an_upward_and_a_circular_import(tmp_path, monkeypatch):
    """The checks above can fail: a scan module importing analysis is upward, and two modules
    importing each other are a circle."""
    pkg = tmp_path / "fairseq_entropy"
    (pkg / "scan").mkdir(parents=True)
    (pkg / "analysis").mkdir()
    for d in ("", "scan", "analysis"):
        (pkg / d / "__init__.py").write_text("")
    (pkg / "scan" / "a.py").write_text("from ..analysis import b\n")
    (pkg / "analysis" / "b.py").write_text("def f():\n    from ..scan.a import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    a = pkg / "scan" / "a.py"
    assert [t for _, t in imported(a)] == ["fairseq_entropy.analysis",
                                            "fairseq_entropy.analysis.b"]
    assert floor("fairseq_entropy.analysis.b") > floor(dotted(a))
    with pytest.raises(AssertionError, match="higher floors"):
        test_imports_point_down_the_floors(a)
    with pytest.raises(AssertionError, match="import circles"):
        test_no_import_circle()
