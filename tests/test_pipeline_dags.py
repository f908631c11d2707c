"""The DAG of `all` in every shipped config, and what an edit to one variant reschedules (issue wiring).

Built with Snakemake's API in a subprocess (tests/dump_params.py), forcing every job, so
the checks see the whole plan of a fresh run whatever exists on disk.
"""
import json
from pathlib import Path

import pytest
from helpers import REPO, SHARED_DATA
from helpers_dag import plan

PAPER = str(REPO / "config/config.yaml")
SHIPPED = {
    "paper": [PAPER],
    "demo": [PAPER, str(REPO / "config/demo.yaml")],
    "real-small": [PAPER, str(REPO / "config/real-small.yaml")],
    "large": [PAPER, str(REPO / "config/large.yaml")],
    "slurm-test": [PAPER, str(REPO / "config/demo.yaml"), str(REPO / "config/slurm-test.yaml")],
    "real-small-en": [PAPER, str(REPO / "config/english.yaml"), str(REPO / "config/real-small-en.yaml")],
}


def _user_tasks(tmp_path: Path) -> dict:
    """Local stand-ins for the paper's user-provided tasks (so that the paper grid is whole)."""
    folder = tmp_path / "user_tasks"
    folder.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        (folder / f"{split}.jsonl").write_text(f'{{"id": "{split}", "text": "t", "label": "a", "labels": ["a"]}}\n')
    return {t: {"path": str(folder)} for t in ("distemist", "meddialog", "diamed")}


def _workdir(tmp_path: Path, name: str) -> Path:
    if not name.startswith("real-small"):
        return tmp_path
    if not SHARED_DATA.exists():
        pytest.skip(f"real data folder {SHARED_DATA} is absent ({name} reads it)")
    if name == "real-small-en" and not (SHARED_DATA / "english").exists():
        pytest.skip(f"real English data folder {SHARED_DATA / 'english'} is absent (real-small-en reads it)")
    # the real-small data paths are relative to runs/<name> two levels below the checkout
    (tmp_path / "shared").symlink_to(SHARED_DATA.parent)
    work = tmp_path / "checkout" / "runs" / name
    work.mkdir(parents=True)
    return work


@pytest.mark.slow  # a forced DAG per shipped config: about 20 s each
@pytest.mark.parametrize("name", list(SHIPPED))
def test_all_holds_every_final_model_the_table_the_analysis_and_releases(tmp_path, name):
    overrides = {}
    if name == "paper":
        overrides["tasks"] = _user_tasks(tmp_path)
    if name == "large":
        overrides["base_model"] = {"hub_id": "example-org/example-large"}
    rules = {}
    params, config, inputs = plan(_workdir(tmp_path, name), "all", SHIPPED[name], overrides, rules)
    # the rule names clmdetour.pipeline reserves are exactly the workflow's
    assert rules["pipeline"] == rules["workflow"], set(rules["pipeline"]) ^ set(rules["workflow"])
    variants = list(config["pretraining"]["variants"])
    assert len(variants) >= 5, variants
    for v in variants:
        assert f"results/pretrain/{v}/decay/model" in inputs, f"{name}: {v}'s final model is not in all"
    assert {"results/eval_table.tsv", "results/eval_table.md"} <= set(inputs), name
    assert "results/analysis/layer_drift.tsv" in inputs, name
    evaluated = set(config["evaluation"]["models"] or variants)
    releases = {p for p in inputs if p.startswith("results/release/")}
    expected = {f"results/release/{v}" for v in variants if v in evaluated} if config["release"]["licence"] else set()
    assert releases == expected, f"{name}: releases {sorted(releases)}, expected {sorted(expected)}"
    # every variant is pretrained by its own decay job, and analysed
    assert {k for k in params if k.startswith("pretrain_decay[")} == {f"pretrain_decay[variant={v}]" for v in variants}
    assert {k for k in params if k.startswith("layer_drift[")} == {f"layer_drift[variant={v}]" for v in variants}
    # the corpus step: a text job and a token job per shard, one merge (issue 40)
    text_jobs = {k.split("=", 1)[1].rstrip("]") for k in params if k.startswith("corpus_shard_text[")}
    token_jobs = {k.split("=", 1)[1].rstrip("]") for k in params if k.startswith("corpus_shard_tokens[")}
    assert text_jobs and text_jobs == token_jobs and "prepare_corpus[]" in params, name
    assert len(text_jobs) >= len(config["corpus"]["sources"]), name
    if name == "paper":  # 4 Hub sources x corpus.hub_shards
        assert len(text_jobs) == 4 * config["corpus"]["hub_shards"] == 64, sorted(text_jobs)


