"""Planning-time task specs (clmdetour.tasks.spec): defaults read from the schema, the planning/runtime split,
and the size of the tasks package's functions."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

from clmdetour.tasks import spec as spec_mod
from clmdetour.tasks.spec import READER_KEYS, resolve_task_spec

REPO = Path(__file__).resolve().parents[1]
TASKS_PKG = REPO / "src" / "clmdetour" / "tasks"
MINIMAL = {"type": "multiclass", "source": "jsonl", "path": "nonexistent/folder"}


def test_every_filled_key_has_one_schema_default():
    schema = spec_mod._task_schema()
    assert [k for k in READER_KEYS if "default" not in schema[k]] == []
    for key in ("split", "label_set"):
        assert all("default" in v for v in schema[key]["properties"].values()), key


def test_resolved_defaults_are_the_schema_defaults():
    s = resolve_task_spec("t", MINIMAL)
    schema = spec_mod._task_schema()
    assert {k: s[k] for k in READER_KEYS} == {k: schema[k]["default"] for k in READER_KEYS}
    assert s["comment_prefix"] == schema["comment_prefix"]["default"]
    assert s["split"] == {k: v["default"] for k, v in schema["split"]["properties"].items()}
    assert s["label_set"] == {"top_k": None, "code_kind": "both", "unseen": "error"}  # unseen: by the type


def test_a_changed_schema_default_changes_the_resolved_spec(monkeypatch):
    """Each default lives once: edit it in the schema and the resolved spec follows (no copy in the code)."""
    schema = copy.deepcopy(spec_mod._task_schema())
    schema["label_field"]["default"] = "etiquette"
    schema["max_split_overlap"]["default"] = 0.25
    schema["overlap_min_words"]["default"] = 3
    schema["comment_prefix"]["default"] = ";"
    schema["split"]["properties"]["salt"]["default"] = "autre"
    schema["label_set"]["properties"]["code_kind"]["default"] = "morphology"
    monkeypatch.setattr(spec_mod, "_task_schema", lambda: schema)
    s = resolve_task_spec("t", MINIMAL)
    assert (s["label_field"], s["max_split_overlap"], s["overlap_min_words"], s["comment_prefix"]) == (
        "etiquette", 0.25, 3, ";")
    assert s["split"]["salt"] == "autre" and s["label_set"]["code_kind"] == "morphology"
    assert resolve_task_spec("t", {**MINIMAL, "label_field": None})["label_field"] == "etiquette"  # null: default


def test_resolved_key_order_is_stable():
    """Snakemake's params are the resolved spec: its keys come in the order the steps fill them."""
    s = resolve_task_spec("t", MINIMAL)
    assert list(s) == ["type", "source", "path", "format", "dataset", "fetch", "split", "splits", "label_set",
                       "comment_prefix", "type_from_note", "doc_marker", *[k for k in READER_KEYS if k != "type_from_note"]]
    assert resolve_task_spec("t", s) == s


def test_planning_does_not_import_the_runtime_preparation():
    """The Snakefile's planning imports (clmdetour.tasks.spec, clmdetour.tasks.contract) leave out prepare
    and its steps (reading, labels, checks, manifest)."""
    runtime = [f"clmdetour.tasks.{m}" for m in ("prepare", "reading", "labels", "checks", "manifest")]
    code = ("import sys, clmdetour.tasks.spec, clmdetour.tasks.contract, clmdetour.pipeline; "
            f"loaded = [m for m in {runtime!r} if m in sys.modules]; assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    rules = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    assert [(p.name, m) for p in rules for m in runtime if m in p.read_text(encoding="utf-8")] == []
