"""The GPU wheel kit: which distributions a bare GPU machine must be given, by construction.

A bare GPU machine (Python 3.12, its own torch, no network, no package index) runs the GPU entry
points (``benchmarks/gpu.sh``) with wheels carried in ``.gpu-wheels/`` (``benchmarks/gpu-kit.sh``).
Which wheels: ``benchmarks/gpu-kit.txt``, written by ``record`` and guarded by ``check``.

Commands (run with the project's venv, ``.venv/bin/python``; ``verify`` and ``smoke`` need only
the standard library, so they also run on the GPU machine):

* ``record [--out FILE] [-- CMD...]``: runs CMD (default ``bash benchmarks/gpu.sh --dry``) so that
  every Python process it starts, subprocesses too, writes the top-level names of the modules it
  imported at exit; maps them to distributions, adds the static imports of the project (what
  ``check`` reads), the ``Requires-Dist`` closure (markers for Linux x86_64 CPython 3.12, extras
  ignored), drops the standard library, the project itself, :data:`PROVIDED` and what only
  PROVIDED needs, and writes the sorted names to FILE atomically.
* ``check``: the static side: every third-party import of the project's code (AST, any level,
  ``importlib.import_module("literal")`` too) and its closure must be in the kit, PROVIDED or
  :data:`OPTIONAL`; exit 1 naming each distribution that is not.
* ``pins``: ``name==version`` of every kit name, from this venv (the kit carries what CI tests).
* ``provided [--rehearse]``: PROVIDED as requirements (``name>=x``), or as the pins a CPU rehearsal
  installs (``torch==2.11.0`` as on the GPU image, this venv's versions for the others).
* ``verify``: on the GPU machine, each PROVIDED distribution is installed and meets its requirement;
  exit 1 with one line per failure (name, version, requirement).
* ``shadows --pins FILE``: on the GPU machine, before the install, one line per package of the machine that
  the kit replaces (both versions); exit 1 if the kit carries a PROVIDED distribution (torch, triton, the
  CUDA libraries are never replaced).
* ``smoke --pins FILE``: every carried pin is the version that imports (the carried copy won) and
  the main packages import; exit 1 naming each one that does not.

Errors: a malformed command line exits 2; a failed check, verify or smoke exits 1; a recorded
command that fails leaves the kit file untouched and exits with its status.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KIT_FILE = REPO / "benchmarks" / "gpu-kit.txt"
SCAN_ROOTS = (REPO / "src" / "clmdetour", REPO / "benchmarks", REPO / "workflow" / "scripts")
DEFAULT_CMD = ("bash", "benchmarks/gpu.sh", "--dry")
PROJECT = "clmdetour"

# What the GPU machine's image provides and the kit does not carry: large, compiled, torch-bound
# distributions a PyTorch image has. Each maps to the requirement run.sh checks there before the run
# (``verify``). Their own dependencies are the image's business too (see ``provided_closure``).
PROVIDED: dict[str, str] = {
    "torch": ">=2.5",
    "triton": ">=3.1",
    "torchvision": ">=0.20",  # Composer requires it; it is built against one torch, so never carried
    "numpy": ">=1.26",
    "scipy": ">=1.11",
    "scikit-learn": ">=1.3",
    "matplotlib": ">=3.8",
    "pandas": ">=2.2",
    "pyarrow": ">=15",
    "pillow": ">=10",
    "sympy": ">=1.13",
    "networkx": ">=3.0",
}
# The CUDA libraries torch brings (nvidia-cublas, cuda-bindings, ...): provided, any version.
PROVIDED_PREFIXES = ("nvidia-", "cuda-")
# Required by a carried distribution but never imported by a GPU entry point (the recorder saw no process
# import it) and too large to carry for nothing: dist -> why. Left out like PROVIDED, but nothing is checked.
NOT_CARRIED: dict[str, str] = {
    "hf-xet": "huggingface_hub's Xet-backed Hub downloads only (4.3 MB); the GPU machine is offline",
}
# Carried without a folder only a path no GPU entry point takes needs: dist -> (folder prefix in the wheel, why).
SLIM: dict[str, tuple[str, str]] = {
    "pulp": ("pulp/solverdir/", ("the bundled CBC solver binaries (16 MB): `import snakemake` imports pulp, but only "
                               "the ILP scheduler runs CBC, and the GPU rows run Snakemake with --scheduler greedy")),
}

# The GPU image's versions a CPU rehearsal installs (others: this venv's, i.e. CI's).
IMAGE_VERSIONS = {"torch": "2.11.0", "torchvision": "0.26.0"}

# Imports the project guards with ``except ImportError`` and that no GPU entry point needs:
# top-level module name -> why the kit does not carry it.
OPTIONAL: dict[str, str] = {
    "flash_attn": "attention back-end flash_attention_2 only; auto falls back to sdpa/flex when absent",
    "spacy": "BRAT sentence splitting (tasks: sentence_splitter: spacy), no GPU entry point; ~51 MB with its model",
}

# The GPU machine's interpreter and platform, for the environment markers of Requires-Dist.
TARGET_MARKERS = {
    "python_version": "3.12", "python_full_version": "3.12.0", "implementation_version": "3.12.0",
    "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
    "implementation_name": "cpython", "platform_python_implementation": "CPython",
    "platform_release": "", "platform_version": "", "extra": "",
}

# Written into a temporary folder put first on PYTHONPATH: every Python process then records the
# top-level names of its modules at exit (one file per process), then runs the sitecustomize it hides.
SITECUSTOMIZE = '''\
import atexit as _atexit, os as _os, sys as _sys


def _clmdetour_kit_record():
    folder = _os.environ.get("CLMDETOUR_KIT_RECORD")
    if not folder:
        return
    names = sorted({name.split(".")[0] for name in list(_sys.modules)})
    try:
        with open(_os.path.join(folder, "%d.txt" % _os.getpid()), "a") as f:
            f.write("\\n".join(names) + "\\n")
    except OSError:
        pass


_atexit.register(_clmdetour_kit_record)


def _clmdetour_kit_chain():
    import importlib.machinery, importlib.util
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_clmdetour_kit_chain()
'''


def canonical(name: str) -> str:
    """A distribution name in PEP 503 normal form (``Mosaicml_CLI`` -> ``mosaicml-cli``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_provided(dist: str) -> bool:
    """Whether the kit leaves distribution ``dist`` (canonical name) out: the GPU image provides it
    (PROVIDED, the CUDA libraries) or no GPU entry point imports it (NOT_CARRIED)."""
    return dist in PROVIDED or dist in NOT_CARRIED or dist.startswith(PROVIDED_PREFIXES)


def slim_wheel(path: Path) -> int:
    """Rewrite the wheel at ``path`` without the folder :data:`SLIM` names for its distribution (its RECORD
    lines dropped too), atomically; returns the bytes saved (0 when the distribution is not in SLIM)."""
    import zipfile

    dist = canonical(path.name.split("-", 1)[0])
    if dist not in SLIM:
        return 0
    prefix = SLIM[dist][0]
    before = path.stat().st_size
    tmp = path.with_name(path.name + ".slim")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if item.filename.startswith(prefix):
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(prefix.encode()))
            dst.writestr(item, data)
    os.replace(tmp, path)
    return before - path.stat().st_size


