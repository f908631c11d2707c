"""A killed phase resumes from its last checkpoint; a changed config starts afresh."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, tiny_phase1_section


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir, demo_texts):
    tmp = tmp_path_factory.mktemp("resume")
    section = tiny_phase1_section(tmp, tiny_model_dir, demo_texts, 64)
    section.update(tokens=64 * 8 * 40, global_batch_sequences=8, micro_batch_sequences=8, checkpoint_interval="10ba",
                   log_interval_steps=1, checkpoint_root=str(tmp / "ckpt"), valid_sequences=4, warmup_tokens=0)
    return tmp, section


def _cmd(tmp, tiny_model_dir, section, out):
    return [sys.executable, "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", str(tiny_model_dir),
            "--corpus", str(tmp / "corpus"), "--output-dir", str(out), "--section", json.dumps(section)]


@pytest.mark.slow  # training subprocesses (about 40-60 s each): the unit stage keeps its 5-minute budget
def test_killed_phase_resumes_and_changed_lr_restarts(setup, tiny_model_dir):
    tmp, section = setup
    out = tmp / "phase"
    proc = subprocess.Popen(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "first.log", "w"))  # noqa: SIM115 (the child process writes to it until the test ends)
    deadline = time.time() + 240
    links = []
    while time.time() < deadline and proc.poll() is None:
        # a finished save: Composer points latest-rank0.pt at the file once it is written
        links = list(Path(section["checkpoint_root"]).glob("v/phase1/*/latest-rank0.pt"))
        if links:
            break
        time.sleep(0.2)
    assert links, f"no checkpoint appeared; log:\n{(tmp / 'first.log').read_text()[-2000:]}"
    proc.kill()  # by the PID we started
    proc.wait()
    assert not (out / "run.json").exists()
    ckpts = list(links[0].parent.glob("ep*-ba*-rank0.pt"))
    saved_step = int(os.readlink(links[0]).split("-ba")[1].split("-")[0])
    # A later save cut off by the kill (the empty file a job killed mid-write leaves): the rerun must
    # drop it, not stop with FileExistsError when it reaches that step.
    cut_off = links[0].parent / f"ep0-ba{saved_step + 10}-rank0.pt"
    if not cut_off.exists():
        cut_off.write_bytes(b"")

    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed checkpoint files of a save that did not finish" in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_step"] >= saved_step > 0 and ckpts
    assert run["steps"] == 40 and run["tokens"] == section["tokens"]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log]
    resumed_at = steps.index(run["resumed_from_step"] + 1, 1)
    assert steps[resumed_at - 1] >= run["resumed_from_step"]  # the live log continues the killed run's lines

    changed = dict(section, lr=section["lr"] / 2)
    subprocess.run(_cmd(tmp, tiny_model_dir, changed, tmp / "phase_lr"), cwd=REPO, check=True, capture_output=True)
    run2 = json.loads((tmp / "phase_lr" / "run.json").read_text())
    assert run2["resumed_from_step"] == 0 and run2["run_hash"] != run["run_hash"]
    assert run2["valid_loss_end"] < run2["valid_loss_start"]


@pytest.mark.slow  # training subprocesses (about 40-60 s each): the unit stage keeps its 5-minute budget
def test_finished_phase_asked_again_rewrites_the_same_outputs(setup, tiny_model_dir):
    """`--forcerun` on a finished phase: the complete checkpoint is reused, not an error (Composer refuses fit())."""
    from safetensors.torch import load_file

    tmp, section = setup
    section = dict(section, tokens=64 * 8 * 12, checkpoint_root=str(tmp / "ckpt_again"))
    out = tmp / "again"
    subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, check=True, capture_output=True)
    first = json.loads((out / "run.json").read_text())
    weights = load_file(out / "model" / "model.safetensors")
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads((out / "run.json").read_text())
    assert again["resumed_from_step"] == first["steps"] == 12
    assert again["valid_loss_end"] == first["valid_loss_end"] and again["valid_loss_start"] == first["valid_loss_start"]
    assert all((load_file(out / "model" / "model.safetensors")[k] == v).all() for k, v in weights.items())


def test_unfinished_checkpoint_files_are_dropped(tmp_path):
    from clmdetour.training.checkpoints import drop_unfinished_checkpoints

    for name in ("ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt", "ep0-ba30-rank0.pt", "ep0-ba30-rank1.pt"):
        (tmp_path / name).write_bytes(b"x" if "ba30" not in name else b"")
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba20-rank0.pt")
    assert drop_unfinished_checkpoints(tmp_path) == ["ep0-ba30-rank0.pt", "ep0-ba30-rank1.pt"]
    assert sorted(p.name for p in tmp_path.glob("ep*")) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]
    assert drop_unfinished_checkpoints(tmp_path) == []
    (tmp_path / "latest-rank0.pt").unlink()  # no finished save at all: nothing is vouched for
    assert drop_unfinished_checkpoints(tmp_path) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]


def _finished_phase(setup, tiny_model_dir, name: str):
    """A finished 40-step phase keeping its 4 checkpoints: (section, output folder, final weights, checkpoint folder)."""
    from safetensors.torch import load_file

    tmp, section = setup
    section = dict(section, checkpoint_root=str(tmp / f"ckpt_{name}"), keep_checkpoints=5)
    out = tmp / name
    subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, check=True, capture_output=True)
    return section, out, load_file(out / "model" / "model.safetensors"), next(Path(section["checkpoint_root"]).glob("v/phase1/*"))


@pytest.mark.slow  # two training subprocesses (about 40-60 s each)
def test_a_damaged_latest_checkpoint_resumes_from_the_previous_one(setup, tiny_model_dir):
    """Truncate the newest checkpoint of a finished phase, roll the run back to it, rerun: the file is
    moved aside, the run resumes from the older checkpoint and ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    tmp, section = setup
    section, out, uninterrupted, ckpt = _finished_phase(setup, tiny_model_dir, "damaged")
    assert sorted(p.name for p in ckpt.glob("ep*-rank0.pt"))[:2] == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]
    # the state of a run killed after its step-20 save, whose file was then cut short (a full disk, a lost node)
    for later in ("ep0-ba30-rank0.pt", "ep0-ba40-rank0.pt"):
        (ckpt / later).unlink()
    (ckpt / "latest-rank0.pt").unlink()
    (ckpt / "latest-rank0.pt").symlink_to("ep0-ba20-rank0.pt")
    damaged = ckpt / "ep0-ba20-rank0.pt"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    import shutil

    shutil.rmtree(out)

    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{damaged}: checkpoint skipped: not a complete checkpoint archive" in r.stderr
    assert (ckpt / "ep0-ba20-rank0.pt.damaged").exists()
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_step"] == 10 and run["resume"]["resume_from"] == "ep0-ba10-rank0.pt"
    assert [s["file"] for s in run["resume"]["skipped"]] == [str(damaged)] and not run["resume"]["restart"]
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # no step twice: lines past step 10 were dropped
    resumed = load_file(out / "model" / "model.safetensors")
    assert all(torch_equal(resumed[k], v) for k, v in uninterrupted.items())


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def _checkpoint(path: Path, step: int) -> Path:
    import torch

    torch.save({"state": {"step": step}}, path)
    return path


