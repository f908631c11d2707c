"""The package's layers: the library below the wiring (``clmdetour.pipeline``) below the rule files,
and the code above the library: ``benchmarks/`` and ``workflow/scripts/`` (they import ``clmdetour``,
``clmdetour`` never imports them).

Read from the source (every ``import`` statement, those inside functions included), so a lazy
import that closes a cycle or reaches upward fails here as well as a top-level one. The cycle search
and the function-length check read all three folders (:data:`CODE`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "clmdetour"
EXTENDING = ROOT / "docs" / "extending.md"
LIBRARY = "clmdetour"
# {import name of a folder's modules: folder}: the library, and the code above it (the benchmarks, a
# package; the jobs' scripts, each run as a file, named here by their folder)
ABOVE = {"benchmarks": ROOT / "benchmarks", "workflow.scripts": ROOT / "workflow" / "scripts"}
CODE = {LIBRARY: SRC, **ABOVE}


def _module_name(path: Path, folder: Path, package: str) -> str:
    """``package.sub.module`` of the file ``path`` under ``folder`` (a package's ``__init__``: the package)."""
    parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
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


def _imported(name: str, path: Path) -> set[str]:
    """Every module name an import statement of ``path`` (module ``name``) may reach: ``from pkg import
    mod`` counts ``pkg`` and ``pkg.mod``; relative imports are resolved against ``name``'s package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(name, path.name == "__init__.py", node)
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def import_graph(code: dict[str, Path] | Path = CODE) -> dict[str, set[str]]:
    """Module -> the modules of ``code`` it imports.

    ``code`` maps the import name of each folder's modules to the folder (default: the library,
    ``benchmarks/`` and ``workflow/scripts/``); a bare folder is the library package of that folder.
    A folder without ``__init__.py`` holds scripts, run as files: a bare ``import x`` there reaches
    its sibling ``x.py`` too.
    """
    code = {code.name: code} if isinstance(code, Path) else code
    modules, scripts = {}, set()
    for package, folder in code.items():
        for p in folder.rglob("*.py"):
            modules[_module_name(p, folder, package)] = p
        if not (folder / "__init__.py").exists():
            scripts.add(package)
    graph = {}
    for name, path in modules.items():
        found = _imported(name, path)
        package = name.rsplit(".", 1)[0]
        if package in scripts:
            found |= {f"{package}.{m}" for m in found}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def library_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The library's part of ``graph``: its modules and their imports of library modules."""
    return {m: {d for d in deps if _is_in(d, LIBRARY)} for m, deps in graph.items() if _is_in(m, LIBRARY)}


def imports_from_above(graph: dict[str, set[str]]) -> list[str]:
    """``module -> dependency`` where a library module imports the code above it (:data:`ABOVE`)."""
    return sorted(f"{m} -> {d}" for m, deps in graph.items() if _is_in(m, LIBRARY)
                  for d in deps if any(_is_in(d, top) for top in ABOVE))


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


def test_the_graph_reads_the_three_folders():
    graph = import_graph()
    assert {"clmdetour.tasks.prepare", "benchmarks.gpu", "workflow.scripts.prepare_task"} <= set(graph)
    assert "clmdetour.tasks.prepare" in graph["workflow.scripts.prepare_task"]
    assert "benchmarks.common" in graph["benchmarks.gpu"]


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_library_never_imports_the_benchmarks_or_the_scripts():
    bad = imports_from_above(import_graph())
    assert not bad, "library modules importing benchmarks/ or workflow/scripts/:\n" + "\n".join(bad)


def test_the_library_never_imports_the_wiring():
    upward = [f"{m} -> {d}" for m, deps in library_graph(import_graph()).items()
              if not _is_in(m, "clmdetour.pipeline") for d in deps if _is_in(d, "clmdetour.pipeline")]
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


def _planted_tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    """A tmp copy of the three folders' layout holding ``files`` (``{relative path: text}``); its :data:`CODE`."""
    for rel in ("src/clmdetour/__init__.py", "benchmarks/__init__.py", *files):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files.get(rel, ""))
    (tmp_path / "workflow" / "scripts").mkdir(parents=True, exist_ok=True)
    return {LIBRARY: tmp_path / "src" / "clmdetour", "benchmarks": tmp_path / "benchmarks",
            "workflow.scripts": tmp_path / "workflow" / "scripts"}