def is_stdlib(module: str) -> bool:
    """Whether top-level module ``module`` is the standard library's (or ``__main__``)."""
    return module in sys.stdlib_module_names or module in ("__main__", "__mp_main__", "builtins")


# ---------------------------------------------------------------------------- distributions


def module_map() -> dict[str, list[str]]:
    """Top-level module name -> canonical names of the installed distributions that provide it."""
    return {mod: sorted({canonical(d) for d in dists}) for mod, dists in md.packages_distributions().items()}


def modules_to_dists(modules: set[str], mapping: dict[str, list[str]]) -> tuple[dict[str, str], set[str]]:
    """Distributions of third-party ``modules``: ({dist: a module it provides}, unmapped modules).

    Standard-library modules are skipped; a module no installed distribution provides is unmapped
    (the project's own packages, a script's folder, an uninstalled optional import).
    """
    dists: dict[str, str] = {}
    unmapped: set[str] = set()
    for mod in sorted(modules):
        if is_stdlib(mod):
            continue
        if mod not in mapping:
            unmapped.add(mod)
            continue
        for dist in mapping[mod]:
            dists.setdefault(dist, mod)
    return dists, unmapped


def requirements(dist: str) -> list[str]:
    """Canonical names ``dist`` requires on Linux x86_64 CPython 3.12, extras ignored.

    Raises md.PackageNotFoundError when ``dist`` is not installed in this environment.
    """
    from packaging.requirements import Requirement

    names = []
    for line in md.distribution(dist).requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(dict(TARGET_MARKERS)):
            names.append(canonical(req.name))
    return names


