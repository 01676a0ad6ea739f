"""The modules of ``django_pgjobs`` import each other without a cycle, function-local imports and
``if TYPE_CHECKING:`` imports included: a cycle broken by an import inside a function, or hidden
from the interpreter behind ``TYPE_CHECKING``, still means neither module can be understood (or
changed) without the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import django_pgjobs

PACKAGE = Path(django_pgjobs.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, at any depth (functions, methods, ``try``),
    ``if TYPE_CHECKING:`` blocks included, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from . import db` imports the module django_pgjobs.db, not a name of the package
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else base for t in targets]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` names a.b.c or a package
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, modules) for path in paths}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "django_pgjobs.conf" in graph and graph["django_pgjobs.db"]  # the scan sees modules
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_scan_sees_function_local_type_checking_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .sub import b\n")
    (package / "sub" / "b.py").write_text("from .. import a\n")
    (package / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\n"
    )
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        graph = import_graph()
    finally:
        PACKAGE = saved
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]


def test_every_public_name_of_the_package_is_there():
    """``django_pgjobs`` imports its public names when first asked for (its ``_LAZY`` table)."""
    for name in django_pgjobs.__all__:
        assert getattr(django_pgjobs, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        django_pgjobs.nothing_here  # noqa: B018


def test_no_function_in_the_package_is_over_60_lines():
    """Long functions hide the steps they take (migrations, generated, aside)."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines})")
    assert long == []