def test_repair_resume_point_moves_damaged_files_aside_and_relinks(tmp_path):
    from clmdetour.training.checkpoints import checkpoint_problem, repair_resume_point

    files = [_checkpoint(tmp_path / f"ep0-ba{b}-rank0.pt", b) for b in (10, 20, 30)]
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba30-rank0.pt")
    assert repair_resume_point(tmp_path) == {"skipped": [], "resume_from": "ep0-ba30-rank0.pt", "restart": False}
    files[2].write_bytes(files[2].read_bytes()[:100])       # cut short
    import zipfile

    with zipfile.ZipFile(files[1]) as z:                    # one flipped byte inside the pickle member
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    data = bytearray(files[1].read_bytes())
    name_len, extra_len = (int.from_bytes(data[info.header_offset + k:info.header_offset + k + 2], "little") for k in (26, 28))
    start = info.header_offset + 30 + name_len + extra_len  # the member's bytes, after its local header
    data[start + info.compress_size // 2] ^= 0xFF
    files[1].write_bytes(bytes(data))
    assert checkpoint_problem(files[2]).startswith("not a complete checkpoint archive")
    assert checkpoint_problem(files[1]) is not None and checkpoint_problem(files[0]) is None
    report = repair_resume_point(tmp_path)
    assert report["resume_from"] == "ep0-ba10-rank0.pt" and os.readlink(tmp_path / "latest-rank0.pt") == files[0].name
    assert [Path(s["moved_to"]).name for s in report["skipped"]] == ["ep0-ba30-rank0.pt.damaged", "ep0-ba20-rank0.pt.damaged"]


def test_no_checkpoint_loads_then_the_phase_restarts_and_says_so(tmp_path, caplog):
    from clmdetour.training.checkpoints import repair_resume_point

    (tmp_path / "ep0-ba10-rank0.pt").write_bytes(b"")       # keep_checkpoints: 1, and its one file is empty
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba10-rank0.pt")
    with caplog.at_level("WARNING"):
        report = repair_resume_point(tmp_path)
    assert report["restart"] and report["resume_from"] is None and report["skipped"][0]["reason"] == "empty file"
    assert not (tmp_path / "latest-rank0.pt").exists() and not (tmp_path / "latest-rank0.pt").is_symlink()
    assert "no checkpoint loads (1 skipped); the phase starts again from its input model" in caplog.text


def test_live_log_lines_past_the_resume_step_are_dropped(tmp_path):
    from clmdetour.training.checkpoints import trim_live_log

    log = tmp_path / "train_log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 24)))
    assert trim_live_log(log, 20) == 3
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == list(range(1, 21))
    assert trim_live_log(log, 20) == 0 and trim_live_log(tmp_path / "absent.jsonl", 5) == 0


def test_a_full_disk_during_a_save_names_the_folder_and_the_bytes(tmp_path):
    import errno

    from clmdetour.training.checkpoints import CheckpointSpaceError
    from clmdetour.training.phase import fit

    (tmp_path / "ep0-ba10-rank0.pt").write_bytes(b"x" * 4096)
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba10-rank0.pt")  # a finished save

    def enospc():  # a fit() whose save hits ENOSPC
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointSpaceError, match=rf"{tmp_path}: no space left on device while v/phase1 saved a "
                       r"checkpoint \([\d,]+ bytes free; one checkpoint takes 4,096 bytes"):
        fit(_FakeTrainer(enospc), 10_000, "v/phase1", tmp_path)


