"""The folder layout is the architecture: these tests read every module's imports (with `ast`,
never importing them) and fail when a change ties the layers together.

Every import counts, wherever it stands: at module level, inside a function, under
`if TYPE_CHECKING:`. A deferred import hides a circle from Python, not from the design: the two
modules still cannot be understood or changed apart.

- No import circle anywhere in the package, except the known ones listed in KNOWN_CIRCLES, which
  may only shrink.
- `run/` never imports the lint: the launcher and the ranks work without libcst.
- The lint never imports `run/`: `ddpcheck lint` starts without torch.
- The shared base (findings, codes and their catalogue, configuration, reports) imports neither
  half: both halves build on it.
- `trace/` imports neither the lint nor `run/` (the command hands it a linting function), and
  never torch: it reads a cluster's dumps on a machine without it.
- Code that runs inside each rank (`run/rank/`, `run/checks/`) and code that runs in the launcher
  (`run/launcher/`) do not import each other.
- A runtime check is one unit: no probe module of `run/checks/` imports another, and neither the
  helpers they share (`run/checks/_*.py`) nor the rank's code (`run/rank/`) import a probe. What two probes share lives below them; a judge
  that rests on another probe's verdicts asks the registry by the probe's name.
"""

from __future__ import annotations

import ast
import re
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


def _imports(name: str, source: str, *, is_package: bool = False) -> set[str]:
    """The package's modules that `name` imports anywhere in its source."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
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
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _imports(name, path.read_text(encoding="utf-8"), is_package=path.name == "__init__.py")
         for name, path in MODULES.items()}


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


# Circles that exist today, by name, so the debt stays visible. An entry may only shrink: a new
# circle, or a module joining a listed one, fails the test; when one is broken, remove its entry
# (or the modules that left it) so it cannot come back unnoticed. None is left today.
KNOWN_CIRCLES: dict[str, frozenset[str]] = {}


def _unlisted(cycles: list[list[str]]) -> list[list[str]]:
    return [c for c in cycles if not any(set(c) <= known for known in KNOWN_CIRCLES.values())]


def test_no_import_circle_beyond_the_known_ones():
    assert _unlisted(_cycles()) == [], "a new import circle (or a known one grew)"


def test_the_known_circles_are_current():
    # A listed circle that was broken, wholly or in part, is struck off so it cannot return.
    cycles = [set(c) for c in _cycles()]
    stale = {label: sorted(known - set().union(*[c for c in cycles if c <= known]))
             for label, known in KNOWN_CIRCLES.items()}
    assert {label: gone for label, gone in stale.items() if gone} == {}, \
        "these modules left a known circle: remove them from KNOWN_CIRCLES"


def test_a_planted_circle_is_found(monkeypatch):
    # The model package imports its semantic module; make that module import the package back.
    monkeypatch.setitem(GRAPH, "ddpcheck.lint.model.semantic",
                        GRAPH["ddpcheck.lint.model.semantic"] | {"ddpcheck.lint.model"})
    assert any({"ddpcheck.lint.model", "ddpcheck.lint.model.semantic"} <= set(c) for c in _unlisted(_cycles()))


PLACEMENTS = {
    "module": "{statement}\n",
    "function": "def main():\n    {statement}\n",
    "type_checking": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {statement}\n",
    "try": "try:\n    {statement}\nexcept ImportError:\n    pass\n",
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("statement", [
    "from ddpcheck import app", "from . import app", "import ddpcheck.app", "import ddpcheck.app as entry",
    "from ddpcheck.app import main",
])
def test_a_planted_circle_is_found_wherever_the_import_stands(monkeypatch, placement, statement):
    # app imports commands; plant `commands -> app` in each place and form an import can take.
    source = PLACEMENTS[placement].format(statement=statement)
    assert "ddpcheck.commands" in GRAPH["ddpcheck.app"]
    monkeypatch.setitem(GRAPH, "ddpcheck.commands", GRAPH["ddpcheck.commands"] | _imports("ddpcheck.commands", source))
    assert any({"ddpcheck.app", "ddpcheck.commands"} <= set(c) for c in _unlisted(_cycles()))


def _plant_known_circle(monkeypatch) -> None:
    """A circle listed as known: the model package's semantic module imports the package back."""
    monkeypatch.setitem(GRAPH, "ddpcheck.lint.model.semantic",
                        GRAPH["ddpcheck.lint.model.semantic"] | {"ddpcheck.lint.model"})
    monkeypatch.setitem(KNOWN_CIRCLES, "planted", frozenset({"ddpcheck.lint.model", "ddpcheck.lint.model.semantic"}))


def test_a_known_circle_is_tolerated(monkeypatch):
    _plant_known_circle(monkeypatch)
    assert _unlisted(_cycles()) == []


def test_a_known_circle_that_grows_fails(monkeypatch):
    # The values import the package too: a third module joins the listed circle.
    _plant_known_circle(monkeypatch)
    monkeypatch.setitem(GRAPH, "ddpcheck.lint.model.values",
                        GRAPH["ddpcheck.lint.model.values"] | {"ddpcheck.lint.model"})
    assert any("ddpcheck.lint.model.values" in c for c in _unlisted(_cycles()))


def test_a_known_circle_that_was_broken_is_reported(monkeypatch):
    # Listed, but the circle is not there (the import was never planted): the entry is stale.
    monkeypatch.setitem(KNOWN_CIRCLES, "planted", frozenset({"ddpcheck.lint.model", "ddpcheck.lint.model.semantic"}))
    with pytest.raises(AssertionError, match="left a known circle"):
        test_the_known_circles_are_current()


