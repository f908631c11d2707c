"""Every rule's last complete output outlives a rerun that fails (clmdetour.pipeline.last_good)."""
import io
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clmdetour.pipeline.last_good import settle, snapshot_of, snapshot_outputs

REPO = Path(__file__).resolve().parents[1]
CONFIGS = [str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_snapshot_is_hard_links_and_settles_when_the_output_is_back(tmp_path):
    out = tmp_path / "results" / "tasks" / "t"
    (out / "test").mkdir(parents=True)
    (out / "test" / "data.jsonl").write_text('{"id": 1}\n')
    table = tmp_path / "results" / "table.tsv"
    table.write_text("a\tb\n")
    registry = tmp_path / "reg.json"
    made = snapshot_outputs([("prepare_task", str(out)), ("eval_table", str(table)),
                             ("missing", str(tmp_path / "nothing"))], registry)
    assert made == [str(snapshot_of(out)), str(snapshot_of(table))]
    snap = snapshot_of(out)
    assert os.stat(snap / "test" / "data.jsonl").st_ino == os.stat(out / "test" / "data.jsonl").st_ino  # no bytes copied
    # Snakemake deletes both outputs; one job then succeeds, the other fails
    shutil.rmtree(out)
    table.unlink()
    table.write_text("new\n")
    lines = settle(registry, file=io.StringIO())
    assert len(lines) == 1 and str(snap) in lines[0] and "prepare_task" in lines[0]
    assert _tree(snap) == {"test/data.jsonl": b'{"id": 1}\n'}
    assert not snapshot_of(table).exists()  # its output is back: a complete new one replaced it
    # a later run whose job is still refused keeps the earlier snapshot (the output is missing: nothing to copy)
    assert snapshot_outputs([("prepare_task", str(out))], registry) == []
    assert settle(registry, file=io.StringIO()) and snap.is_dir()
    # the job succeeds at last: the snapshot goes, and so does the registry
    (out / "test").mkdir(parents=True)
    (out / "test" / "data.jsonl").write_text("{}\n")
    assert settle(registry, file=io.StringIO()) == []
    assert not snap.exists() and not registry.exists()


def test_a_versioned_output_and_a_foreign_last_good_are_left_alone(tmp_path):
    from clmdetour.io import versioned_output_dir

    model = tmp_path / "model"
    with versioned_output_dir(model) as tmp:
        (tmp / "config.json").write_text("{}")
    registry = tmp_path / "reg.json"
    assert snapshot_outputs([("phase", str(model))], registry) == []  # a link: its own .last-good
    model.unlink()  # Snakemake deletes the link
    settle(registry, file=io.StringIO())
    assert (snapshot_of(model) / "config.json").exists()  # the versioned pointer is not this hook's to remove


def _snakemake(workdir: Path, *args: str, overlay: str | None = None) -> subprocess.CompletedProcess:
    files = list(CONFIGS)
    if overlay:
        (workdir / "overlay.yaml").write_text(overlay)
        files.append(str(workdir / "overlay.yaml"))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfiles", *files, "--cores", "1", *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow  # three Snakemake runs of one task: 15 s
def test_a_refused_rerun_keeps_the_prepared_task(tmp_path):
    """Issue 58 item 1: a task prepared, then prepared again with an overlay that the overlap check refuses:
    Snakemake removes results/tasks/medline, the last complete one stays whole beside it and is named."""
    done = _snakemake(tmp_path, "prepare_task_medline")
    assert done.returncode == 0, done.stderr[-3000:]
    task = tmp_path / "results" / "tasks" / "medline"
    before = _tree(task)
    refused = _snakemake(tmp_path, "prepare_task_medline", overlay="tasks: {medline: {max_split_overlap: 0.01}}\n")
    assert refused.returncode != 0 and "max_split_overlap" in refused.stderr
    kept = snapshot_of(task)
    assert f"kept: {kept.relative_to(tmp_path)}" in refused.stderr
    assert not task.exists() and _tree(kept) == before  # intact, file for file
    again = _snakemake(tmp_path, "prepare_task_medline")  # the config that made it: rebuilt, the snapshot goes
    assert again.returncode == 0, again.stderr[-3000:]
    rebuilt = _tree(task)
    assert rebuilt.keys() == before.keys() and not kept.exists()
    data = {k: v for k, v in before.items() if k.endswith((".arrow", "labels.json"))}
    assert len(data) == 4 and all(rebuilt[k] == v for k, v in data.items())  # the same examples


def _can_mount_read_only() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"], capture_output=True, check=False).returncode == 0


@pytest.mark.slow  # one Snakemake run that stops before its first job: 5 s
@pytest.mark.skipif(not _can_mount_read_only(), reason="no user namespaces here to mount a read-only results/")
def test_a_read_only_results_folder_is_one_line_before_any_job(tmp_path):
    """Issue 58, a fault never tried: results/ mounted read-only. The run stops before its first job with one
    line naming the folders and the rules (it was a raw OSError traceback in the first job); a dry run works."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "kept.txt").write_text("finished work\n")
    files = " ".join(shlex.quote(f) for f in CONFIGS)
    smk = (f"{shlex.quote(sys.executable)} -m snakemake -s {shlex.quote(str(REPO / 'Snakefile'))} "
           f"-d {shlex.quote(str(tmp_path))} --configfiles {files} --cores 1 prepare_task_diamed")
    script = f"mount --bind results results && mount -o remount,ro,bind results && {smk} -n && {smk}"
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode != 0
    assert "This was a dry-run" in proc.stdout + proc.stderr  # planning a read-only run still works
    errors = [line for line in proc.stderr.splitlines() if "writes are refused" in line]
    assert len(errors) == 1 and f"{tmp_path}/results: read-only file system (rules " in errors[0]
    assert "demo_task_source" in errors[0] and "prepare_task" in errors[0]
    assert "Traceback" not in proc.stderr and "Errno 30" not in proc.stderr
    assert (tmp_path / "results" / "kept.txt").read_text() == "finished work\n"
