"""Issue run-guards item 8: a full disk is named, wherever the pipeline writes.

Only a phase's checkpoint saves named their folder when the disk filled up. A fine-tune record, a scratch
run or a table gave ``OSError: [Errno 28] No space left on device`` with no path, and a phase's model folder
``SafetensorError ... os error 28``. Every write now raises :class:`clmdetour.io.DiskSpaceError` naming the
path and the bytes free there, and leaves nothing half-written.
"""

from __future__ import annotations

import errno
import io as pyio
import os
import re
import subprocess

import pytest

FREE = r"\((\d{1,3}(,\d{3})*) bytes free there"


def _full_disk_writes(monkeypatch):
    """Make every file ``clmdetour.io`` opens for writing fail as a full disk does, after a partial write."""
    import clmdetour.io as cio

    real_fdopen = os.fdopen

    class FullFile(pyio.TextIOWrapper):
        def write(self, text):
            super().write(text[:10])
            super().flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    def fdopen(fd, mode="r", *args, **kwargs):
        if "w" not in mode:
            return real_fdopen(fd, mode, *args, **kwargs)
        return FullFile(real_fdopen(fd, "wb"), encoding=kwargs.get("encoding", "utf-8"))

    monkeypatch.setattr(cio.os, "fdopen", fdopen)


def _names_path_and_free_bytes(error, path) -> None:
    from clmdetour.errors import ExpectedError
    from clmdetour.io import DiskSpaceError

    assert isinstance(error, DiskSpaceError) and isinstance(error, ExpectedError) and error.errno == errno.ENOSPC
    message = str(error)
    assert message.startswith(f"{path}: no space left on device while writing it"), message
    assert re.search(FREE, message), message
    assert "\n" not in message


def test_a_record_on_a_full_disk_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    from clmdetour.io import atomic_write_json

    _full_disk_writes(monkeypatch)
    out = tmp_path / "results" / "finetune" / "seed0.json"
    with pytest.raises(OSError) as e:
        atomic_write_json(out, {"status": "ok"})
    _names_path_and_free_bytes(e.value, out)
    assert list(out.parent.iterdir()) == []  # neither the record nor its temporary file


def test_a_scratch_run_on_a_full_disk_names_the_file(tmp_path, monkeypatch):
    from clmdetour.finetune.finished import FinishedRuns

    store = FinishedRuns(tmp_path / "scratch", "k" * 16, model="m", task="t", model_digest="d", metric="f1_macro")
    _full_disk_writes(monkeypatch)
    with pytest.raises(OSError) as e:
        store.put(0, 1e-4, {"wall_s": 1.0})
    _names_path_and_free_bytes(e.value, store.folder / "seed0-lr0.0001.json")
    assert list(store.folder.iterdir()) == []


def test_an_output_folder_on_a_full_disk_names_it_and_keeps_the_last_version(tmp_path):
    """SafetensorError (what save_pretrained raises) inside versioned_output_dir: named, temporary removed."""
    from safetensors import SafetensorError

    from clmdetour.io import atomic_output_dir, versioned_output_dir

    out = tmp_path / "release" / "v"
    with versioned_output_dir(out) as tmp:
        (tmp / "model.safetensors").write_bytes(b"complete")
    for writer in (versioned_output_dir, atomic_output_dir):
        target = out if writer is versioned_output_dir else tmp_path / "corpus"
        with pytest.raises(OSError) as e, writer(target) as tmp:
            (tmp / "model.safetensors").write_bytes(b"cut")
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        _names_path_and_free_bytes(e.value, target)
        assert isinstance(e.value.__cause__, SafetensorError)
        assert not [p for p in target.parent.rglob("*.tmp")]
    assert (out / "model.safetensors").read_bytes() == b"complete"
    assert not (tmp_path / "corpus").exists()


