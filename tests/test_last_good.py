"""Every rule's last complete output outlives a rerun that fails (clmdetour.pipeline.last_good)."""
import io
import json
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


def test_a_snapshot_is_hard_links_and_a_failed_rerun_puts_it_back(tmp_path):
    out = tmp_path / "results" / "tasks" / "t"
    (out / "test").mkdir(parents=True)
    (out / "test" / "data.jsonl").write_text('{"id": 1}\n')
    table = tmp_path / "results" / "table.tsv"
    table.write_text("a\tb\n")
    registry = tmp_path / ".snakemake" / "reg.json"
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
    assert len(lines) == 1 and lines[0].startswith(f"restored: {out} (rule prepare_task): its rerun did not finish")
    assert _tree(out) == {"test/data.jsonl": b'{"id": 1}\n'} and not snap.exists()  # back under its own name
    assert table.read_text() == "new\n" and not snapshot_of(table).exists()  # a complete new one replaced it
    assert not registry.exists()
    # a second run's lines name only its own snapshots
    snapshot_outputs([("prepare_task", str(out))], registry)
    shutil.rmtree(out)
    assert len(settle(registry, file=io.StringIO())) == 1 and out.is_dir()
    assert settle(registry, file=io.StringIO()) == []


def test_a_versioned_output_comes_back_as_its_link(tmp_path):
    from clmdetour.io import versioned_output_dir

    model = tmp_path / "model"
    with versioned_output_dir(model) as tmp:
        (tmp / "config.json").write_text("{}")
    version = model.resolve()
    registry = tmp_path / ".snakemake" / "reg.json"
    assert snapshot_outputs([("phase", str(model))], registry) == [str(snapshot_of(model))]  # its own .last-good
    model.unlink()  # Snakemake deletes the link, the job fails
    [line] = settle(registry, file=io.StringIO())
    assert line.startswith(f"restored: {model} (rule phase)") and "without a record" in line
    assert model.is_symlink() and model.resolve() == version and snapshot_of(model).resolve() == version


def test_restore_command_puts_back_what_a_killed_run_left(tmp_path, capsys, monkeypatch):
    """Snakemake killed before its end hook: the output's name is gone, its snapshot and record kept."""
    from clmdetour.pipeline import last_good

    monkeypatch.chdir(tmp_path)
    out = Path("results/eval/m/t/seed0.json")
    out.parent.mkdir(parents=True)
    out.write_text('{"status": "ok"}\n')
    meta = last_good.record_file(Path(".snakemake/metadata"), str(out))
    meta.parent.mkdir(parents=True)
    meta.write_text('{"rule": "finetune", "params": ["0.01"]}')
    Path(".snakemake/incomplete").mkdir()
    snapshot_outputs([("finetune", str(out))])
    out.unlink()
    meta.unlink()  # Snakemake forgets a failed job's record
    assert last_good.main(["list"]) == 0
    assert f"{snapshot_of(out)}: rule finetune, output missing: restore puts it back" in capsys.readouterr().out
    assert last_good.main(["restore", "results/eval/m/t/seed9.json"]) == 1  # never kept: named, exit 1
    assert "seed9.json: no snapshot kept for it" in capsys.readouterr().err
    assert last_good.main(["restore", str(out)]) == 0
    assert "with its record of the run that made it" in capsys.readouterr().out
    assert out.read_text() == '{"status": "ok"}\n' and json.loads(meta.read_text())["params"] == ["0.01"]


def _snakemake(workdir: Path, *args: str, overlay: str | None = None) -> subprocess.CompletedProcess:
    files = list(CONFIGS)
    if overlay:
        (workdir / "overlay.yaml").write_text(overlay)
        files.append(str(workdir / "overlay.yaml"))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfiles", *files, "--cores", "1", *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow  # five Snakemake runs of one task: 25 s
def test_a_refused_rerun_puts_the_prepared_task_back_with_its_record(tmp_path):
    """Issue 65 item 1: a task prepared, then prepared again with an overlay that the overlap check refuses:
    the last complete one is back under its own name with Snakemake's record of the run that made it, so the
    config that made it plans nothing and the refusing config is refused again (not silently taken as done)."""
    done = _snakemake(tmp_path, "prepare_task_medline")
    assert done.returncode == 0, done.stderr[-3000:]
    task = tmp_path / "results" / "tasks" / "medline"
    before = _tree(task)
    overlay = "tasks: {medline: {max_split_overlap: 0.01}}\n"
    refused = _snakemake(tmp_path, "prepare_task_medline", overlay=overlay)
    assert refused.returncode != 0 and "max_split_overlap" in refused.stderr
    assert "restored: results/tasks/medline (rule prepare_task): its rerun did not finish" in refused.stderr
    assert _tree(task) == before and not snapshot_of(task).exists()  # back, file for file
    plan = _snakemake(tmp_path, "prepare_task_medline", "-n")
    assert "Nothing to be done" in plan.stdout + plan.stderr, (plan.stdout + plan.stderr)[-3000:]
    again = _snakemake(tmp_path, "prepare_task_medline", overlay=overlay)  # the refusing config: checked again
    assert again.returncode != 0 and "max_split_overlap" in again.stderr
    assert _tree(task) == before


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