@pytest.mark.slow
def test_editing_one_variants_phase1_changes_only_its_phase1_job(tmp_path):
    """Only that variant's phase-1 job changes its params (its dependants rerun through their inputs);
    the base model is built from its own section, so even the first variant's edit leaves it alone."""
    variant = "clm-detour"  # the first variant: the base model's params once carried its phase 1
    configfiles = SHIPPED["demo"]
    before, _, _ = plan(tmp_path, "all", configfiles)
    assert "build_base[]" in before
    overlay = tmp_path / "edit.yaml"
    overlay.write_text(f"pretraining:\n  variants:\n    {variant}:\n      phase1:\n        warmup_tokens: 12_288\n")
    after, _, _ = plan(tmp_path, "all", [*configfiles, str(overlay)])
    assert set(after) == set(before)
    changed = sorted(k for k in before if before[k] != after[k])
    # config_used records the whole resolved config: it changes with any edit, by design
    assert changed == ["config_used[]", f"pretrain_phase1[variant={variant}]"], changed


@pytest.mark.slow
def test_the_corpus_and_random_init_wait_for_the_base_models_initialisation_not_its_pretraining(tmp_path):
    """A built base: prepare_corpus and random_init read results/base/init (tokenizer + untrained weights,
    rule base_init), so they and random-init's fine-tunes run beside build_base's MLM pretraining; the
    pretraining budget is not among base_init's params (changing it rebuilds neither the tokenizer nor
    the corpus)."""
    configfiles = SHIPPED["demo"]
    before, _, random_init_input = plan(tmp_path, "random_init", configfiles)
    assert random_init_input == ["results/base/init"]
    assert "base_init[]" in before and "build_base[]" not in before
    overlay = tmp_path / "budget.yaml"
    overlay.write_text("base_model:\n  build:\n    pretrain_tokens: 123_456\n    lr: 1.0e-3\n")
    after, _, corpus_input = plan(tmp_path, "prepare_corpus", [*configfiles, str(overlay)])
    assert "results/base/init" in corpus_input and "results/base/model" not in corpus_input
    assert "build_base[]" not in after
    assert after["base_init[]"] == before["base_init[]"]


@pytest.mark.slow
def test_the_mix_and_packing_keys_rerun_only_the_corpus_merge_and_the_shard_size_replans_the_shards(tmp_path):
    """Issue 40: the shard jobs read only the cleaning keys (clmdetour.corpus.shards.SHARD_TEXT_KEYS), so
    an edit of corpus.train_tokens or seq_len leaves every shard job's params alone."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " + "mot " * 40}) + "\n" for i in range(3000)))  # ~0.6 MB
    overlay = tmp_path / "local.yaml"
    overlay.write_text(f"corpus:\n  sources:\n    - {{name: local, format: jsonl, path: {data}, weight: 1, licence: x}}\n"
                       "  shard_mb: 0.2\n")
    configfiles = [*SHIPPED["demo"], str(overlay)]
    before, _, _ = plan(tmp_path, "prepare_corpus", configfiles)
    shards = sorted(k for k in before if k.startswith("corpus_shard_text["))
    assert shards == [f"corpus_shard_text[shard=local-{k:05d}]" for k in range(3)]
    edit = tmp_path / "edit.yaml"
    edit.write_text("corpus:\n  seq_len: 64\n  seed: 5\n")
    after, _, _ = plan(tmp_path, "prepare_corpus", [*configfiles, str(edit)])
    assert sorted(k for k in before if before[k] != after.get(k)) == ["prepare_corpus[]"]


def test_one_tasks_language_changes_only_that_tasks_preparation(tmp_path):
    """``tasks.{task}.language`` (issue 39): one English task in a French grid reruns that task's
    preparation only (its fine-tunes follow through their input), never the corpus or pretraining."""
    configfiles = SHIPPED["demo"]
    before, _, _ = plan(tmp_path, "all", configfiles)
    overlay = tmp_path / "lang.yaml"
    overlay.write_text("tasks:\n  emea:\n    language: en\n")
    after, _, _ = plan(tmp_path, "all", [*configfiles, str(overlay)])
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == ["config_used[]", "prepare_task[task=emea]"], changed
    assert any("'language': 'en'" in p for p in after["prepare_task[task=emea]"])
