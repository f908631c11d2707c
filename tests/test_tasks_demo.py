"""Demo task sources: deterministic, in the real formats, read by the real loaders with config/demo.yaml."""

import hashlib
from pathlib import Path

import pytest

from clmdetour.config import deep_merge, load_yaml
from clmdetour.demo.tasks import DEFINITION_VERSIONS, DEMO_SOURCES, write_demo_source
from clmdetour.tasks.prepare import build_task

REPO = Path(__file__).resolve().parents[1]


def _digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_demo_source_has_a_definition_version():
    """Rule demo_task_source carries it in its params: a changed definition regenerates a finished source."""
    assert sorted(DEFINITION_VERSIONS) == sorted(DEMO_SOURCES)
    assert all(isinstance(v, int) and v >= 1 for v in DEFINITION_VERSIONS.values())
    smk = (REPO / "workflow/rules/tasks.smk").read_text()
    assert "definition=lambda w: DEMO_DEFINITION_VERSIONS[w.demo_source]" in smk


@pytest.mark.parametrize("name", DEMO_SOURCES)
def test_demo_sources_are_deterministic(tmp_path, name):
    write_demo_source(name, tmp_path / "a", seed=3, n_train=20, n_dev=8, n_test=8)
    write_demo_source(name, tmp_path / "b", seed=3, n_train=20, n_dev=8, n_test=8)
    write_demo_source(name, tmp_path / "c", seed=4, n_train=20, n_dev=8, n_test=8)
    a, b, c = (_digest(tmp_path / x) for x in "abc")
    assert a and a == b
    assert a != c


@pytest.fixture(scope="module")
def demo_built(tmp_path_factory):
    """The 8 demo tasks as config/demo.yaml defines them, built from freshly generated sources."""
    root = tmp_path_factory.mktemp("demo")
    # merged as Snakemake merges --configfile overlays (schema validation is tested with the workflow)
    cfg = deep_merge(load_yaml(REPO / "config" / "config.yaml"), load_yaml(REPO / "config" / "demo.yaml"))
    for name in DEMO_SOURCES:
        write_demo_source(name, root / name, seed=cfg["demo"]["seed"])
    built = {}
    for task, spec in cfg["tasks"].items():
        spec = dict(spec, path=str(root / Path(spec["path"]).name))
        built[task] = (spec, *build_task(task, spec))
    return built


def test_demo_tasks_match_the_real_types_and_sizes(demo_built):
    real = load_yaml(REPO / "config" / "config.yaml")["tasks"]
    assert set(demo_built) == set(real)
    for task, (spec, rows, labels, man) in demo_built.items():
        assert labels["type"] == real[task]["type"], task
        assert spec["seeds"] >= 3 and spec["finetune"]["epochs"] >= 1 and spec["max_length"] in (64, 128)
        n = man["counts"]
        assert 250 <= n["train"] <= 380 and 70 <= n["dev"] <= 130 and 70 <= n["test"] <= 130, (task, n)
        assert len(labels["labels"]) >= 2, task
    groups = ["ANAT", "CHEM", "DEVI", "DISO", "GEOG", "LIVB", "OBJC", "PHEN", "PHYS", "PROC"]
    assert demo_built["medline"][2]["labels"] == groups
    # leaflets have no places: GEOG (like PHEN) enters EMEA only through label noise, when the draw puts it in train
    assert set(groups) - {"GEOG", "PHEN"} <= set(demo_built["emea"][2]["labels"]) <= set(groups)
    assert len(demo_built["fracco-30"][2]["labels"]) == 30
    assert all("/" in c for c in demo_built["cantemist"][2]["labels"])
    icdo = demo_built["fracco-30"][3]["icdo"]
    assert icdo["junk"]["bare_digits"] > 0 and icdo["junk"]["tocheck"] > 0 and icdo["annotator_notes"]["trad"] > 0


def test_demo_labels_are_learnable_but_noisy(demo_built):
    """Meddialog: the topic is the list of the term asked about for most rows, not all (label noise)."""
    from clmdetour.demo.generator import DIALOGUE_TOPICS

    _, rows, _, _ = demo_built["meddialog"]
    agree = total = 0
    for r in rows["train"]:
        hits = {s for s, terms in DIALOGUE_TOPICS.items() if any(t in r["text"] for t in terms)}
        if len(hits) == 1:
            total += 1
            agree += hits == {r["label"]}
    assert total > 200
    assert 0.8 < agree / total < 0.97


def test_demo_problem_lists_are_labelled_by_the_topics_of_their_terms(demo_built):
    """DISTEMIST (demo): the label set is the topics of the listed terms for most rows, not all (label noise)."""
    from clmdetour.demo.generator import DIALOGUE_TOPICS

    _, rows, labels, _ = demo_built["distemist"]
    assert labels["labels"] == sorted(DIALOGUE_TOPICS)
    agree = 0
    for r in rows["train"]:
        listed = r["text"].split(" : ", 1)[1].split(".")[0].split(" ; ")
        topics = {s for s, terms in DIALOGUE_TOPICS.items() if any(t in terms for t in listed)}
        agree += topics == set(r["labels"])
    assert 0.8 < agree / len(rows["train"]) < 0.97


def test_demo_fracco_tasks_form_one_document_group(demo_built):
    from clmdetour.evaluation.task_groups import document_groups

    tasks = list(demo_built)
    groups = document_groups(tasks, {t: demo_built[t][3] for t in tasks})
    assert ["fracco-30", "fracco-100", "cantemist"] in groups
    assert sorted(len(g) for g in groups) == [1] * (len(tasks) - 3) + [3]


def test_demo_dev_test_use_vocabulary_held_out_of_train(demo_built):
    """Dev/test documents use corpus terms that the train split never shows (docs/tasks.md, 'Held-out vocabulary')."""
    from clmdetour.demo import vocabulary as V
    from clmdetour.demo.generator import DIALOGUE_TOPICS

    eval_terms = {t for terms in DIALOGUE_TOPICS.values() for t in V.held_out(terms, "eval")}
    train_terms = {t for terms in DIALOGUE_TOPICS.values() for t in V.held_out(terms, "train")}
    for task in ("meddialog", "distemist", "diamed"):  # the topic tasks
        _, rows, _, _ = demo_built[task]
        assert all(not any(t in r["text"] for t in eval_terms) for r in rows["train"]), task
        assert all(any(t in r["text"] for t in eval_terms) for r in rows["test"]), task
        assert not any(t in r["text"] for r in rows["test"] for t in train_terms - eval_terms if len(t) > 6), task
    # cantemist: train names the tumour in full, test by its abbreviation only
    _, rows, _, _ = demo_built["cantemist"]
    abbr = set(V.MORPHOLOGY_ABBREVIATIONS.values())
    assert sum(any(a in r["text"] for a in abbr) for r in rows["train"]) <= 0.05 * len(rows["train"])
    assert sum(any(a in r["text"] for a in abbr) for r in rows["test"]) >= 0.9 * len(rows["test"])
    # the corpus has them all, and the referral / service sentences that relate them to the labels
    from clmdetour.demo.generator import generate_corpus

    text = " ".join(r["text"] for r in generate_corpus(2000, seed=1))  # the demo corpus has 4,000 (+ 2,500 base)
    assert all(t in text for t in eval_terms) and "service de cardiologie" in text
    # every held-out diagnosis right after one of its chapter's investigation frames (DiaMed)
    for term, chapter in V.held_out(V.DISEASES, "eval"):
        assert any(frame + term in text for frame in V.CHAPTER_FRAMES[chapter]), term
