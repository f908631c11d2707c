"""The real-input configuration (config/real-small.yaml) end to end, reduced to a subset of ../shared/data.

The subset (first documents of each pretraining source, a few QUAERO and FRACCO files) is copied into
a scratch folder at test time; an overlay on top of config/real-small.yaml points the sources and
tasks at it and shrinks the token budgets. Everything else is the committed configuration.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import REPO, clean_env


def _subset(shared: Path, out: Path) -> dict:
    pre = out / "pretrain"
    pre.mkdir(parents=True)
    for name, n in [("e3c_clinical_cases_fr.jsonl", 150), ("biomed_abstracts_fr.jsonl", 400), ("drug_leaflets_fr.jsonl", 30)]:
        lines = (shared / "pretrain" / name).read_text(encoding="utf-8").splitlines()[:n]
        (pre / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    for split, n in [("train", 120), ("dev", 40), ("test", 40)]:
        src = shared / "quaero/corpus" / split / "MEDLINE"
        dst = out / "quaero/corpus" / split / "MEDLINE"
        dst.mkdir(parents=True)
        for txt in sorted(src.glob("*.txt"))[:n]:
            shutil.copy(txt, dst / txt.name)
            shutil.copy(txt.with_suffix(".ann"), dst / (txt.stem + ".ann"))
    fr = out / "fracco"
    fr.mkdir()
    for txt in sorted((shared / "fracco/brat_raw").glob("cc_onco*.txt"))[:150]:
        ann = txt.with_suffix(".ann")
        if ann.exists():
            shutil.copy(txt, fr / txt.name)
            shutil.copy(ann, fr / ann.name)
    return {"pretrain": pre, "quaero": out / "quaero/corpus", "fracco": fr}


@pytest.mark.slow
def test_real_small_config_end_to_end_on_a_subset(shared_data, tmp_path):
    paths = _subset(shared_data, tmp_path / "data")
    real = yaml.safe_load((REPO / "config/real-small.yaml").read_text())
    for src in real["corpus"]["sources"]:
        src["path"] = str(paths["pretrain"] / Path(src["path"]).name)
    overlay = {
        "corpus": {"sources": real["corpus"]["sources"], "train_tokens": 60_000, "seq_len": 64, "min_chars": 50},
        "base_model": {"build": {"pretrain_tokens": 30_000, "vocab_size": 1500, "hidden_size": 32,
                                 "intermediate_size": 64, "max_position_embeddings": 128}},
        "pretraining": {"phase1": {"tokens": 12_000, "warmup_tokens": 1_000}, "decay": {"tokens": 6_000},
                        "variants": {"clm-long-decay": {"decay": {"tokens": 6_000}}}, "valid_sequences": 8},
        "tasks": {"medline": {"path": str(paths["quaero"]), "seeds": 2, "finetune": {"epochs": 1}},
                  "fracco-30": {"path": str(paths["fracco"]), "seeds": 2, "max_length": 128,
                                "label_set": {"top_k": 10}, "finetune": {"epochs": 1}}},
        "evaluation": {"models": ["clm-detour", "mlm-baseline"], "tasks": ["medline", "fracco-30"]},
        "corpus_extra": None,
    }
    overlay["corpus"]["decontaminate_against"] = ["medline", "fracco-30"]
    del overlay["corpus_extra"]
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay, allow_unicode=True))
    workdir = tmp_path / "run"
    workdir.mkdir()
    cmd = [sys.executable, "-m", "snakemake", "results/eval_table.tsv", "results/release/clm-detour",
           "results/analysis/clm-detour/layer_drift.tsv", "--snakefile", str(REPO / "Snakefile"),
           "--directory", str(workdir), "--cores", "2",
           "--configfiles", str(REPO / "config/config.yaml"), str(REPO / "config/real-small.yaml"),
           str(tmp_path / "overlay.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    manifest = json.loads((workdir / "results/corpus/manifest.json").read_text())
    assert set(manifest["sources"]) == {"scientific_articles", "clinical_cases", "drug_leaflets"}
    assert manifest["sources"]["drug_leaflets"]["licence"] == "CC-BY-NC-4.0"
    assert manifest["decontamination"]["tasks"] == ["fracco-30", "medline"]
    assert all(s["held_apart_for_base_model"] > 0 for s in manifest["sources"].values())
    table = pd.read_csv(workdir / "results/eval_table.tsv", sep="\t")
    assert list(table["model"]) == ["clm-detour", "mlm-baseline", "trivial"]
    table = table.set_index("model")
    for task in ("medline", "fracco-30"):
        assert table.loc[["clm-detour", "mlm-baseline"], f"{task}_n"].tolist() == [2, 2]
        assert table[f"{task}_mean"].between(0, 1).all()
    assert table.loc["trivial", "medline_mean"] == 0  # no entities
    assert table.loc["trivial", "fracco-30_mean"] > 0
    card = (workdir / "results/release/clm-detour/README.md").read_text()
    assert "research use only" in card.lower() or "non-commercial" in card.lower()
    drift = pd.read_csv(workdir / "results/analysis/clm-detour/layer_drift.tsv", sep="\t")
    assert set(drift["phase"]) == {"phase1", "decay"}


def _english_subset(english: Path, out: Path) -> dict:
    """The first documents of the English corpus and of each task split (BC5CDR: whole abstracts)."""
    (out / "corpus").mkdir(parents=True)
    lines = (english / "corpus/ebmnlp_abstracts_en.jsonl").read_text(encoding="utf-8").splitlines()[:300]
    (out / "corpus/ebmnlp_abstracts_en.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for task, n in [("ncbi_disease", {"train": 300, "dev": 80, "test": 80}), ("bc5cdr", {"train": 30, "dev": 8, "test": 8})]:
        (out / task).mkdir()
        for split, keep in n.items():
            blocks = (english / task / f"{split}.txt").read_text(encoding="utf-8").split("\n\n")
            if task == "bc5cdr":  # `keep` abstracts: cut before the (keep + 1)-th -DOCSTART- block
                starts = [i for i, b in enumerate(blocks) if b.lstrip("\n").startswith("-DOCSTART-")]
                blocks = blocks[:starts[keep]] if len(starts) > keep else blocks
            else:
                blocks = blocks[:keep]
            (out / task / f"{split}.txt").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    (out / "chemprot").mkdir()
    for split, keep in [("train", 400), ("dev", 100), ("test", 100)]:
        lines = (english / "chemprot" / f"{split}.txt").read_text(encoding="utf-8").splitlines()[:keep]
        (out / "chemprot" / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"corpus": out / "corpus", "ncbi-disease": out / "ncbi_disease", "bc5cdr": out / "bc5cdr",
            "chemprot": out / "chemprot"}


@pytest.mark.slow
def test_real_small_en_config_end_to_end_on_a_subset(shared_data, tmp_path):
    """profiles/real-small-en's configuration (config.yaml + english.yaml + real-small-en.yaml) on a subset."""
    english = shared_data / "english"
    if not english.exists():
        pytest.skip(f"real English data folder {english} is absent (../shared/data/english beside the checkout)")
    profile = yaml.safe_load((REPO / "profiles/real-small-en/config.yaml").read_text())
    paths = _english_subset(english, tmp_path / "data")
    real = yaml.safe_load((REPO / "config/real-small-en.yaml").read_text())
    for src in real["corpus"]["sources"]:
        src["path"] = str(paths["corpus"] / Path(src["path"]).name)
    tasks = ["ncbi-disease", "bc5cdr", "chemprot"]
    overlay = {
        "corpus": {"sources": real["corpus"]["sources"], "train_tokens": 30_000, "seq_len": 64, "min_chars": 50,
                   "held_apart_fraction": 0.25},
        "base_model": {"build": {"pretrain_tokens": 20_000, "vocab_size": 1500, "hidden_size": 32,
                                 "intermediate_size": 64, "max_position_embeddings": 128}},
        "pretraining": {"phase1": {"tokens": 8_000, "warmup_tokens": 1_000}, "decay": {"tokens": 4_000},
                        "variants": {"clm-long-decay": {"decay": {"tokens": 4_000}}}, "valid_sequences": 8},
        "tasks": {t: {"path": str(paths[t]), "seeds": 1, "max_length": 64, "finetune": {"epochs": 1}} for t in tasks},
        "evaluation": {"models": ["mlm-baseline", "random-init"], "tasks": tasks},
    }
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay, allow_unicode=True))
    workdir = tmp_path / "run"
    workdir.mkdir()
    cmd = [sys.executable, "-m", "snakemake", "results/eval_table.tsv", "results/release/mlm-baseline",
           "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--cores", "2",
           "--configfiles", *[str(REPO / f) for f in profile["configfiles"]], str(tmp_path / "overlay.yaml")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]

    manifest = json.loads((workdir / "results/corpus/manifest.json").read_text())
    assert set(manifest["sources"]) == {"rct_abstracts"}
    assert manifest["decontamination"]["tasks"] == sorted(tasks)
    assert manifest["sources"]["rct_abstracts"]["held_apart_for_base_model"] > 0
    bc5cdr = json.loads((workdir / "results/tasks/bc5cdr/manifest.json").read_text())
    assert bc5cdr["annotations"]["iob1_converted_tags"] > 0  # the shared copy is IOB1
    assert bc5cdr["documents"] == {"train": 30, "dev": 8, "test": 8}
    chemprot = json.loads((workdir / "results/tasks/chemprot/labels.json").read_text())
    assert set(chemprot["labels"]) <= {"CPR:3", "CPR:4", "CPR:5", "CPR:6", "CPR:9"}
    table = pd.read_csv(workdir / "results/eval_table.tsv", sep="\t")
    assert list(table["model"]) == ["mlm-baseline", "random-init", "trivial"]
    table = table.set_index("model")
    for task in tasks:
        assert table.loc[["mlm-baseline", "random-init"], f"{task}_n"].tolist() == [1, 1]
        assert table[f"{task}_mean"].between(0, 1).all()
    assert table.loc["trivial", "ncbi-disease_mean"] == 0 and table.loc["trivial", "bc5cdr_mean"] == 0
    assert table.loc["trivial", "chemprot_mean"] > 0  # the majority CPR group
    card = (workdir / "results/release/mlm-baseline/README.md").read_text()
    assert "language:\n- en" in card and "research" in card.lower()
    assert "bigbio/" not in card and "Biomed-Enriched" not in card  # the shared copies, not the English grid's Hub data
    for french in ("français", "French", "fr\n"):
        assert french not in card, french
