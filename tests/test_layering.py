"""The package's layers: the library below the wiring (``clmdetour.pipeline``) below the rule files.

Read from the source (every ``import`` statement, those inside functions included), so a lazy
import that closes a cycle or reaches upward fails here as well as a top-level one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "clmdetour"
EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names: ``from .x import y`` in ``a.b.c`` is ``a.b.x``."""
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the ``clmdetour`` modules it imports (``from pkg import mod`` counts ``pkg.mod``;
    relative imports are resolved against the importing module's package)."""
    modules = {_module_name(p, src): p for p in src.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                target = _absolute(name, path.name == "__init__.py", node)
                found.add(target)
                found |= {f"{target}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_library_never_imports_the_wiring():
    upward = [f"{m} -> {d}" for m, deps in import_graph().items() if not _is_in(m, "clmdetour.pipeline")
              for d in deps if _is_in(d, "clmdetour.pipeline")]
    assert not upward, "library modules importing clmdetour.pipeline:\n" + "\n".join(upward)


def test_the_evaluation_package_never_imports_the_trainer():
    bad = [f"{m} -> {d}" for m, deps in import_graph().items() if _is_in(m, "clmdetour.evaluation")
           for d in deps if _is_in(d, "clmdetour.finetune")]
    assert not bad, "\n".join(bad)


def test_fine_tuning_never_imports_the_pretraining_package():
    """What both share (precision, optimizer, Composer set-up, the attention self-check) is ``clmdetour.runtime``."""
    bad = [f"{m} -> {d}" for m, deps in import_graph().items() if _is_in(m, "clmdetour.finetune")
           for d in deps if _is_in(d, "clmdetour.training")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("planted", [
    {"a.py": "from clmdetour.b import x\n", "b.py": "def f():\n    from clmdetour import a\n"},
    {"a.py": "import clmdetour.b\n", "b.py": "import clmdetour.a\n"},
    {"a.py": "from .b import x\n", "b.py": "from . import a\n"},
])
def test_the_cycle_search_can_fail(tmp_path, planted):
    pkg = tmp_path / "clmdetour"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in planted.items():
        (pkg / name).write_text(text)
    assert cycles(import_graph(pkg)) == [["clmdetour.a", "clmdetour.b"]]


def documented_floors(doc: Path = EXTENDING) -> dict[str, int]:
    """``{package or module: floor}`` from the table under "The package's floors" in docs/extending.md."""
    text = doc.read_text(encoding="utf-8").split("## The package's floors", 1)[1].split("\n## ", 1)[0]
    floors = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|(.*)\|\s*$", line)
        if m:
            for name in re.findall(r"`(clmdetour(?:\.\w+)?)`", m.group(2)):
                floors[name] = int(m.group(1))
    return floors


def _unit(module: str) -> str:
    """The floor table's unit of a module: its top-level package or module under ``clmdetour``."""
    return ".".join(module.split(".")[:2])


def upward_imports(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """Imports from a unit to a unit of a higher floor, or sideways to another unit of the same floor."""
    bad = []
    for module, deps in graph.items():
        a = _unit(module)
        for dep in deps:
            b = _unit(dep)
            if a != b and b != "clmdetour" and floors[b] >= floors[a]:
                bad.append(f"{module} (floor {floors[a]}) -> {dep} (floor {floors[b]})")
    return sorted(bad)


def test_every_package_has_a_documented_floor():
    floors = documented_floors()
    units = {_unit(m) for m in import_graph()} - {"clmdetour"}
    assert units - set(floors) == set(), "packages missing from docs/extending.md's floor table"
    assert set(floors) - units == set(), "floor table names packages that do not exist"


def test_no_import_goes_up_a_floor():
    bad = upward_imports(import_graph(), documented_floors())
    assert not bad, "imports against docs/extending.md's floors:\n" + "\n".join(bad)


def test_the_floor_check_can_fail():
    graph = {"clmdetour.config": {"clmdetour.training.objectives"}, "clmdetour.training.objectives": set(),
             "clmdetour.corpus.x": {"clmdetour.training.y"}, "clmdetour.training.y": set()}
    floors = {"clmdetour.config": 2, "clmdetour.training": 4, "clmdetour.corpus": 4}
    assert upward_imports(graph, floors) == [
        "clmdetour.config (floor 2) -> clmdetour.training.objectives (floor 4)",
        "clmdetour.corpus.x (floor 4) -> clmdetour.training.y (floor 4)"]


MAX_FUNCTION_LINES = 80  # issue 39: a longer function is split into named steps


def long_functions(src: Path = SRC, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``module:line name (n lines)`` of every function or method of ``src`` longer than ``limit`` lines."""
    out = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(src).as_posix()}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_in_src_over_80_lines():
    assert long_functions() == [], "split into named steps"


def test_the_length_check_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 85)
    assert long_functions(tmp_path) == ["m.py:1 f (86 lines)"]


def test_the_phase_keeps_only_the_orchestration():
    assert len((SRC / "training" / "phase.py").read_text(encoding="utf-8").splitlines()) <= 500