def test_the_checks_across_the_folders_can_fail(tmp_path):
    """Planted: a library module importing a benchmark and a script; a cycle through a benchmark, a script
    importing its sibling by bare name; the library imported from above is allowed."""
    code = _planted_tree(tmp_path, {
        "src/clmdetour/a.py": "def f():\n    from benchmarks import b\n",
        "src/clmdetour/c.py": "import workflow.scripts.s\n",
        "src/clmdetour/ok.py": "",
        "benchmarks/b.py": "from clmdetour import a\nfrom clmdetour.ok import x\n",
        "workflow/scripts/s.py": "import t\nimport clmdetour.ok\n",
        "workflow/scripts/t.py": "from clmdetour.c import y\n",
    })
    graph = import_graph(code)
    assert imports_from_above(graph) == ["clmdetour.a -> benchmarks", "clmdetour.a -> benchmarks.b",
                                         "clmdetour.c -> workflow.scripts.s"]
    assert cycles(graph) == [["benchmarks.b", "clmdetour.a"],
                             ["clmdetour.c", "workflow.scripts.s", "workflow.scripts.t"]]
    assert library_graph(graph) == {"clmdetour": set(), "clmdetour.a": set(), "clmdetour.c": set(), "clmdetour.ok": set()}


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
    units = {_unit(m) for m in library_graph(import_graph())} - {"clmdetour"}
    assert units - set(floors) == set(), "packages missing from docs/extending.md's floor table"
    assert set(floors) - units == set(), "floor table names packages that do not exist"


def test_no_import_goes_up_a_floor():
    bad = upward_imports(library_graph(import_graph()), documented_floors())
    assert not bad, "imports against docs/extending.md's floors:\n" + "\n".join(bad)


def test_the_floor_check_can_fail():
    graph = {"clmdetour.config": {"clmdetour.training.objectives"}, "clmdetour.training.objectives": set(),
             "clmdetour.corpus.x": {"clmdetour.training.y"}, "clmdetour.training.y": set()}
    floors = {"clmdetour.config": 2, "clmdetour.training": 4, "clmdetour.corpus": 4}
    assert upward_imports(graph, floors) == [
        "clmdetour.config (floor 2) -> clmdetour.training.objectives (floor 4)",
        "clmdetour.corpus.x (floor 4) -> clmdetour.training.y (floor 4)"]


MAX_FUNCTION_LINES = 80  # issue 39: a longer function is split into named steps


def long_functions(folders=None, limit: int = MAX_FUNCTION_LINES, root: Path = ROOT) -> list[str]:
    """``path:line name (n lines)`` (path relative to ``root``) of every function or method in ``folders``
    (None: :data:`CODE`, i.e. ``src/clmdetour``, ``benchmarks``, ``workflow/scripts``) longer than ``limit`` lines."""
    out = []
    for folder in CODE.values() if folders is None else folders:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if n > limit:
                        out.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_over_80_lines_in_src_benchmarks_or_scripts():
    assert long_functions() == [], "split into named steps"


def test_the_length_check_can_fail(tmp_path):
    """One planted long function in each of the three folders' tmp copies is found; an 80-line one is not."""
    long, short = "def f():\n" + "    x = 1\n" * 85, "def g():\n" + "    x = 1\n" * 79
    code = _planted_tree(tmp_path, {"src/clmdetour/m.py": long + short, "benchmarks/b.py": "class B:\n    " +
                                    long.replace("\n    ", "\n        "), "workflow/scripts/s.py": short + long})
    assert long_functions(code.values(), root=tmp_path) == [
        "src/clmdetour/m.py:1 f (86 lines)", "benchmarks/b.py:2 f (86 lines)", "workflow/scripts/s.py:81 f (86 lines)"]


def test_the_phase_keeps_only_the_orchestration():
    assert len((SRC / "training" / "phase.py").read_text(encoding="utf-8").splitlines()) <= 500
