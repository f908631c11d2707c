"""config/english.yaml and config/english-large.yaml: merging, and `snakemake --profile profiles/slurm -n all`.

The BigBIO / CoNLL / relation tasks of the English grid use the task readers of issue #33's
second item (formats bigbio_kb, bigbio_text, keys label_map, entity_markers ...). Until the schema
knows them, these tests plan the overlay without those tasks (an extra overlay sets them to null)
and say so; once the readers are merged the whole grid is planned.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import REPO, clean_env

from clmdetour.config import ConfigError, validate_config

SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
ENGLISH = ["config/config.yaml", "config/english.yaml"]
ENGLISH_LARGE = [*ENGLISH, "config/large.yaml", "config/english-large.yaml"]
FRENCH_NAMES = ("emea", "medline", "fracco", "cantemist", "distemist", "meddialog", "diamed", "quaero",
                "drbert", "camembert", "cpt-fr", "moderncamembert")


def _supported_formats() -> set:
    schema = yaml.safe_load((REPO / "workflow/schemas/tasks.schema.yaml").read_text())
    return set(schema["$defs"]["tasks"]["additionalProperties"]["properties"]["format"]["enum"]) - {None}


def _pending_reader_tasks() -> list[str]:
    """English tasks whose format or keys the schema does not know yet (readers not merged)."""
    schema = yaml.safe_load((REPO / "workflow/schemas/tasks.schema.yaml").read_text())
    known_keys = set(schema["$defs"]["tasks"]["additionalProperties"]["properties"])
    tasks = yaml.safe_load((REPO / "config/english.yaml").read_text())["tasks"]
    return [name for name, spec in tasks.items() if spec is not None and
            (spec.get("format") not in _supported_formats() | {None} or set(spec) - known_keys)]


def _merged(files: list[str], extra: dict | None = None) -> dict:
    """The config Snakemake builds from ``--configfiles files`` (its own recursive merge)."""
    from snakemake.utils import update_config

    config: dict = {}
    for f in files:
        update_config(config, yaml.safe_load((REPO / f).read_text()))
    if extra:
        update_config(config, extra)
    return config


def _without_pending() -> dict:
    return {"tasks": {t: None for t in _pending_reader_tasks()}}


def test_english_overlay_replaces_the_french_grid_and_models():
    config = validate_config(_merged(ENGLISH, _without_pending()))
    assert config["language"] == "en" and config["release"]["language"] == ["en"]
    assert config["base_model"]["hub_id"] == "answerdotai/ModernBERT-base"
    assert [s["hub_id"] for s in config["corpus"]["sources"]] == ["almanach/Biomed-Enriched"]
    assert set(config["reference_models"]) == {"bioclinical-modernbert-base", "modernbert-bio-base"}
    raw = yaml.safe_load((REPO / "config/english.yaml").read_text())["tasks"]
    english = {t for t, spec in raw.items() if spec is not None}
    assert english >= {"anatem", "bc5cdr", "jnlpba", "ncbi-disease", "gad", "hoc", "chemprot", "n2c2-2006-deid"}
    assert set(config["tasks"]) == english - set(_pending_reader_tasks())
    text = json.dumps({k: config[k] for k in ("tasks", "reference_models", "release", "corpus", "base_model")})
    assert not [n for n in FRENCH_NAMES if n in text.lower()], text
    assert "french" not in text.lower()


def test_english_large_overlay_keeps_the_english_large_base():
    config = validate_config(_merged(ENGLISH_LARGE, _without_pending()))
    base = config["base_model"]
    assert (base["key"], base["hub_id"], base["num_layers"]) == ("modernbert-large", "answerdotai/ModernBERT-large", 28)
    assert set(config["reference_models"]) == {"bioclinical-modernbert-large", "modernbert-bio-large"}
    # config/large.yaml's Large sizes and depth-scaled freeze ranges apply
    assert config["cluster"]["pretrain_nodes"] == 2 and config["pretraining"]["micro_batch_sequences"] == "auto"
    assert config["pretraining"]["variants"]["clm-freeze-low"]["phase1"]["freeze"] == ["0-9"]
    assert config["language"] == "en"
    # merged in the wrong order, large.yaml's null hub id stops planning instead of erasing silently
    wrong = ["config/config.yaml", "config/english.yaml", "config/english-large.yaml", "config/large.yaml"]
    with pytest.raises(ConfigError, match="base_model.hub_id is null"):
        validate_config(_merged(wrong, _without_pending()))


def _user_task_fixtures(root: Path) -> dict:
    """Small stand-ins for the English user-provided tasks (a dry run needs only their files)."""
    out = {}
    deid = root / "n2c2-2006-deid"
    deid.mkdir(parents=True)
    for split in ("train", "test"):
        row = {"id": f"{split}-1", "doc_id": f"{split}-doc", "text": "Seen by Dr Smith", "words": ["Seen", "by", "Dr",
               "Smith"], "tags": ["O", "O", "O", "B-DOCTOR"]}
        (deid / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    out["n2c2-2006-deid"] = {"path": str(deid)}
    if "chemprot" not in _pending_reader_tasks():
        chem = root / "chemprot"
        chem.mkdir()
        for split in ("train", "dev", "test"):
            row = {"text": "<< Aspirin >> inhibits [[ COX-1 ]].", "label": "INHIBITOR"}
            (chem / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
        out["chemprot"] = {"path": str(chem)}
    return out


@pytest.fixture(scope="module")
def english_dry_run(tmp_path_factory):
    import snakemake_executor_plugin_slurm  # noqa: F401  (pinned in requirements/base.txt: missing is a failure)

    tmp = tmp_path_factory.mktemp("english")
    work = tmp / "work"
    work.mkdir()
    for name in ("Snakefile", "workflow", "config", "profiles", "src"):
        (work / name).symlink_to(REPO / name)
    extra = tmp / "pending_readers.yaml"
    extra.write_text(yaml.safe_dump({"tasks": {**_without_pending()["tasks"], **_user_task_fixtures(tmp / "data")}}))
    env = clean_env()
    env.update(CLMDETOUR_SLURM_SITE=str(tmp / "absent.yaml"), CLMDETOUR_SLURM_PARTITION="h100")
    r = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm", "-n", "all", "--configfiles", *ENGLISH, str(extra)],
                       cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def test_english_overlay_plans_all_with_the_slurm_profile(english_dry_run):
    out = english_dry_run
    assert _pending_reader_tasks() == []  # every English task's format and keys have a reader: the whole grid planned
    for needed in ("resources/models/modernbert-base", "resources/models/bioclinical-modernbert-base",
                   "resources/models/modernbert-bio-base", "resources/datasets/biomed_enriched",
                   "results/tasks/n2c2-2006-deid", "results/eval_table.md"):
        assert needed in out, needed
    assert "rule finetune:" in out and "rule pretrain_decay:" in out
    planned = out.lower()
    assert not [n for n in FRENCH_NAMES if n in planned]