class _FakeTrainer:
    """The state a Composer Trainer has before fit() (step 10, no token yet) and the given fit()."""

    class state:
        class timestamp:
            class batch:
                value = 10

            class token:
                value = 0

    def __init__(self, fit):
        self.fit = fit


def test_a_full_disk_as_torch_reports_it_is_named_and_the_cut_file_removed(tmp_path):
    """torch 2.14's torch.save reports ENOSPC as a RuntimeError raised while handling the OSError; the
    cut-short file under its final name is removed (it stayed until the next run)."""
    import errno

    from clmdetour.training.checkpoints import CheckpointSpaceError
    from clmdetour.training.phase import fit

    (tmp_path / "ep0-ba10-rank0.pt").write_bytes(b"x" * 4096)
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba10-rank0.pt")

    def torch_enospc():
        (tmp_path / "ep0-ba20-rank0.pt").write_bytes(b"x" * 100)  # what the write got to before the disk filled
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 376704 vs 376592")

    with pytest.raises(CheckpointSpaceError, match=r"removed the cut-short ep0-ba20-rank0\.pt\); free space there"):
        fit(_FakeTrainer(torch_enospc), 10_000, "v/phase1", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0-ba10-rank0.pt", "latest-rank0.pt"]

    def other():
        raise RuntimeError("CUDA error: an illegal memory access")  # not a full disk: raised as it is

    with pytest.raises(RuntimeError, match="illegal memory access"):
        fit(_FakeTrainer(other), 10_000, "v/phase1", tmp_path)


def _mount_tmpfs(folder: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` on ``folder`` (or remount it at that size); False where not permitted."""
    folder.mkdir(parents=True, exist_ok=True)
    opts = f"remount,size={size}" if os.path.ismount(folder) else f"size={size}"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(folder)], capture_output=True, check=False)
    return r.returncode == 0


@pytest.mark.slow  # three training subprocesses (about 15-40 s each) on a real full filesystem
def test_a_phase_on_a_full_disk_names_it_and_resumes_once_space_returns(setup, tiny_model_dir, tmp_path):
    """A real 1.2 MB tmpfs holds one checkpoint of the tiny model (820 kB), not two: the phase stops naming
    the folder and the bytes, leaves no cut-short file, and once the disk is larger it resumes from its
    last checkpoint and ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    tmp, section = setup
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "1200k"):
        pytest.skip("mounting a tmpfs is not permitted here (needs root); "
                    "test_a_full_disk_as_torch_reports_it_is_named_and_the_cut_file_removed covers the handling")
    try:
        full = dict(section, tokens=64 * 8 * 20, checkpoint_root=str(disk), keep_checkpoints=5)
        r = subprocess.run(_cmd(tmp, tiny_model_dir, full, tmp_path / "out"), cwd=REPO, capture_output=True,
                           text=True, check=False)
        assert r.returncode != 0
        assert re.search(rf"error: {disk}/v/phase1/\w+: no space left on device while v/phase1 saved a checkpoint "
                         r"\([\d,]+ bytes free; one checkpoint takes [\d,]+ bytes \(the newest finished one\); "
                         r"removed the cut-short ep0-ba20-rank0\.pt\)", r.stderr), r.stderr[-3000:]
        ckpt = next(disk.glob("v/phase1/*"))
        assert sorted(p.name for p in ckpt.glob("ep*")) == ["ep0-ba10-rank0.pt"]
        assert _mount_tmpfs(disk, "30m")  # space returns
        r = subprocess.run(_cmd(tmp, tiny_model_dir, full, tmp_path / "out"), cwd=REPO, capture_output=True,
                           text=True, check=False)
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads((tmp_path / "out" / "run.json").read_text())["resumed_from_step"] == 10
        resumed = load_file(tmp_path / "out" / "model" / "model.safetensors")
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True, check=False)
    plain = dict(full, checkpoint_root=str(tmp_path / "plain"))
    subprocess.run(_cmd(tmp, tiny_model_dir, plain, tmp_path / "plain_out"), cwd=REPO, check=True, capture_output=True)
    uninterrupted = load_file(tmp_path / "plain_out" / "model" / "model.safetensors")
    assert all(torch_equal(resumed[k], v) for k, v in uninterrupted.items())


class _Payload:
    """What a hostile user plants: unpickling it runs a command (it touches ``marker``)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _state(run_name: str, step: int) -> dict:
    """The fields of a Composer checkpoint that :class:`RunBinding` reads."""
    return {"state": {"run_name": run_name, "timestamp": {"Timestamp": {"batch": step, "token": step * 512}},
                      "model": {"w": __import__("torch").zeros(2)}}, "rng": [{"numpy": None}]}


def test_a_checkpoint_holding_code_is_refused_without_running_it(tmp_path):
    import pickle

    import torch

    from clmdetour.training.checkpoints import checkpoint_problem, load_optimizer_by_name, safe_loading

    marker = tmp_path / "PWNED"
    planted = tmp_path / "ep0-ba10-rank0.pt"
    torch.save({"state": _Payload(marker)}, planted)
    problem = checkpoint_problem(planted)
    assert problem.startswith("refused: its pickle holds more than tensors and plain data") and "posix.system" in problem
    # Composer's own load asks for weights_only=False; under safe_loading it is a weights_only load all the same
    with safe_loading(), pytest.raises(pickle.UnpicklingError):
        torch.load(planted, map_location="cpu", weights_only=False)
    with pytest.raises(pickle.UnpicklingError):  # phase 1's optimizer state, read by the decay
        load_optimizer_by_name(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]), torch.nn.Linear(1, 1), planted)
    assert not marker.exists()
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ  # restored after the block


def test_a_checkpoint_of_another_run_or_budget_is_moved_aside(tmp_path):
    import torch

    from clmdetour.training.checkpoints import RunBinding, repair_resume_point

    torch.save(_state("mine", 10), tmp_path / "ep0-ba10-rank0.pt")
    torch.save(_state("mine", 20), tmp_path / "ep0-ba20-rank0.pt")         # this run, but past a 15-step budget
    torch.save(_state("another-run", 30), tmp_path / "ep0-ba30-rank0.pt")  # e.g. the same variant at another lr
    torch.save(_state("mine", 35), tmp_path / "ep0-ba40-rank0.pt")         # renamed: its step is not its name's
    (tmp_path / "latest-rank0.pt").symlink_to("ep0-ba40-rank0.pt")
    report = repair_resume_point(tmp_path, RunBinding("mine", max_steps=15))
    reasons = {Path(s["file"]).name: s["reason"] for s in report["skipped"]}
    assert reasons["ep0-ba40-rank0.pt"] == "stores step 35, its file name says 40"
    assert reasons["ep0-ba30-rank0.pt"].startswith("belongs to another run (stored run name 'another-run', this run "
                                                   "is 'mine'")
    assert reasons["ep0-ba20-rank0.pt"] == "stores step 20, past this phase's budget of 15 steps"
    assert report["resume_from"] == "ep0-ba10-rank0.pt" and os.readlink(tmp_path / "latest-rank0.pt") == "ep0-ba10-rank0.pt"
    assert sorted(p.name for p in tmp_path.glob("*.damaged")) == [f"ep0-ba{b}-rank0.pt.damaged" for b in (20, 30, 40)]


@pytest.mark.slow  # two training subprocesses (about 40-60 s each)
def test_planted_checkpoints_are_not_resumed_nor_unpickled(setup, tiny_model_dir):
    """A finished phase's folder gets a newer checkpoint of another run (a real Composer checkpoint with
    another run name), one of this run's name with the weights of another model size, and a newest one
    holding a command: the rerun runs none of them, resumes from its own step-20 checkpoint and ends with
    the uninterrupted run's weights."""
    import torch
    from safetensors.torch import load_file

    from clmdetour.training.checkpoints import safe_load

    tmp, section = setup
    section, out, uninterrupted, ckpt = _finished_phase(setup, tiny_model_dir, "planted")
    for later in ("ep0-ba30-rank0.pt", "ep0-ba40-rank0.pt"):
        (ckpt / later).unlink()
    foreign = safe_load(ckpt / "ep0-ba20-rank0.pt")
    foreign["state"]["run_name"] = "0123456789abcdef"
    foreign["state"]["timestamp"]["Timestamp"]["batch"] = 30
    torch.save(foreign, ckpt / "ep0-ba30-rank0.pt")
    bigger = safe_load(ckpt / "ep0-ba20-rank0.pt")  # this run's name and a step in budget, another model size
    bigger["state"]["timestamp"]["Timestamp"]["batch"] = 25
    embeddings = next(k for k in bigger["state"]["model"] if k.endswith("tok_embeddings.weight"))
    rows, width = bigger["state"]["model"][embeddings].shape
    bigger["state"]["model"][embeddings] = torch.zeros(rows, 2 * width)
    torch.save(bigger, ckpt / "ep0-ba25-rank0.pt")
    marker = tmp / "PWNED"
    torch.save({"state": _Payload(marker)}, ckpt / "ep0-ba40-rank0.pt")
    (ckpt / "latest-rank0.pt").unlink()
    (ckpt / "latest-rank0.pt").symlink_to("ep0-ba40-rank0.pt")
    import shutil

    shutil.rmtree(out)
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not marker.exists()
    run = json.loads((out / "run.json").read_text())
    reasons = [s["reason"] for s in run["resume"]["skipped"]]
    assert reasons[0].startswith("refused: its pickle holds more than tensors") and "belongs to another run" in reasons[1]
    assert reasons[2].startswith("holds the weights of another model size: ")
    assert reasons[2].endswith(f"embeddings.tok_embeddings.weight is {[rows, 2 * width]} there, {[rows, width]} "
                               "in this model")
    assert run["resume"]["resume_from"] == "ep0-ba20-rank0.pt" and run["resumed_from_step"] == 20
    resumed = load_file(out / "model" / "model.safetensors")
    assert all(torch_equal(resumed[k], v) for k, v in uninterrupted.items())


@pytest.mark.parametrize("where", ["root", "run_hash"])
def test_a_file_where_the_checkpoint_folder_goes_is_named_before_the_model_loads(setup, tiny_model_dir, tmp_path,
                                                                                 monkeypatch, where):
    from clmdetour.training import phase
    from clmdetour.training.checkpoints import CheckpointPathError

    tmp, section = setup
    root = tmp_path / "ckpt"
    if where == "root":
        root.write_text("not a folder")
        blocked = root
    else:  # the run-hash folder itself is a file (its name: the hash this run computes)
        from clmdetour.settings import PhaseSettings

        s = PhaseSettings.from_dict(dict(section, checkpoint_root=str(root)), "test")
        data_hash = json.loads((tmp / "corpus" / "manifest.json").read_text())["hashes"]["train_token_ids"]
        blocked = root / "v" / "phase1" / phase.run_hash(s, phase.model_hash(tiny_model_dir), data_hash, 0)
        blocked.parent.mkdir(parents=True)
        blocked.write_text("not a folder")
    monkeypatch.setattr(phase, "build_model", lambda *a, **k: pytest.fail("the model was loaded first"))
    with pytest.raises(CheckpointPathError, match=rf"^{blocked}: is a file, but the phase keeps its checkpoints in the "
                       r"folder .*; move the file away or set pretraining.checkpoint_root"):
        phase.run_phase(input_model=str(tiny_model_dir), corpus_dir=str(tmp / "corpus"), output_dir=str(tmp_path / "o"),
                        section=dict(section, checkpoint_root=str(root)), variant="v", checkpoint_root=str(root))


@pytest.mark.slow  # three training subprocesses of 200 tiny steps (about 20-30 s each)
def test_sigterm_saves_at_the_next_step_and_exits_for_a_retry(setup, tiny_model_dir, tmp_path):
    """SIGTERM (scancel, preemption) mid-phase: the phase saves the step it is on (not the last periodic
    checkpoint's), exits with status 75, and its rerun resumes there and ends with the uninterrupted
    run's weights."""
    import signal

    from safetensors.torch import load_file

    from clmdetour.training.time_limit import EXIT_TIME_LIMIT, STOP_RECORD

    tmp, section = setup
    long = dict(section, tokens=64 * 8 * 200, checkpoint_interval="1000ba", log_interval_steps=1,
                checkpoint_root=str(tmp_path / "ckpt"), keep_checkpoints=5)
    out = tmp_path / "out"
    proc = subprocess.Popen(_cmd(tmp, tiny_model_dir, long, out), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "first.log", "w"))  # noqa: SIM115 (the child writes to it until it ends)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        live = list((tmp_path / "ckpt").glob("v/phase1/*/train_log.jsonl"))
        if live and live[0].stat().st_size:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # by the PID we started
    assert proc.wait(timeout=240) == EXIT_TIME_LIMIT, (tmp_path / "first.log").read_text()[-3000:]
    ckpt = next((tmp_path / "ckpt").glob("v/phase1/*"))
    stop = [json.loads(line) for line in (ckpt / STOP_RECORD).read_text().splitlines()][-1]
    assert stop["event"] == "stop" and stop["reason"] == "SIGTERM" and 0 < stop["step"] < 200  # no periodic save yet
    assert os.readlink(ckpt / "latest-rank0.pt") == f"ep0-ba{stop['step']}-rank0.pt" and not out.exists()

    r = subprocess.run(_cmd(tmp, tiny_model_dir, long, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_step"] == stop["step"] and run["steps"] == 200
    plain = dict(long, checkpoint_root=str(tmp_path / "plain"))
    subprocess.run(_cmd(tmp, tiny_model_dir, plain, tmp_path / "plain_out"), cwd=REPO, check=True, capture_output=True)
    resumed = load_file(out / "model" / "model.safetensors")
    uninterrupted = load_file(tmp_path / "plain_out" / "model" / "model.safetensors")
    assert all(torch_equal(resumed[k], v) for k, v in uninterrupted.items())


@pytest.mark.parametrize("link", ["regular_file", "self", "outside", "directory"])
def test_a_latest_link_composer_did_not_write_is_set_aside_not_trusted(tmp_path, link):
    """latest-rank0.pt as a regular file (another run's checkpoint), a link to itself, a link to a file
    elsewhere or a folder: moved aside with the reason, the folder's own checkpoints kept and checked,
    and the phase resumes from its newest one (before: every checkpoint was deleted, or the file loaded)."""
    import torch

    from clmdetour.training.checkpoints import prepare_checkpoint_dir

    ckpt = tmp_path / "ckpt" / "v" / "phase1" / "mine"
    ckpt.mkdir(parents=True)
    for step in (10, 20):
        torch.save(_state("mine", step), ckpt / f"ep0-ba{step}-rank0.pt")
    latest = ckpt / "latest-rank0.pt"
    if link == "regular_file":
        torch.save(_state("another-run", 30), latest)
    elif link == "self":
        latest.symlink_to("latest-rank0.pt")
    elif link == "outside":
        (tmp_path / "elsewhere").mkdir()
        torch.save(_state("another-run", 20), tmp_path / "elsewhere" / "ep0-ba20-rank0.pt")
        latest.symlink_to(tmp_path / "elsewhere" / "ep0-ba20-rank0.pt")
    else:
        latest.mkdir()
    _, report = prepare_checkpoint_dir(str(tmp_path / "ckpt"), "v", "phase1", "mine", max_steps=100)
    first = report["skipped"][0]
    assert first["file"] == str(latest) and Path(first["moved_to"]).name == "latest-rank0.pt.damaged"
    assert first["reason"].startswith("not a link" if link in ("regular_file", "directory") else "points at")
    assert report["resume_from"] == "ep0-ba20-rank0.pt" and os.readlink(latest) == "ep0-ba20-rank0.pt"
    assert sorted(p.name for p in ckpt.glob("ep*")) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt"]


class _Planted:
    """An arbitrary object: plain data in appearance, but a class of its own, which a weights_only load refuses."""

    def __init__(self):
        self.note = "not an optimizer state"


def test_a_planted_optimizer_state_is_refused_in_one_line_naming_the_file(tmp_path):
    """Issue run-guards item 9: the decay's load of phase 1's final_optimizer.pt refused a planted pickle
    as a raw UnpicklingError whose torch message advised retrying with weights_only=False."""
    import torch

    from clmdetour.errors import ExpectedError
    from clmdetour.training.checkpoints import FINAL_OPTIMIZER, restore_optimizer_state

    planted = tmp_path / FINAL_OPTIMIZER
    torch.save({"encoder.weight": {"exp_avg": _Planted()}}, planted)
    model = torch.nn.Linear(1, 1)

    from types import SimpleNamespace

    trainer = SimpleNamespace(state=SimpleNamespace(optimizers=[torch.optim.AdamW(model.parameters())],
                                                    timestamp=SimpleNamespace(batch=SimpleNamespace(value=0))))
    with pytest.raises(ExpectedError) as e:
        restore_optimizer_state(trainer, model, str(planted))
    message = str(e.value)
    assert message.startswith(f"{planted}: phase 1's optimizer state holds more than tensors and plain data")
    assert "not loaded" in message and "_Planted" in message and "load_optimizer_state" in message
    assert "weights_only=False" not in message and "\n" not in message
    assert not trainer.state.optimizers[0].state  # nothing was loaded


def test_a_complete_checkpoint_without_its_latest_link_is_kept_and_resumed(tmp_path, caplog):
    """Issue run-guards item 1: with latest-rank0.pt gone (a copy that drops symbolic links), every
    checkpoint was deleted as "a save that did not finish" and the phase restarted from step 0. Now the link
    is recreated on the newest checkpoint that passes its checks; only a cut-short file is removed, and a
    complete one that fails its checks is moved aside."""
    import torch

    from clmdetour.training.checkpoints import prepare_checkpoint_dir

    ckpt = tmp_path / "ckpt" / "v" / "phase1" / "mine"
    ckpt.mkdir(parents=True)
    for step in (10, 20):
        torch.save(_state("mine", step), ckpt / f"ep0-ba{step}-rank0.pt")
    (ckpt / "ep0-ba30-rank0.pt").write_bytes(b"PK\x03\x04" + b"x" * 100)  # a save cut short by the kill
    torch.save(_state("another-run", 40), ckpt / "ep0-ba40-rank0.pt")     # complete, but not this run's
    with caplog.at_level("WARNING"):
        _, report = prepare_checkpoint_dir(str(tmp_path / "ckpt"), "v", "phase1", "mine", max_steps=100)
    assert os.readlink(ckpt / "latest-rank0.pt") == "ep0-ba20-rank0.pt"
    assert report["resume_from"] == "ep0-ba20-rank0.pt" and not report["restart"]
    assert report["relinked"] == "ep0-ba20-rank0.pt"
    assert sorted(p.name for p in ckpt.glob("ep*")) == ["ep0-ba10-rank0.pt", "ep0-ba20-rank0.pt",
                                                        "ep0-ba40-rank0.pt.damaged"]
    assert (f"{ckpt}/latest-rank0.pt: missing; recreated it on ep0-ba20-rank0.pt, the newest checkpoint that "
            "passes its checks: the phase resumes from step 20") in caplog.text
    assert "removed checkpoint files of a save that did not finish (the job was killed while writing them): " \
           "ep0-ba30-rank0.pt" in caplog.text
    assert "ep0-ba40-rank0.pt: checkpoint skipped: belongs to another run" in caplog.text


@pytest.mark.slow  # two training subprocesses of 12 tiny steps
def test_a_phase_whose_latest_link_was_lost_resumes_from_its_checkpoint(setup, tiny_model_dir):
    """The state a phase stopped by SIGTERM after its step-8 save leaves, copied without symbolic links: the
    rerun recreates the link, resumes from step 8 (before: the checkpoints were deleted and it restarted
    from step 0) and ends with the uninterrupted run's weights."""
    import shutil

    from safetensors.torch import load_file

    tmp, section = setup
    section = dict(section, tokens=64 * 8 * 12, checkpoint_interval="4ba", keep_checkpoints=5,
                   checkpoint_root=str(tmp / "ckpt_nolink"))
    out = tmp / "nolink"
    subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, check=True, capture_output=True)
    uninterrupted = load_file(out / "model" / "model.safetensors")
    ckpt = next(Path(section["checkpoint_root"]).glob("v/phase1/*"))
    (ckpt / "ep0-ba12-rank0.pt").unlink()
    (ckpt / "latest-rank0.pt").unlink()
    shutil.rmtree(out)
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "latest-rank0.pt: missing; recreated it on ep0-ba8-rank0.pt" in r.stderr
    assert "did not finish" not in r.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["resumed_from_step"] == 8 and run["resume"]["relinked"] == "ep0-ba8-rank0.pt"
    assert sorted(p.name for p in ckpt.glob("ep*"))[:2] == ["ep0-ba12-rank0.pt", "ep0-ba4-rank0.pt"]
    resumed = load_file(out / "model" / "model.safetensors")
    assert all(torch_equal(resumed[k], v) for k, v in uninterrupted.items())


@pytest.mark.parametrize("loss", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_loss_stops_the_phase_at_that_step(loss):
    """Issue run-guards item 2: the loss Composer has already brought to the host is checked after each step."""
    from types import SimpleNamespace

    from clmdetour.errors import ExpectedError
    from clmdetour.training.callbacks import NonFiniteLossError, StopOnNonFiniteLoss

    guard = StopOnNonFiniteLoss("v/phase1", "phase1", "v", "/scratch/v/phase1/abc")
    step = SimpleNamespace(value=7)
    guard.batch_end(SimpleNamespace(timestamp=SimpleNamespace(batch=step), total_loss_dict={"loss/train/total": 2.5}),
                    None)  # a finite loss: nothing happens
    with pytest.raises(NonFiniteLossError) as e:
        guard.batch_end(SimpleNamespace(timestamp=SimpleNamespace(batch=step),
                                        total_loss_dict={"loss/train/total": loss}), None)
    message = str(e.value)
    assert isinstance(e.value, ExpectedError) and "\n" not in message
    assert message.startswith(f"v/phase1: training diverged: the loss is {loss} at step 7")
    assert "pretraining.optimizer.lr" in message and "warmup_tokens" in message and "pretraining.precision" in message
    assert "/scratch/v/phase1/abc" in message


@pytest.mark.slow  # one training subprocess of a few tiny steps
def test_a_diverging_phase_exits_non_zero_and_writes_no_model(setup, tiny_model_dir):
    """lr 1e30 turns the weights to inf after the first step: before, the phase trained to all-NaN weights,
    wrote them as its model and exited 0. Now it stops at the first non-finite loss, exits non-zero with one
    line, writes nothing to its output folder and keeps its earlier checkpoints."""
    tmp, section = setup
    section = dict(section, tokens=64 * 8 * 6, lr=1e30, checkpoint_interval="1ba", keep_checkpoints=10,
                   checkpoint_root=str(tmp / "ckpt_diverge"))
    out = tmp / "diverge"
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode != 0, r.stderr[-3000:]
    m = re.search(r"^(?:\[rank0\]: )?error: v/phase1: training diverged: the loss is (nan|inf|-inf) at step (\d+) ",
                  r.stderr, re.MULTILINE)
    assert m, r.stderr[-3000:]
    bad = int(m.group(2))
    assert "pretraining.optimizer.lr" in m.string[m.start():].splitlines()[0]
    assert not (out / "model").exists() and not (out / "run.json").exists()
    ckpt = next(Path(section["checkpoint_root"]).glob("v/phase1/*"))
    steps = sorted(int(p.name.split("-ba")[1].split("-")[0]) for p in ckpt.glob("ep*-ba*-rank0.pt"))
    assert steps == list(range(1, bad)) and os.readlink(ckpt / "latest-rank0.pt") == f"ep0-ba{bad - 1}-rank0.pt"
    logged = [json.loads(line)["step"] for line in (ckpt / "train_log.jsonl").read_text().splitlines()]
    assert logged == list(range(1, bad))  # the diverged step is not logged as a line holding NaN


def _div_guard(**over):
    from clmdetour.settings import DivergenceSettings
    from clmdetour.training.callbacks import DivergenceGuard

    settings = DivergenceSettings(**{"heldout_evals": 4, "heldout_ratio": 1.5, "train_ratio": 3.0, "patience": 2,
                                     **over})
    heldout = iter([])
    guard = DivergenceGuard("v/phase1", "phase1", "v", "/scratch/v/phase1/abc", lambda: next(heldout), settings,
                            total_steps=40)
    return guard, lambda values: _div_set(guard, values)


def _div_set(guard, values):
    it = iter(values)
    guard.heldout = lambda: next(it)


def _div_state(step, loss):
    from types import SimpleNamespace

    return SimpleNamespace(timestamp=SimpleNamespace(batch=SimpleNamespace(value=step)),
                           total_loss_dict={"loss/train/total": loss})


def test_a_finite_loss_that_explodes_stops_the_phase_and_a_noisy_descent_does_not():
    """Issue data-safe item 2: lr 1.0 took the demo's held-out loss from 8.03 to 50.5 and the training loss
    from 10.7 to 53.6 with exit 0; the guard stops such a phase, naming the step, the loss, its best and the keys."""
    import random

    from clmdetour.training.callbacks import DivergenceError

    rng = random.Random(0)
    guard, feed = _div_guard()
    feed([8.0 - 0.1 * k for k in range(11)])  # held-out: start, then every 10 steps
    guard.fit_start(_div_state(0, 0.0), None)
    for step in range(1, 41):  # a falling, noisy training loss (+-30 %) never trips it
        guard.batch_end(_div_state(step, (10.0 - 0.1 * step) * rng.uniform(0.7, 1.3)), None)
    assert [s for s, _ in guard.history] == [0, 10, 20, 30, 40]

    guard, feed = _div_guard()
    feed([8.03, 9.0, 14.0, 30.0, 50.5])  # held-out: 14 > 1.5 x 8.03, then 30: two in a row
    guard.fit_start(_div_state(0, 0.0), None)
    with pytest.raises(DivergenceError) as e:
        for step in range(1, 41):
            guard.batch_end(_div_state(step, 10.7), None)  # a flat training loss: only the held-out rule trips
    message = str(e.value)
    assert message.startswith("v/phase1: training diverged: held-out loss 30 at step 30 is above 1.5 x its best "
                              "so far (8.03) for 2 checks in a row (pretraining.divergence.heldout_ratio, .patience)")
    assert "pretraining.optimizer.lr" in message and "/scratch/v/phase1/abc" in message and "\n" not in message

    guard, _ = _div_guard(heldout_evals=0)
    assert guard.interval == 0
    with pytest.raises(DivergenceError, match=r"training loss \(mean of the last 10 steps\) .* at step 2[0-9] "
                                              r"is above 3 x its best"):
        for step in range(1, 41):  # 10.7 for 10 steps, then it climbs to 53.6
            guard.batch_end(_div_state(step, 10.7 if step <= 10 else 10.7 + 4.3 * (step - 10)), None)


@pytest.mark.slow  # one training subprocess of 40 tiny steps
def test_lr_one_stops_phase_one_before_its_model_is_written(setup, tiny_model_dir):
    """The demo's phase 1 at lr 1.0 ran to a held-out loss 6x its start and fed the decay; now it stops."""
    tmp, section = setup
    section = dict(section, lr=1.0, checkpoint_root=str(tmp / "ckpt_lr1"),
                   divergence={"heldout_evals": 10, "heldout_ratio": 1.5, "train_ratio": 3.0, "patience": 2})
    out = tmp / "lr1"
    r = subprocess.run(_cmd(tmp, tiny_model_dir, section, out), cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode != 0, r.stderr[-3000:]
    assert re.search(r"^(?:\[rank0\]: )?error: v/phase1: training diverged: (held-out|training) loss", r.stderr,
                     re.MULTILINE), r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]  # a diverged phase is a result: one line, no traceback
    assert not (out / "model").exists() and not (out / "run.json").exists()


def test_a_memorising_phase_near_zero_loss_does_not_trip_the_guard():
    """The SLURM test's slow-clm phase memorises a tiny corpus: its training loss went 0.003 -> 0.012, 4x its best
    but 0.009 nats; a ratio alone stopped it. A loss must also rise by more than MIN_RISE_NATS."""
    from clmdetour.training.callbacks import MIN_RISE_NATS

    guard, _feed = _div_guard(heldout_evals=0)
    for step in range(1, 41):
        guard.batch_end(_div_state(step, 0.003 if step <= 20 else 0.0125), None)  # no DivergenceError
    assert MIN_RISE_NATS == 1.0 and guard.train_strikes == 0


def test_weights_of_another_depth_or_size_are_named_in_one_line():
    import torch

    from clmdetour.training.checkpoints import shape_problem, weight_shapes

    mine = weight_shapes({"model.layers.0.w": torch.zeros(4, 8), "model.head.b": torch.zeros(8)})
    assert shape_problem({"model.model.layers.0.w": torch.zeros(4, 8), "model.model.head.b": torch.zeros(8)},
                         mine) is None  # Composer's extra "model." prefix is not a difference
    deeper = {"model.layers.0.w": torch.zeros(4, 8), "model.layers.1.w": torch.zeros(4, 8),
              "model.head.b": torch.zeros(8)}
    assert shape_problem(deeper, mine) == ("holds the weights of another model: 0 of this model's tensors missing, "
                                           "1 it does not have (first: layers.1.w); another depth or architecture")
    wider = {"model.layers.0.w": torch.zeros(4, 16), "model.head.b": torch.zeros(8)}
    assert shape_problem(wider, mine) == ("holds the weights of another model size: layers.0.w is [4, 16] there, "
                                          "[4, 8] in this model")
    assert shape_problem(None, mine) == "holds no model weights (state.model)"