def test_a_phase_model_on_a_full_disk_names_its_folder(tmp_path, monkeypatch, demo_tokenizer):
    """The end of a phase: save_pretrained's safetensors write fails as it does on a full disk."""
    import torch
    import transformers.modeling_utils as mu
    from helpers import tiny_modernbert
    from safetensors import SafetensorError
    from transformers import AutoModelForMaskedLM

    from clmdetour.training.phase import write_outputs

    model = AutoModelForMaskedLM.from_pretrained(tiny_modernbert(demo_tokenizer, tmp_path / "base"))

    def save_file(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(mu, "safe_save_file", save_file)

    from types import SimpleNamespace

    trainer = SimpleNamespace(state=SimpleNamespace(optimizers=[torch.optim.AdamW(model.parameters())]))

    (tmp_path / "ckpt").mkdir()
    out = tmp_path / "results" / "pretrain" / "v" / "phase1"
    with pytest.raises(OSError) as e:
        write_outputs(trainer=trainer, model=model, tokenizer=demo_tokenizer, output_dir=str(out),
                      ckpt_dir=tmp_path / "ckpt", record={}, loss_end=0.0, keep_checkpoints=0)
    _names_path_and_free_bytes(e.value, out / "model")
    assert not list(out.rglob("*.safetensors")) and not list(out.rglob("*.tmp"))


def test_a_figure_on_a_full_disk_names_it(tmp_path, monkeypatch):
    from clmdetour.analysis.plots import _pyplot, save_figure

    fig = _pyplot().figure()

    def savefig(path, **kwargs):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fig, "savefig", savefig)
    with pytest.raises(OSError) as e:
        save_figure(fig, [tmp_path / "drift.png"])
    _names_path_and_free_bytes(e.value, tmp_path / "drift.png")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs (needs root, or CAP_SYS_ADMIN); skipped where mounting is not permitted."""
    where = tmp_path / "small"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True,
                       text=True, check=False)
    if r.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_a_real_full_disk_is_named(full_disk, demo_tokenizer):
    """A table larger than the disk, then a model folder: both named with the bytes free, nothing left."""
    from helpers import tiny_modernbert
    from transformers import AutoModelForMaskedLM

    from clmdetour.io import atomic_write_text, versioned_output_dir

    table = full_disk / "eval_table.tsv"
    with pytest.raises(OSError) as e:
        atomic_write_text(table, "x" * 200_000)
    _names_path_and_free_bytes(e.value, table)
    assert list(full_disk.iterdir()) == []

    model = AutoModelForMaskedLM.from_pretrained(tiny_modernbert(demo_tokenizer, full_disk.parent / "base"))
    with pytest.raises(OSError) as e, versioned_output_dir(full_disk / "model") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
    _names_path_and_free_bytes(e.value, full_disk / "model")
    assert not list(full_disk.rglob("*.safetensors"))


def test_a_task_download_a_rank_marker_and_the_live_training_log_name_a_full_disk(tmp_path, monkeypatch):
    """data-safe item 9: three writes that bypassed the full-disk handling: a task download said "download failed"
    (and left its partial archive), the rank check said the folder was "not shared", and the live training log
    raised a raw OSError."""
    import io
    import pathlib
    import urllib.request
    from types import SimpleNamespace

    from clmdetour.io import DiskSpaceError
    from clmdetour.tasks import fetch
    from clmdetour.training import ranks
    from clmdetour.training.callbacks import TrainLog

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"x" * 100))
    real_open = open
    dest = tmp_path / "archive.zip"
    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Full() if str(p) == str(dest)
                        else real_open(p, mode, *a, **k))
    with pytest.raises(DiskSpaceError) as e:
        fetch._download("https://example.org/a.zip", dest, 10)
    _names_path_and_free_bytes(e.value, dest)
    assert not dest.exists()
    monkeypatch.setattr("builtins.open", real_open)

    def full_write_text(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", full_write_text)
    with pytest.raises(DiskSpaceError, match=r"rank 0 on .*: .*\.shared-folder-check.*: no space left on device"):
        ranks.check_shared_folder(tmp_path / "ckpt")
    monkeypatch.undo()

    log = TrainLog(str(tmp_path / "train_log.jsonl"), interval=1)
    log.fit_start(SimpleNamespace(timestamp=SimpleNamespace(get=lambda unit: SimpleNamespace(value=0))), None)
    state = SimpleNamespace(timestamp=SimpleNamespace(batch=SimpleNamespace(value=1), token=SimpleNamespace(value=64),
                                                      get=lambda unit: SimpleNamespace(value=64)),
                            total_loss_dict={"loss/train/total": 2.0},
                            optimizers=[SimpleNamespace(param_groups=[{"lr": 1e-4}])])
    monkeypatch.setattr("builtins.open", lambda p, mode="r", *a, **k: Full() if str(p) == log.path
                        else real_open(p, mode, *a, **k))
    with pytest.raises(DiskSpaceError) as e:
        log.batch_end(state, SimpleNamespace(log_metrics=lambda metrics: None))
    _names_path_and_free_bytes(e.value, tmp_path / "train_log.jsonl")
