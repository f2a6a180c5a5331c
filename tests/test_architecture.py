"""The folder layout is the architecture: these tests read every module's imports (with `ast`,
never importing them) and fail when a change ties the layers together.

- No import circle anywhere in the package (imports made at module level; imports inside a
  function or under `if TYPE_CHECKING:` are deliberate deferrals and do not count).
- `run/` never imports the lint: the launcher and the ranks work without libcst.
- The lint never imports `run/` at module level: `ddpcheck lint` starts without torch.
- `trace/` imports neither the lint nor `run/` (the command hands it a linting function), and
  never torch: it reads a cluster's dumps on a machine without it.
- Code that runs inside each rank (`run/rank/`, `run/checks/`) and code that runs in the launcher
  (`run/launcher/`) do not import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddpcheck"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _eager_imports(name: str, path: Path) -> set[str]:
    """The package's modules that `name` imports when it is imported."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" in ast.unparse(node.test):
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join(package + ([node.module] if node.module else []))
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
                out.update(submodules)
                if len(submodules) < len(node.names):
                    out.add(base)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _eager_imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in GRAPH:
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _edges(source: str, target: str) -> list[str]:
    return sorted(f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith(source)
                  for d in deps if d.startswith(target))


def test_the_reader_sees_the_package():
    # Guards the guard: an empty graph would pass every test below.
    assert len(MODULES) > 100
    assert "ddpcheck.lint.model.semantic" in GRAPH["ddpcheck.lint.model"]
    assert "ddpcheck.run.registry" in GRAPH["ddpcheck.run.checks.hang"]


def test_no_import_circle():
    assert _cycles() == []


def test_a_planted_circle_is_found(monkeypatch):
    # The model package imports its semantic module; make that module import the package back.
    monkeypatch.setitem(GRAPH, "ddpcheck.lint.model.semantic",
                        GRAPH["ddpcheck.lint.model.semantic"] | {"ddpcheck.lint.model"})
    assert any({"ddpcheck.lint.model", "ddpcheck.lint.model.semantic"} <= set(c) for c in _cycles())


@pytest.mark.parametrize(("source", "target"), [
    ("ddpcheck.run", "ddpcheck.lint"),
    ("ddpcheck.lint", "ddpcheck.run"),
    ("ddpcheck.run.rank", "ddpcheck.run.launcher"),
    ("ddpcheck.run.checks", "ddpcheck.run.launcher"),
    ("ddpcheck.run.launcher", "ddpcheck.run.rank"),
    ("ddpcheck.run.launcher", "ddpcheck.run.checks"),
    ("ddpcheck.trace", "ddpcheck.lint"),
    ("ddpcheck.trace", "ddpcheck.run"),
    ("ddpcheck.lint", "ddpcheck.trace"),
    ("ddpcheck.run", "ddpcheck.trace"),
])
def test_layers_do_not_import_each_other(source, target):
    assert _edges(source, target) == []


def test_trace_never_imports_torch():
    imported = {n for path in (PACKAGE / "trace").rglob("*.py")
                for node in ast.walk(ast.parse(path.read_text()))
                for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                          [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}
    assert not {n for n in imported if n == "torch" or n.startswith("torch.")}
