"""Tasks that share documents form one group, read from the task manifests."""
from pathlib import Path

import pytest

from clmdetour.evaluation.task_groups import document_groups, file_hashes, read_manifests

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def _manifest(*hashes, empty=()):
    files = [{"path": f"f{h}", "sha256": h, "bytes": 10} for h in hashes]
    files += [{"path": f"e{h}", "sha256": h, "bytes": 0} for h in empty]
    return {"files": files}


def test_groups_by_shared_files_not_by_shared_side_files():
    docs_e, docs_m, docs_f = [f"e{i}" for i in range(20)], [f"m{i}" for i in range(20)], [f"f{i}" for i in range(30)]
    conf = ["annotation.conf", "visual.conf", "tools.conf"]
    manifests = {
        "emea": _manifest(*docs_e, *conf), "medline": _manifest(*docs_m, *conf),   # 3 of 23 in common: apart
        "fracco-30": _manifest(*docs_f), "fracco-100": _manifest(*docs_f),
        "cantemist": _manifest(*docs_f[:20]),                                      # a subset: together
        "diamed": _manifest("d1", "d2", empty=["e"]), "meddialog": _manifest("x1", empty=["e"]),  # empty files ignored
        "distemist": None,
    }
    tasks = ["emea", "medline", "fracco-30", "fracco-100", "cantemist", "distemist", "meddialog", "diamed"]
    groups = document_groups(tasks, manifests)
    assert groups == [["emea"], ["medline"], ["fracco-30", "fracco-100", "cantemist"], ["distemist"],
                      ["meddialog"], ["diamed"]]
    # chaining: a shares with b, b with c -> one group, in table order
    assert document_groups(["c", "a", "b"], {"a": _manifest("1", "2"), "b": _manifest("2", "3"),
                                             "c": _manifest("3", "4")}) == [["c", "a", "b"]]


def test_bad_manifest_is_an_error_naming_the_task(tmp_path):
    with pytest.raises(ValueError, match="task 'x'.*files"):
        document_groups(["x"], {"x": {"task": "x"}})
    with pytest.raises(ValueError, match=r"files\[0\] has no sha256"):
        file_hashes({"files": [{"path": "a"}]})
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "manifest.json").write_text("[1]")
    with pytest.raises(ValueError, match="manifest.json: not a JSON object"):
        read_manifests({"t": tmp_path / "t"})
    assert read_manifests({"u": tmp_path / "absent"}) == {"u": None}


@pytest.mark.skipif(not (DATA / "quaero").is_dir() or not (DATA / "fracco").is_dir(), reason="shared data absent")
def test_paper_config_groups_the_fracco_tasks_only():
    """Manifest file lists of the paper's QUAERO and FRACCO tasks (config/config.yaml) on the shared data."""
    from clmdetour.config import load_yaml
    from clmdetour.tasks.manifest import files_with_hashes
    from clmdetour.tasks.spec import expected_files, resolve_task_spec

    cfg = load_yaml(REPO / "config" / "config.yaml")["tasks"]
    where = {"emea": ("brat", DATA / "quaero/corpus"), "medline": ("brat", DATA / "quaero/corpus"),
             "fracco-30": ("fracco", DATA / "fracco/brat_raw"), "fracco-100": ("fracco", DATA / "fracco/brat_raw"),
             "cantemist": ("fracco", DATA / "fracco/brat_raw")}
    manifests = {}
    for task, (source, path) in where.items():
        spec = resolve_task_spec(task, dict(cfg[task], source=source, path=str(path)))
        manifests[task] = {"files": files_with_hashes([Path(p) for p in expected_files(spec)])}
    # EMEA and MEDLINE hold byte-identical BRAT .conf files but no common document
    assert file_hashes(manifests["emea"]) & file_hashes(manifests["medline"])
    assert document_groups(list(where), manifests) == [["emea"], ["medline"], ["fracco-30", "fracco-100", "cantemist"]]