def closure(roots: dict[str, str], stop=is_provided) -> tuple[dict[str, str], dict[str, str]]:
    """The Requires-Dist closure of ``roots`` ({dist: why}), not descending into ``stop`` dists.

    Returns ({dist: why it is there}, {required dist not installed here: who requires it}); a
    distribution that is not installed cannot be pinned, so it is reported rather than kept.
    """
    found = dict(roots)
    absent: dict[str, str] = {}
    todo = list(roots)
    while todo:
        dist = todo.pop()
        if stop(dist):
            continue
        try:
            needs = requirements(dist)
        except md.PackageNotFoundError:
            absent[dist] = found.pop(dist)
            continue
        for need in needs:
            if need not in found and need not in absent:
                found[need] = f"required by {dist}"
                todo.append(need)
    return found, absent


def provided_closure() -> set[str]:
    """PROVIDED and everything it requires here: the image installs these with PROVIDED."""
    roots = {d: "provided" for d in PROVIDED if _installed(d)}
    found, _ = closure(roots, stop=lambda d: False)
    return set(found)


def _installed(dist: str) -> bool:
    """Whether distribution ``dist`` is installed in this environment."""
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def kit_names(path: Path = KIT_FILE) -> list[str]:
    """The distribution names of a kit file (one a line; ``#`` comments and blank lines skipped).

    Raises FileNotFoundError when ``path`` does not exist.
    """
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [canonical(line) for line in lines if line]


def carried(modules: set[str], mapping: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str]]:
    """What the kit carries for imported ``modules``: ({dist: why}, {absent dist: who requires it}).

    Imported distributions that only PROVIDED needs are left to the image (a carried distribution
    that requires one brings it back); PROVIDED, the project and uninstalled ones are dropped.
    """
    dists, _ = modules_to_dists(modules, mapping)
    image = provided_closure()
    roots = {d: f"imports {m}" for d, m in dists.items() if d not in image and d != PROJECT}
    found, absent = closure(roots)
    kept = {d: why for d, why in found.items() if not is_provided(d) and d != PROJECT}
    return kept, absent


# ---------------------------------------------------------------------------- static imports


@dataclass(frozen=True)
class ImportSite:
    """Where a top-level module is imported: file, line, and whether ``except ImportError`` guards it."""

    path: Path
    line: int
    guarded: bool


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    """Whether an ``except`` clause catches ImportError (bare, by name, or in a tuple)."""
    if handler.type is None:
        return True
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in nodes)


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` test is ``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` (imports not run)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _literal_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("x")``, ``import_module("x")`` or ``__import__("x")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
        return arg.value
    return None


def imports_of(path: Path) -> list[tuple[str, ImportSite]]:
    """The absolute imports of one Python file at any depth: [(top-level module, site)].

    Imports under ``if TYPE_CHECKING:`` are skipped; relative imports are the project's own.
    Raises SyntaxError when ``path`` does not parse.
    """
    found: list[tuple[str, ImportSite]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, guarded)
            return
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call):
            names = [m for m in [_literal_import(node)] if m]
        for name in names:
            found.append((name.split(".")[0], ImportSite(path, getattr(node, "lineno", 0), guarded)))
        if isinstance(node, ast.Try):
            inner = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), False)
    return found


def local_modules(roots) -> set[str]:
    """Top-level names that are the project's own: each root, its entries, the repository's and src/'s."""
    names = {PROJECT}
    for folder in [*map(Path, roots), REPO, REPO / "src"]:
        names.add(folder.name)
        if folder.is_dir():
            names.update(p.stem if p.suffix == ".py" else p.name for p in folder.iterdir())
    return names