# The semantic model in layers: each part imports only the parts before it, and the hub
# (`semantic.Model`) reaches a part above through a Protocol the part declares.
MODEL_LAYERS = ("values", "graph", "facts", "paths", "semantic")


def test_the_model_is_layered():
    parts = [f"ddpcheck.lint.model.{name}" for name in MODEL_LAYERS]
    upward = [f"{part} -> {dep}" for i, part in enumerate(parts) for dep in sorted(GRAPH[part])
              if dep in parts[i:]]
    assert upward == []


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


SHARED_BASE = ("ddpcheck.findings", "ddpcheck.describe", "ddpcheck.catalog", "ddpcheck.tool_codes",
               "ddpcheck.config", "ddpcheck.errors", "ddpcheck.report")


@pytest.mark.parametrize("half", ["ddpcheck.lint", "ddpcheck.run"])
def test_the_shared_base_imports_neither_half(half):
    assert [edge for base in SHARED_BASE for edge in _edges(base, half)] == []


def test_trace_never_imports_torch():
    imported = {n for path in (PACKAGE / "trace").rglob("*.py")
                for node in ast.walk(ast.parse(path.read_text()))
                for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                          [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}
    assert not {n for n in imported if n == "torch" or n.startswith("torch.")}


def _code_literals(source: str) -> list[tuple[int, str]]:
    """String constants that are a runtime code (`"DDP105"`), at their lines. Prose that names a
    code (a docstring, a help text) is not a code written down as data."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"DDP1\d\d", node.value)]


def test_a_runtime_code_is_written_only_on_its_check():
    # A check's code is written once, on its class in run/checks/; everything else asks the
    # catalogue for it by the check's name (`catalog.code_named`), so a code cannot drift.
    checks = PACKAGE / "run" / "checks"
    found = [f"{path.relative_to(ROOT)}:{line}: {code}" for path in sorted(PACKAGE.rglob("*.py"))
             if checks not in path.parents for line, code in _code_literals(path.read_text(encoding="utf-8"))]
    assert found == []


def test_a_code_literal_is_seen():
    # Guards the guard: the reader finds a code written as data, alone or in a tuple.
    assert _code_literals('HANG = "DDP123"\nPAIR = ("DDP104", "x")\n"""Names DDP105 in prose."""') == \
        [(1, "DDP123"), (2, "DDP104")]


def test_each_check_module_writes_its_code_once():
    # In run/checks/ too: a module-level alias is derived from the class (`Check.code`), never a
    # second literal of the check's own code. `explains` may name other checks' codes.
    for path in (PACKAGE / "run" / "checks").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = [n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
               and [getattr(t, "id", None) for t in n.targets] == ["code"] and isinstance(n.value, ast.Constant)]
        cited = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and [getattr(t, "id", None) for t in n.targets] == ["explains"] for c in ast.walk(n.value)}
        written = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in cited
                   and n.value in own]
        assert sorted(written) == sorted(own), path.name


CHECKS = "ddpcheck.run.checks"


def _probe_modules() -> list[str]:
    return sorted(m for m in MODULES if m.startswith(CHECKS + ".") and not m.rsplit(".", 1)[1].startswith("_"))


def _between_probes() -> list[str]:
    """Imports of a probe module by another probe module, a shared helper of run/checks/ or the
    rank's code (which installs the probes through the registry, by name)."""
    probes = set(_probe_modules())
    return sorted(f"{m} -> {d}" for m, deps in GRAPH.items() if m.startswith((CHECKS + ".", "ddpcheck.run.rank"))
                  for d in deps if d in probes and d != m)


def test_no_probe_imports_another():
    assert len(_probe_modules()) > 15  # guards the guard: the probes are seen
    assert _between_probes() == []


@pytest.mark.parametrize("placement", ["module", "function", "type_checking"])
@pytest.mark.parametrize(("importer", "statement"), [
    ("ddpcheck.run.checks.params", "from ddpcheck.run.checks.grads import judge"),
    ("ddpcheck.run.checks.lifecycle", "from ddpcheck.run.checks import grads"),
    ("ddpcheck.run.checks._compare", "from ddpcheck.run.checks import inputs"),
    ("ddpcheck.run.rank.bootstrap", "from ddpcheck.run.checks import crash"),
])
def test_a_planted_import_between_probes_is_found(monkeypatch, importer, statement, placement):
    source = {
        "module": statement,
        "function": f"def judge():\n    {statement}\n",
        "type_checking": f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {statement}\n",
    }[placement]
    monkeypatch.setitem(GRAPH, importer, GRAPH[importer] | _imports(importer, source))
    assert [edge for edge in _between_probes() if edge.startswith(importer + " -> ")]


LAUNCHER_SIDE = ("ddpcheck.run.launcher", "ddpcheck.run.rehearse")


def test_the_modules_directly_in_run_are_shared_by_both_kinds_of_process():
    # A module that only the launcher's side imports belongs in its room (run/launcher/), so the
    # top of run/ holds only what ranks and launcher both read.
    top = [m for m in MODULES if m.startswith("ddpcheck.run.") and m.count(".") == 2
           and not (PACKAGE / "run" / m.rsplit(".", 1)[1]).is_dir()]
    assert len(top) > 5
    launcher_only = [m for m in top
                     if (users := {u for u, deps in GRAPH.items() if m in deps})
                     and all(u.startswith(LAUNCHER_SIDE) for u in users)]
    assert launcher_only == []
