"""clmdetour.training.time_limit: the SLURM end-time watcher (fake squeue, fake clock, real Composer)."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime
from pathlib import Path

import pytest
import torch

from clmdetour.training.time_limit import (
    EXIT_TIME_LIMIT,
    STOP_RECORD,
    SlurmTimeLimit,
    TimeLimitError,
    parse_slurm_time,
    slurm_job_end_time,
    time_limit_callbacks,
)

torch.set_num_threads(1)


def _fake_squeue(tmp_path: Path, output: str, status: int = 0) -> Path:
    """An executable that records its arguments and prints ``output`` (what squeue would)."""
    script = tmp_path / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$*" >> "{tmp_path}/squeue.calls"\n'
        f'printf "%s\\n" "$SLURM_TIME_FORMAT" >> "{tmp_path}/squeue.format"\n'
        f"printf '{output}'\n"
        f"exit {status}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_parse_slurm_time_local_iso_and_no_limit_words():
    assert parse_slurm_time("2031-05-06T07:08:09\n") == datetime(2031, 5, 6, 7, 8, 9).timestamp()
    for word in ("N/A", "NONE", "Unknown", "UNLIMITED", ""):
        assert parse_slurm_time(word) is None
    with pytest.raises(TimeLimitError, match="not a YYYY-MM-DDTHH:MM:SS"):
        parse_slurm_time("tomorrow at noon")


def test_outside_slurm_no_callback_and_no_squeue_call(tmp_path):
    squeue = _fake_squeue(tmp_path, "2031-05-06T07:08:09\\n")
    assert time_limit_callbacks(300, environ={}, squeue=str(squeue)) == []
    assert not (tmp_path / "squeue.calls").exists()


def test_inside_slurm_reads_end_time_once_and_applies_margin(tmp_path):
    squeue = _fake_squeue(tmp_path, "2031-05-06T07:08:09\\n")
    [cb] = time_limit_callbacks(90, environ={"SLURM_JOB_ID": "4242"}, squeue=str(squeue))
    end = datetime(2031, 5, 6, 7, 8, 9).timestamp()
    assert isinstance(cb, SlurmTimeLimit)
    assert cb.end_time == end and cb.deadline == end - 90 and cb.job_id == "4242"
    assert (tmp_path / "squeue.calls").read_text().splitlines() == ["-h -j 4242 -o %e"]
    assert (tmp_path / "squeue.format").read_text().splitlines() == ["standard"]


def test_default_margin_is_the_schemas_300_s(tmp_path):
    from pathlib import Path

    from clmdetour.config import load_yaml, resolve_phase, validate_config

    config = validate_config(load_yaml(Path(__file__).resolve().parents[1] / "config/config.yaml"))
    margin = resolve_phase(config, "clm-detour", "phase1")["checkpoint_margin_s"]
    squeue = _fake_squeue(tmp_path, "2031-05-06T07:08:09\\n")
    [cb] = time_limit_callbacks(margin, environ={"SLURM_JOB_ID": "7"}, squeue=str(squeue))
    assert margin == 300 and cb.end_time - cb.deadline == 300


def test_job_without_time_limit_or_unreadable_end_time_gets_no_callback(tmp_path, caplog):
    assert time_limit_callbacks(300, environ={"SLURM_JOB_ID": "7"}, squeue=str(_fake_squeue(tmp_path, "NONE\\n"))) == []
    broken = _fake_squeue(tmp_path, "", status=1)
    with caplog.at_level("WARNING"):
        assert time_limit_callbacks(300, environ={"SLURM_JOB_ID": "7"}, squeue=str(broken)) == []
    assert "no time-limit checkpoint for SLURM job 7" in caplog.text
    with pytest.raises(TimeLimitError, match="not found"):
        slurm_job_end_time("7", squeue=str(tmp_path / "no-such-squeue"))
    with pytest.raises(TimeLimitError, match="printed 2 lines"):
        slurm_job_end_time("7", squeue=str(_fake_squeue(tmp_path, "2031-05-06T07:08:09\\n2031-05-06T07:08:09\\n")))


def test_negative_margin_is_refused():
    with pytest.raises(ValueError, match="checkpoint_margin_s must be >= 0"):
        SlurmTimeLimit(end_time=1e9, margin_s=-1)


# --- a real Composer run with a fake clock -------------------------------------------------------


class FakeClock:
    """Unix time that advances ``batch_s`` seconds per trained batch (see AdvanceClock)."""

    def __init__(self, start: float, batch_s: float):
        self.now = start
        self.batch_s = batch_s

    def __call__(self) -> float:
        return self.now


def _trainer(folder: Path, callbacks: list, max_batches: int = 20):
    from composer import Trainer
    from composer.core import Callback
    from composer.models import ComposerClassifier

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(160, 4), torch.randint(0, 2, (160,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)
    model = ComposerClassifier(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)),
                               num_classes=2)

    class Steps(Callback):
        def __init__(self):
            self.steps = []

        def batch_end(self, state, logger):
            self.steps.append(int(state.timestamp.batch.value))

    steps = Steps()
    trainer = Trainer(model=model, train_dataloader=loader, max_duration=f"{max_batches}ba",
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.1), device="cpu",
                      save_folder=str(folder), save_filename="ep{epoch}-ba{batch}-rank{rank}.pt",
                      save_interval="1000ba", save_overwrite=False, autoresume=True, run_name="tl", seed=3,
                      callbacks=[steps, *callbacks], progress_bar=False, log_to_console=False)
    return trainer, steps, model


def test_checkpoint_before_deadline_then_resume_at_next_step(tmp_path):
    from composer.core import Callback

    clock = FakeClock(start=1_000_000.0, batch_s=10.0)

    class AdvanceClock(Callback):  # runs before the watcher: each batch "takes" 10 s
        def batch_end(self, state, logger):
            clock.now += clock.batch_s

    # End 200 s after the start, 120 s margin: deadline at +80 s. After batch b the time is
    # +10 b and one more batch takes 10 s, so the watcher stops at b = 7 (70 + 10 >= 80).
    watcher = SlurmTimeLimit(end_time=clock.now + 200, margin_s=120, job_id="99", clock=clock)
    folder = tmp_path / "ckpt"
    trainer, steps, _ = _trainer(folder, [AdvanceClock(), watcher])
    with pytest.raises(SystemExit) as exit_info:
        trainer.fit()
    trainer.close()
    assert exit_info.value.code == EXIT_TIME_LIMIT
    assert watcher.stop_step == 7 and steps.steps == list(range(1, 8))
    assert (folder / "ep0-ba7-rank0.pt").is_file()
    assert os.path.realpath(folder / "latest-rank0.pt") == str((folder / "ep0-ba7-rank0.pt").resolve())
    records = [json.loads(line) for line in (folder / STOP_RECORD).read_text().splitlines()]
    assert [(r["event"], r["step"], r["job_id"]) for r in records] == [("start", 0, "99"), ("stop", 7, "99")]
    assert records[1]["time"] <= watcher.deadline and records[1]["checkpoint"].endswith("ep0-ba7-rank0.pt")

    # The retried job (fresh process state, same folder): autoresume from step 7, first step 8.
    resumed, steps2, model2 = _trainer(folder, [])
    assert int(resumed.state.timestamp.batch.value) == 7
    resumed.fit()
    resumed.close()
    assert steps2.steps == list(range(8, 21))

    # Same weights as a run that was never interrupted.
    straight, _, model3 = _trainer(tmp_path / "straight", [])
    straight.fit()
    straight.close()
    for (name, a), (_, b) in zip(model2.named_parameters(), model3.named_parameters()):
        assert torch.equal(a, b), name


def test_last_batch_finishes_instead_of_exiting(tmp_path):
    from composer.core import Callback

    clock = FakeClock(start=0.0, batch_s=10.0)

    class AdvanceClock(Callback):
        def batch_end(self, state, logger):
            clock.now += clock.batch_s

    # Deadline reached exactly at the final (5th) batch: the run completes normally.
    watcher = SlurmTimeLimit(end_time=60, margin_s=0, clock=clock)
    trainer, steps, _ = _trainer(tmp_path / "ckpt", [AdvanceClock(), watcher], max_batches=5)
    trainer.fit()
    trainer.close()
    assert steps.steps == [1, 2, 3, 4, 5] and watcher.stop_step == 5


def test_trainer_without_save_folder_is_refused(tmp_path):
    from composer import Trainer
    from composer.models import ComposerClassifier

    model = ComposerClassifier(torch.nn.Linear(4, 2), num_classes=2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8).long()),
                                         batch_size=4)
    with pytest.raises(ValueError, match="needs a Trainer with save_folder"):
        Trainer(model=model, train_dataloader=loader, max_duration="1ba", device="cpu",
                optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
                callbacks=[SlurmTimeLimit(end_time=1e12, margin_s=10)], progress_bar=False)