def scan(roots=SCAN_ROOTS) -> dict[str, list[ImportSite]]:
    """Third-party top-level modules imported by every ``.py`` under ``roots``: {module: sites}."""
    local = local_modules(roots)
    sites: dict[str, list[ImportSite]] = {}
    for root in map(Path, roots):
        for path in sorted(root.rglob("*.py")):
            if ".venv" in path.parts or "__pycache__" in path.parts:
                continue
            for mod, site in imports_of(path):
                if not is_stdlib(mod) and mod not in local:
                    sites.setdefault(mod, []).append(site)
    return sites


def check(roots=SCAN_ROOTS, kit: list[str] | None = None) -> dict[str, str]:
    """Distributions the code under ``roots`` needs that are neither carried, PROVIDED nor OPTIONAL.

    Returns {distribution or module: where it is needed} (empty: the kit covers the code). An
    imported module no installed distribution provides is reported under its module name, unless
    OPTIONAL names it and every import of it is guarded by ``except ImportError``.
    """
    kit_set = set(kit_names() if kit is None else map(canonical, kit))
    sites = scan(roots)
    mapping = module_map()
    missing: dict[str, str] = {}
    needed: set[str] = set()
    for mod, where in sorted(sites.items()):
        first = f"{_rel(where[0].path)}:{where[0].line}"
        if mod in OPTIONAL and all(s.guarded for s in where):
            continue
        if mod not in mapping:
            missing[f"module {mod}"] = f"imported at {first}; not installed here (guard it and declare it in OPTIONAL?)"
            continue
        needed.add(mod)
    found, _absent = carried(needed, mapping)
    for dist, why in sorted(found.items()):
        if dist not in kit_set:
            mod = why.removeprefix("imports ")
            missing[dist] = f"{why} at {_rel(sites[mod][0].path)}:{sites[mod][0].line}" if mod in sites else why
    return missing  # ``absent`` (required, not installed here): CI runs without them, so may the kit


def _rel(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------- record


def run_recorded(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, set[str], int]:
    """Run ``cmd`` with every Python process recording its modules: (exit status, modules, processes).

    The recording is a ``sitecustomize`` in a temporary folder first on PYTHONPATH (it runs the
    sitecustomize it hides); a process that leaves by ``os._exit`` or a signal records nothing.
    """
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="kit-record-") as tmp:
        hook, out = Path(tmp) / "hook", Path(tmp) / "modules"
        hook.mkdir()
        out.mkdir()
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(hook), env.get("PYTHONPATH", "")] if p)
        env["CLMDETOUR_KIT_RECORD"] = str(out)
        status = subprocess.run(cmd, check=False, cwd=REPO, env=env).returncode
        files = list(out.glob("*.txt"))
        modules = {line.strip() for f in files for line in f.read_text().splitlines() if line.strip()}
    return status, modules, len(files)


