"""Rescore and the seed records as strict as the table (issue 65 item 5): a record that cannot be read, is not a
record, or is missing beside its saved predictions makes `rescore` exit 1; no record holds a non-JSON number."""

from __future__ import annotations

import json
import math

from clmdetour.evaluation.rescore import main as rescore_main
from clmdetour.io import atomic_write_json, json_safe


def _strict_load(text: str):
    def refuse(name):
        raise ValueError(f"non-JSON number {name}")

    return json.loads(text, parse_constant=refuse)


def test_strict_json_writes_non_finite_numbers_as_null(tmp_path):
    record = {"lr_sweep": {"seed_dev": [0.5, -math.inf, math.nan], "dev_mean": (math.inf, 0.25)}, "n": 3}
    assert json_safe(record) == {"lr_sweep": {"seed_dev": [0.5, None, None], "dev_mean": [None, 0.25]}, "n": 3}
    atomic_write_json(tmp_path / "seed0.json", record, strict=True)
    assert _strict_load((tmp_path / "seed0.json").read_text())["lr_sweep"]["seed_dev"] == [0.5, None, None]
    atomic_write_json(tmp_path / "loose.json", record)  # the default keeps Python's spelling (run records)
    assert "-Infinity" in (tmp_path / "loose.json").read_text()


def test_seed_record_writer_is_strict(tmp_path):
    from types import SimpleNamespace

    from clmdetour.finetune.records import write_seed_record

    record = {"model": "m", "task": "t", "seed": 0, "status": "diverged", "lr_sweep": {"seed_dev": [-math.inf]}}
    write_seed_record(tmp_path / "seed0.json", record, SimpleNamespace(labels=[]))
    assert _strict_load((tmp_path / "seed0.json").read_text())["lr_sweep"]["seed_dev"] == [None]


def test_rescore_exits_1_on_a_record_it_cannot_read(tmp_path, capsys):
    run = tmp_path / "eval" / "m" / "t"
    run.mkdir(parents=True)
    (run / "seed0.json").write_text("{not json")
    (run / "seed1.json").write_text("[1, 2]")
    (run / "seed2.predictions.json.gz").write_bytes(b"")  # its record was deleted
    (run / "seed3.json").write_text(json.dumps({"status": "failed", "error": "x"}))
    assert rescore_main([str(tmp_path / "eval")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"{run / 'seed0.json'}: UNREADABLE: record unreadable") for line in out), out
    assert f"{run / 'seed1.json'}: UNREADABLE: not a seed record: list" in out, out
    assert any(line.startswith(f"{run / 'seed2.json'}: UNREADABLE") for line in out), out
    assert f"{run / 'seed3.json'}: failed (nothing to rescore)" in out
    assert out[-1] == "4 record(s) rescored, 3 differ or cannot be read"
    (run / "seed0.json").unlink()
    (run / "seed1.json").unlink()
    (run / "seed2.predictions.json.gz").unlink()
    assert rescore_main([str(tmp_path / "eval")]) == 0  # a failed seed alone has nothing to rescore
