"""The evaluation rules through Snakemake: params scoping (dry run) and one real fine-tune job."""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers_dag import plan

REPO = Path(__file__).resolve().parents[1]
CONFIGS = [str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]


def _snakemake(workdir, *args, config=None):
    files = list(CONFIGS)
    if config:  # an overlay written as a file: --config would read nested numbers as strings
        overlay = Path(workdir) / "overlay.yaml"
        overlay.write_text(config)
        files.append(str(overlay))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--configfiles", *files, "--cores", "1", *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=600, check=False)


def _finetune_commands(workdir, config=None):
    """(model, task) -> the params of its fine-tuning job, from a forced plan of the table."""
    files = list(CONFIGS)
    if config:  # an overlay written as a file: --config would read nested numbers as strings
        overlay = Path(workdir) / "overlay.yaml"
        overlay.write_text(config)
        files.append(str(overlay))
    params, _, _ = plan(Path(workdir), "all", files)  # all holds the table and every fine-tune
    cmds = {}
    for key, values in params.items():
        if key.startswith("finetune["):
            wildcards = dict(kv.split("=", 1) for kv in key[len("finetune["):-1].split(","))
            cmds[(wildcards["model"], wildcards["task"])] = values
    return cmds


@pytest.mark.slow  # two Snakemake dry runs: 12 s (the unit stage keeps its 5-minute budget)
def test_editing_one_task_changes_only_that_tasks_finetune_jobs(tmp_path):
    before = _finetune_commands(tmp_path)
    assert len(before) == 3 * 5  # demo grid: 3 models x 5 tasks, one job each (all seeds and lr grid points inside)
    after = _finetune_commands(tmp_path, config="tasks: {diamed: {finetune: {epochs: 4}}}\n")
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {(m, "diamed") for m, _ in before}
    # a task's own lr grid changes only that task's jobs
    after = _finetune_commands(tmp_path, config="tasks: {diamed: {finetune: {lr_grid: [0.001, 0.002]}}}\n")
    assert {k for k in before if before[k] != after[k]} == {(m, "diamed") for m, _ in before}
    # the shared grid changes the jobs of every task without its own (demo.yaml: emea and diamed have theirs)
    after = _finetune_commands(tmp_path, config="evaluation: {lr_grid: [0.001, 0.002]}\n")
    own_grid = {t for t, spec in yaml.safe_load(Path(CONFIGS[1]).read_text())["tasks"].items()
                if "lr_grid" in (spec.get("finetune") or {})}
    assert own_grid and not own_grid >= {t for _, t in before}  # the demo has tasks of both kinds
    assert {k for k in before if before[k] != after[k]} == {k for k in before if k[1] not in own_grid}
    # table-only settings reach no fine-tune job
    after = _finetune_commands(tmp_path, config="evaluation: {report_scale: 1}\n")
    assert after == before


@pytest.mark.slow
def test_one_finetune_job_writes_every_seed(tmp_path):
    """Runs rule finetune alone on a demo-size model and a 300-example task; prints its wall time."""
    import torch
    from helpers import tiny_modernbert_config, train_tokenizer
    from helpers_finetune import demo_task_rows, write_task_folder
    from transformers import ModernBertForMaskedLM

    from clmdetour.demo.generator import generate_corpus

    tok = train_tokenizer([r["text"] for r in generate_corpus(300, seed=3)], vocab_size=2048)
    torch.manual_seed(0)
    # the other special-token ids: ModernBertConfig's own (ModernBERT's vocabulary), as this model always had
    cfg = tiny_modernbert_config(len(tok), hidden_size=96, num_hidden_layers=6, num_attention_heads=4,
                                 global_attn_every_n_layers=3, local_attention=32, max_position_embeddings=512,
                                 pad_token_id=tok.pad_token_id, cls_token_id=50281, sep_token_id=50282,
                                 bos_token_id=50281, eos_token_id=50282)
    base = tmp_path / "results/base/model"
    ModernBertForMaskedLM(cfg).save_pretrained(base)
    tok.save_pretrained(base)
    rows = demo_task_rows("multiclass", 420, seed=5, noise=0.1)
    write_task_folder(tmp_path / "results/tasks/diamed", "diamed", "multiclass",
                      {"train": rows[:300], "dev": rows[300:360], "test": rows[360:]}, "f1_macro")
    targets = [f"results/eval/demo-base/diamed/seed{s}.json" for s in range(3)]
    t0 = time.perf_counter()
    # "--" ends --allowed-rules' list (it would swallow the targets); one epoch keeps the test short
    r = _snakemake(tmp_path, "--allowed-rules", "finetune", "--", *targets,
                   config="tasks: {diamed: {finetune: {epochs: 1, lr_grid: [0.001]}}}\n")
    wall = time.perf_counter() - t0
    log = (tmp_path / "logs/finetune/demo-base/diamed.log")
    assert r.returncode == 0, r.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")
    recs = [json.loads((tmp_path / t).read_text()) for t in targets]
    assert [r["seed"] for r in recs] == [0, 1, 2] and all(r["status"] == "ok" for r in recs)
    assert (tmp_path / "results/benchmarks/finetune/demo-base/diamed.tsv").exists()
    print(f"finetune job (3 seeds) via snakemake: {wall:.1f} s; per seed: {[r['wall_time_s'] for r in recs]}")


def test_random_init_goes_before_ready_fine_tunes(tmp_path):
    """random_init gates its fine-tunes: it has the pretraining chain's priority, so that it does not wait,
    as a priority-0 job would, until no fine-tune of a pretrained model is ready (real-small: 6 minutes on one core)."""
    from clmdetour.pipeline.paths import PRETRAIN_PRIORITY

    r = _snakemake(tmp_path, "-n", "--forceall", "--", "results/random-init/model")
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    block = (r.stdout + r.stderr).split("rule random_init:", 1)[1].split("\n\n", 1)[0]
    assert f"priority: {PRETRAIN_PRIORITY}\n" in block + "\n", block