def kit_text(kept: dict[str, str], absent: dict[str, str], cmd: list[str]) -> str:
    """The kit file: a header saying how it was generated, then one distribution a line, sorted."""
    shown = " ".join(cmd)
    head = [
        "# The GPU wheel kit: distributions benchmarks/gpu-kit.sh carries to a bare GPU machine.",
        f"# Generated by: python benchmarks/kit.py record --out benchmarks/gpu-kit.txt -- {shown}",
        "# (modules every Python process of that command imported, plus the static imports `kit.py check` reads,",
        "# mapped to distributions, with their Requires-Dist closure for Linux x86_64 CPython 3.12, extras ignored;",
        "# without the standard library, clmdetour, PROVIDED in benchmarks/kit.py and what only PROVIDED needs).",
        "# Do not edit by hand: re-record with `bash benchmarks/gpu-kit.sh record`.",
    ]
    if absent:
        head.append("# Required but not installed in the venv (so not carried; CI runs without them too): "
                    + ", ".join(f"{d} ({why})" for d, why in sorted(absent.items())))
    return "\n".join(head + sorted(kept)) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record(out: Path, cmd: list[str], allow_failure: bool = False) -> int:
    """Record ``cmd``'s imports and write the kit to ``out``; returns the exit status for ``main``.

    A failing ``cmd`` writes nothing (its status is returned) unless ``allow_failure``.
    """
    status, modules, processes = run_recorded(cmd)
    if status != 0 and not allow_failure:
        print(f"kit record: {' '.join(cmd)} exited {status}; {out} left as it was", file=sys.stderr)
        return status or 1
    mapping = module_map()
    static = {m for m, where in scan().items() if not (m in OPTIONAL and all(s.guarded for s in where))}
    kept, absent = carried(modules | static, mapping)
    _, unmapped = modules_to_dists(modules - local_modules(SCAN_ROOTS), mapping)
    write_atomic(out, kit_text(kept, absent, cmd))
    print(f"kit record: {processes} Python processes, {len(modules)} top-level modules -> {len(kept)} distributions "
          f"written to {_rel(out)}")
    # inductor's generated modules (c + 51 characters) and private names are noise
    shown = sorted(m for m in unmapped - {"sitecustomize"} if not m.startswith("_") and len(m) < 40)
    if shown:
        print(f"kit record: modules of no installed distribution (ignored): {', '.join(shown)}")
    return 0


# ---------------------------------------------------------------------------- pins, provided, verify, smoke


def pins(kit: list[str]) -> list[str]:
    """``name==version`` of every kit name, from this environment.

    Raises md.PackageNotFoundError naming the first kit name that is not installed here.
    """
    return [f"{name}=={md.version(name)}" for name in kit]


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string (``2.11.0+cu130`` -> (2, 11, 0)); () if none."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def satisfies(version: str, spec: str) -> bool:
    """Whether ``version`` meets ``spec`` (comma-separated ``>=``, ``>``, ``<=``, ``<``, ``==``, ``!=``).

    Compares numeric releases only (local labels and pre-release tags ignored), with the standard
    library alone so that it runs on the GPU machine. Raises ValueError on an unknown operator.
    """
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.fullmatch(r"(>=|<=|==|!=|>|<)\s*(\S+)", clause)
        if not m:
            raise ValueError(f"unsupported requirement {clause!r}")
        want = _release(m.group(2))
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[m.group(1)]
        if not ok:
            return False
    return True


def verify() -> list[str]:
    """One line per PROVIDED distribution that is absent or too old here (empty: all good)."""
    problems = []
    for name, spec in PROVIDED.items():
        try:
            version = md.version(name)
        except md.PackageNotFoundError:
            problems.append(f"{name}: not installed on this machine; the GPU kit needs {name}{spec} from the image")
            continue
        if not satisfies(version, spec):
            problems.append(f"{name}: {version} installed, the GPU kit needs {name}{spec}")
    return problems


SMOKE_MODULES = ("torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "datasets", "accelerate",
                 "composer", "mcli", "jsonschema", "referencing", "yaml", "clmdetour.config", "clmdetour.training.phase")


def smoke(pinned: list[str], modules=SMOKE_MODULES) -> list[str]:
    """One line per failure: a carried pin whose installed version differs, a module that does not import."""
    import importlib

    problems = []
    for line in pinned:
        name, _, want = line.partition("==")
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            have = "not installed"
        if have != want:
            problems.append(f"{name}: {have} found first on the path, the kit carries {want}")
    for mod in modules:
        try:
            m = importlib.import_module(mod)
            print(f"smoke: import {mod} {getattr(m, '__version__', '')} ({_rel(Path(m.__file__ or '.').parent)})")
        except Exception as e:  # noqa: BLE001 - every failure is reported by name
            problems.append(f"import {mod}: {type(e).__name__}: {e}")
    return problems


def shadows(pinned: list[str]) -> tuple[list[str], list[str]]:
    """What the kit replaces on this machine: one line per carried pin that this interpreter already has at
    another version (``name: machine's version -> kit's version``), and one refusal per pin that is PROVIDED
    (torch, triton, the ``nvidia-*``/``cuda-*`` libraries...: the kit never replaces them).

    Returns:
        ``(replaced, refused)``.
    """
    replaced, refused = [], []
    for line in pinned:
        name, _, want = line.partition("==")
        if is_provided(name):
            refused.append(f"{name}=={want} is PROVIDED by the machine (torch, triton, CUDA libraries ...): "
                           "the kit must not carry it; re-record the kit")
            continue
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            continue
        if have != want:
            replaced.append(f"{name}: {have} (the machine's) -> {want} (the kit's)")
    return replaced, refused


