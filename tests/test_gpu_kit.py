"""The GPU wheel kit (benchmarks/kit.py): the static check covers the tree, a planted import is caught, the
recorder maps modules to distributions with their closure, and the recorded kit carries what failed before."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from helpers import REPO


def _load_kit():
    spec = importlib.util.spec_from_file_location("kit_under_test", REPO / "benchmarks" / "kit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module by name
    spec.loader.exec_module(module)
    return module


kit = _load_kit()


def test_check_covers_the_tree():
    assert kit.KIT_FILE.exists(), "benchmarks/gpu-kit.txt is missing: bash benchmarks/gpu-kit.sh record"
    assert kit.check() == {}


def _uncarried_module() -> tuple[str, str]:
    """An installed, importable top-level module whose distributions the kit neither carries nor leaves to
    the image (a dev tool such as pytest or black), with its distribution."""
    carried = set(kit.kit_names())
    image = kit.provided_closure()
    for mod, dists in sorted(kit.module_map().items()):
        if not mod.isidentifier() or mod.startswith("_") or kit.is_stdlib(mod) or mod in kit.OPTIONAL:
            continue
        if all(d not in carried and d not in image and not kit.is_provided(d) and d != kit.PROJECT for d in dists):
            return mod, dists[0]
    pytest.fail("every installed distribution is in the kit")


def test_planted_import_is_reported(tmp_path):
    mod, dist = _uncarried_module()
    (tmp_path / "planted.py").write_text(f"def f():\n    import {mod}\n    return {mod}\n")
    missing = kit.check(roots=[*kit.SCAN_ROOTS, tmp_path])
    assert dist in missing, missing
    assert "planted.py:2" in missing[dist]
    assert kit.check(roots=[*kit.SCAN_ROOTS]) == {}


def test_literal_import_module_and_guards(tmp_path):
    mod, dist = _uncarried_module()
    (tmp_path / "dyn.py").write_text(f"import importlib\nM = importlib.import_module({mod!r})\n")
    assert dist in kit.check(roots=[tmp_path])
    # an uninstalled module is reported unless OPTIONAL names it and every import of it is guarded
    (tmp_path / "dyn.py").write_text("try:\n    import flash_attn\nexcept ImportError:\n    flash_attn = None\n")
    assert "module flash_attn" not in kit.check(roots=[tmp_path])
    (tmp_path / "dyn.py").write_text("import flash_attn\n")
    assert "module flash_attn" in kit.check(roots=[tmp_path])
    (tmp_path / "dyn.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import not_a_module_x\n")
    assert kit.check(roots=[tmp_path]) == {}


def test_module_mapping_and_closure():
    mapping = kit.module_map()
    dists, unmapped = kit.modules_to_dists({"yaml", "os", "jsonschema", "clmdetour_not_a_module"}, mapping)
    assert set(dists) == {"pyyaml", "jsonschema"} and dists["pyyaml"] == "yaml"
    assert unmapped == {"clmdetour_not_a_module"}
    found, absent = kit.closure({"jsonschema": "imports jsonschema"})
    assert {"jsonschema", "referencing", "rpds-py", "jsonschema-specifications", "attrs"} <= set(found)
    assert found["referencing"] == "required by jsonschema" and found["jsonschema"] == "imports jsonschema"
    assert absent == {}
    # a PROVIDED distribution is not descended into, and a carried one never includes it
    found, _ = kit.closure({"pandas": "x"})
    assert set(found) == {"pandas"}
    kept, _ = kit.carried({"pandas", "jsonschema"}, mapping)
    assert "pandas" not in kept and "numpy" not in kept and "referencing" in kept


def test_markers_are_evaluated_for_python_312():
    from packaging.markers import Marker

    env = dict(kit.TARGET_MARKERS)
    assert Marker('python_version >= "3.12" and sys_platform == "linux"').evaluate(env)
    assert not Marker('python_version < "3.12"').evaluate(env) and not Marker('extra == "dev"').evaluate(env)
    from packaging.requirements import Requirement

    raw = [Requirement(r) for r in kit.md.distribution("huggingface-hub").requires or []]
    plain = {kit.canonical(r.name) for r in raw if r.marker is None}
    extras_only = {kit.canonical(r.name) for r in raw if r.marker and "extra" in str(r.marker)} - {
        kit.canonical(r.name) for r in raw if not (r.marker and "extra" in str(r.marker))}
    reqs = set(kit.requirements("huggingface-hub"))
    assert plain <= reqs and not (extras_only & reqs)


def test_recorder_follows_subprocesses_and_chains_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    marker = tmp_path / "marker"
    (other / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    child = "import subprocess, sys; import yaml; subprocess.run([sys.executable, '-c', 'import jsonschema'], check=True)"
    env = {**__import__("os").environ, "PYTHONPATH": str(other)}
    status, modules, processes = kit.run_recorded([sys.executable, "-c", child], env=env)
    assert status == 0 and processes == 2
    assert {"yaml", "jsonschema", "subprocess"} <= modules
    assert marker.read_text() == "ran"


def test_record_writes_atomically_and_refuses_a_failed_command(tmp_path):
    out = tmp_path / "kit.txt"
    out.write_text("old\n")
    assert kit.record(out, [sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    assert out.read_text() == "old\n"
    text = kit.kit_text({"b": "x", "a": "y"}, {"torch-optimizer": "required by mosaicml"}, ["cmd"])
    kit.write_atomic(out, text)
    assert kit.kit_names(out) == ["a", "b"] and "torch-optimizer" in out.read_text()
    assert list(tmp_path.iterdir()) == [out]


def test_kit_carries_what_the_gpu_machine_lacked():
    carried = set(kit.kit_names())
    assert "mosaicml-cli" in kit.requirements("mosaicml") and "mosaicml-cli" in carried
    for root in ("huggingface-hub", "mosaicml", "jsonschema", "referencing"):
        found, _ = kit.closure({root: "test"})
        wanted = {d for d in found if not kit.is_provided(d)} - kit.provided_closure() | {root}
        # what only PROVIDED needs is the image's; the rest of each closure must be carried
        assert wanted - carried == set(), (root, sorted(wanted - carried))
    assert {"jsonschema", "referencing", "rpds-py", "jsonschema-specifications"} <= carried
    assert not any(kit.is_provided(d) for d in carried) and kit.PROJECT not in carried


def test_pins_are_this_venvs_versions():
    pins = kit.pins(kit.kit_names())
    assert len(pins) == len(kit.kit_names())
    name, _, version = pins[0].partition("==")
    assert kit.md.version(name) == version


def test_provided_requirements_and_verify(monkeypatch):
    assert kit.satisfies("2.11.0+cu130", ">=2.5") and not kit.satisfies("2.4.1", ">=2.5")
    assert kit.satisfies("15.0", ">=15,<16") and not kit.satisfies("16.0.1", ">=15,<16")
    with pytest.raises(ValueError):
        kit.satisfies("1.0", "~=1.0")
    monkeypatch.setattr(kit, "PROVIDED", {"numpy": ">=999", "no-such-dist-x": ">=1"})
    problems = kit.verify()
    assert problems[0] == f"numpy: {kit.md.version('numpy')} installed, the GPU kit needs numpy>=999"
    assert problems[1].startswith("no-such-dist-x: not installed")


def test_verify_runs_with_the_standard_library_alone():
    # run.sh calls `kit.py verify` on the GPU machine before anything is installed
    r = subprocess.run([sys.executable, "-I", "-S", str(REPO / "benchmarks" / "kit.py"), "provided"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "torch>=" in r.stdout


def test_slim_wheel_drops_only_the_declared_folder_and_its_record_lines(tmp_path):
    import zipfile

    wheel = tmp_path / "PuLP-3.3.2-py3-none-any.whl"
    record = "pulp/__init__.py,sha256=a,1\npulp/solverdir/cbc/linux/64/cbc,sha256=b,9\npulp-3.3.2.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pulp/__init__.py", "x = 1\n")
        z.writestr("pulp/solverdir/cbc/linux/64/cbc", b"\0" * 200_000)
        z.writestr("pulp-3.3.2.dist-info/RECORD", record)
    assert kit.slim_wheel(wheel) > 0
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert names == ["pulp/__init__.py", "pulp-3.3.2.dist-info/RECORD"]
        assert "solverdir" not in z.read("pulp-3.3.2.dist-info/RECORD").decode()
    other = tmp_path / "rich-14.0.0-py3-none-any.whl"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("rich/solverdir/x", "kept")
    assert kit.slim_wheel(other) == 0  # a distribution SLIM does not name is left whole


def test_not_carried_is_left_out_of_the_kit_and_never_imported_here():
    import importlib.util as iu

    for dist in kit.NOT_CARRIED:
        assert kit.is_provided(dist) and dist not in kit.kit_names()
    # hf-xet's module is not imported by loading the Hub client and transformers (what the GPU rows do)
    code = ("import sys, huggingface_hub, transformers, datasets; from transformers import AutoTokenizer; "
            "print('hf_xet' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False" or iu.find_spec("hf_xet") is None