# ---------------------------------------------------------------------------- command line


def rehearsal_pins() -> list[str]:
    """What a CPU rehearsal installs: the image's torch/torchvision, this venv's versions of the rest
    of PROVIDED (triton and the CUDA libraries come with torch)."""
    return [f"{name}=={IMAGE_VERSIONS.get(name) or md.version(name)}" for name in PROVIDED if name != "triton"]


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring); returns the exit status."""
    ap = argparse.ArgumentParser(prog="kit.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the kit from a command's imports")
    rec.add_argument("--out", type=Path, default=KIT_FILE)
    rec.add_argument("--allow-failure", action="store_true", help="write the kit even if the command fails")
    rec.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD... (default: bash benchmarks/gpu.sh --dry)")
    sub.add_parser("check", help="static imports vs the kit")
    sub.add_parser("pins", help="name==version of the kit from this venv")
    prov = sub.add_parser("provided", help="PROVIDED as requirements")
    prov.add_argument("--rehearse", action="store_true", help="the pins a CPU rehearsal installs")
    sub.add_parser("verify", help="PROVIDED is installed here at the required versions")
    slim = sub.add_parser("slim", help="drop from the fetched wheels the folders SLIM names")
    slim.add_argument("folder", type=Path)
    smk = sub.add_parser("smoke", help="carried pins win and the main packages import")
    smk.add_argument("--pins", type=Path, required=True)
    sha = sub.add_parser("shadows", help="list the machine's packages the kit replaces; refuse a PROVIDED pin")
    sha.add_argument("--pins", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.command == "record":
        cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
        return record(a.out, cmd or list(DEFAULT_CMD), a.allow_failure)
    if a.command in ("check", "pins") and not KIT_FILE.exists():
        print(f"kit {a.command}: {_rel(KIT_FILE)} is missing: record it with `bash benchmarks/gpu-kit.sh record`",
              file=sys.stderr)
        return 1
    if a.command == "check":
        missing = check()
        for name, why in missing.items():
            print(f"not in the GPU kit: {name} ({why})")
        if missing:
            print(f"{len(missing)} missing: re-record with `bash benchmarks/gpu-kit.sh record`, or declare them "
                  "in PROVIDED/OPTIONAL (benchmarks/kit.py)", file=sys.stderr)
        return 1 if missing else 0
    if a.command == "pins":
        try:
            print("\n".join(pins(kit_names())))
        except md.PackageNotFoundError as e:
            print(f"kit pins: {e} is in benchmarks/gpu-kit.txt but not installed in this venv", file=sys.stderr)
            return 1
        return 0
    if a.command == "slim":
        for wheel in sorted(a.folder.glob("*.whl")):
            saved = slim_wheel(wheel)
            if saved:
                print(f"gpu-kit slim: {wheel.name} without {SLIM[canonical(wheel.name.split('-', 1)[0])][0]} "
                      f"({saved / 1e6:.1f} MB less)")
        return 0
    if a.command == "provided":
        print("\n".join(rehearsal_pins() if a.rehearse else [f"{n}{s}" for n, s in PROVIDED.items()]))
        return 0
    lines = [x for x in a.pins.read_text().splitlines() if x.strip()] if a.command in ("smoke", "shadows") else []
    if a.command == "shadows":
        replaced, refused = shadows(lines)
        print(f"GPU kit shadows: {len(replaced)} of the machine's packages replaced by the kit's version"
              + (" (torch, triton and the CUDA libraries are never replaced):" if replaced else ""))
        for line in replaced:
            print(f"  {line}")
        for line in refused:
            print(f"GPU kit shadows: {line}", file=sys.stderr)
        return 1 if refused else 0
    problems = verify() if a.command == "verify" else smoke(lines)
    for line in problems:
        print(f"GPU kit {a.command}: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
