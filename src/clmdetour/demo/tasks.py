"""Demo versions of the 8 evaluation tasks, written as source files in the real formats.

Generated with :mod:`clmdetour.demo.generator` so that the same loaders read
them as the real data (``clmdetour.tasks.prepare``):

| demo source | tasks | format | content |
|---|---|---|---|
| ``quaero`` | emea, medline | BRAT ``{train,dev,test}/{EMEA,MEDLINE}/`` | drug leaflets (long files, sentence segmentation) and titles (one per file), 10 QUAERO groups; some nested spans |
| ``fracco`` | fracco-30, fracco-100, cantemist | BRAT folder (no split: hash split) | oncology case reports; ``morphologie`` / ``topographie`` / ``expression_CIM`` entities with ``ICD-O`` notes, plus junk notes (``tocheck``, bare digits, ``AnnotatorNotes trad``) |
| ``distemist`` | distemist | JSONL ``{train,dev,test}.jsonl`` (``id``, ``text``, ``labels``) | a note's problem list of one or two terms -> their topics (multilabel; :func:`clmdetour.demo.generator.generate_problem_list`) |
| ``meddialog`` | meddialog | JSONL (``id``, ``text``, ``label``) | patient question + answer -> the topic of the term asked about (multiclass) |
| ``diamed`` | diamed | JSONL (``id``, ``text``, ``label``) | an admission note's reason, one term -> its topic (multiclass; :func:`clmdetour.demo.generator.generate_admission`) |

Sizes: ``n_train`` / ``n_dev`` / ``n_test`` examples per split (defaults 300 /
100 / 100; for ``fracco`` the documents are hash-split, so the split sizes are
close to, not exactly, these; for ``emea`` they count sentences).
Label noise: a fraction ``noise`` (default 0.1) of examples (NER: of entities)
gets a wrong label drawn from the train label set, so scores stay below 1.0.
Dev/test examples whose true label was not generated in train are
re-drawn, so every dev/test label is seen in train. Everything derives from
``seed``: equal seeds give byte-identical files.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from clmdetour.demo import generator as G
from clmdetour.demo import vocabulary as V
from clmdetour.io import atomic_output_dir, atomic_write_text
from clmdetour.tasks.brat import sentence_spans
from clmdetour.tasks.split import hash_split

FRACCO_DEV_FRACTION = FRACCO_TEST_FRACTION = 0.2  # config/demo.yaml's split of the fracco tasks

DEMO_SOURCES = ("quaero", "fracco", "distemist", "meddialog", "diamed")
# The version of each source's definition: rule demo_task_source carries it in its params, so a
# finished run regenerates a source (and reruns what depends on it) when its definition changes.
# distemist and diamed 2: the topic tasks of the positive control (docs/tasks.md, "Demo tasks").
DEFINITION_VERSIONS = {"quaero": 1, "fracco": 1, "distemist": 2, "meddialog": 1, "diamed": 2}
QUAERO_GROUPS = ["ANAT", "CHEM", "DEVI", "DISO", "GEOG", "LIVB", "OBJC", "PHEN", "PHYS", "PROC"]
_MORPH = {t: c for t, c in V.MORPHOLOGY} | {V.MORPHOLOGY_ABBREVIATIONS[t].lower(): c for t, c in V.MORPHOLOGY}
_TOPO = {t: c for t, c in V.TOPOGRAPHY}
def _ann_lines(text: str, entities: list[tuple[int, int, str]], rng: random.Random, noise: float) -> list[str]:
    """BRAT ``T`` lines for entities, with label noise and occasional nested last-word ANAT spans."""
    lines = []
    n = 0
    for s, e, typ in entities:
        if rng.random() < noise:
            typ = rng.choice([g for g in QUAERO_GROUPS if g != typ])
        n += 1
        lines.append(f"T{n}\t{typ} {s} {e}\t{text[s:e]}")
        words = list(re.finditer(r"\w+", text[s:e]))
        if len(words) > 1 and rng.random() < 0.15:
            w = words[-1]
            n += 1
            lines.append(f"T{n}\tANAT {s + w.start()} {s + w.end()}\t{w.group()}")
    return lines


def _write_brat(folder: Path, stem: str, text: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.txt").write_text(text, encoding="utf-8")
    (folder / f"{stem}.ann").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def _part(split: str) -> str:
    """Vocabulary part of a split (:func:`clmdetour.demo.generator.vocabulary_part`)."""
    return "train" if split == "train" else "eval"


def _write_quaero(out: Path, rng: random.Random, sizes: dict, noise: float) -> None:
    for split, n in sizes.items():
        with G.vocabulary_part(_part(split)):
            _write_quaero_split(out, rng, split, n, noise)


def _write_quaero_split(out: Path, rng: random.Random, split: str, n: int, noise: float) -> None:
    if True:
        for i in range(n):
            doc = G.generate_title(rng)
            _write_brat(out / split / "MEDLINE", f"{split}{i:04d}", doc.text, _ann_lines(doc.text, doc.entities, rng, noise))
        sentences, f = 0, 0
        while sentences < n:
            parts, ents, offset = [], [], 0
            for _ in range(4):
                doc = G.generate_leaflet(rng)
                parts.append(doc.text)
                ents.extend((s + offset, e + offset, t) for s, e, t in doc.entities)
                offset += len(doc.text) + 1
                sentences += len(sentence_spans(doc.text, doc.entities))
            text = "\n".join(parts)
            _write_brat(out / split / "EMEA", f"{split}{f:03d}", text, _ann_lines(text, ents, rng, noise))
            f += 1


def _oncology_case(rng: random.Random) -> G.DemoDocument:
    return G.generate_case(rng, oncology=True)


def _write_fracco(out: Path, rng: random.Random, n_docs: int, noise: float) -> None:
    codes_m = sorted(set(_MORPH.values()))
    codes_t = sorted(set(_TOPO.values()))
    out.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        # the split that prepare_task's hash rule will give this document (demo.yaml: fractions 0.2 / 0.2,
        # default salt); a document generated for train but split elsewhere would only weaken the demo
        split = hash_split(f"cc_demo{i:04d}", FRACCO_DEV_FRACTION, FRACCO_TEST_FRACTION, "clmdetour")
        with G.vocabulary_part(_part(split)):
            doc = _oncology_case(rng)
        text, t_lines, notes = doc.text, [], []
        noisy = rng.random() < noise
        n = 0
        spans = []
        for s, e, group in doc.entities:
            term = text[s:e]
            if group == "DISO" and term.lower() in _MORPH:
                spans.append((s, e, "morphologie", _MORPH[term.lower()]))
            elif group == "ANAT" and term in _TOPO:
                spans.append((s, e, "topographie", _TOPO[term]))
        if noisy and spans:
            k = rng.randrange(len(spans))
            s, e, typ, code = spans[k]
            pool = codes_m if typ == "morphologie" else codes_t
            spans[k] = (s, e, typ, rng.choice([c for c in pool if c != code]))
        for s, e, typ, code in spans:
            n += 1
            t_lines.append(f"T{n}\t{typ} {s} {e}\t{text[s:e]}")
            notes.append((f"T{n}", "ICD-O", code))
            if rng.random() < 0.05:
                notes.append((f"T{n}", "AnnotatorNotes", "trad"))
        morph = [x for x in spans if x[2] == "morphologie"]
        topo = [x for x in spans if x[2] == "topographie"]
        if morph and topo and morph[0][0] < topo[0][0]:
            n += 1
            s, e = morph[0][0], topo[0][1]
            t_lines.append(f"T{n}\texpression_CIM {s} {e}\t{text[s:e]}")
            joined = f"{topo[0][3]} {morph[0][3]}"
            if len(morph) > 1 and len(topo) > 1:
                joined += f";{topo[1][3]} {morph[1][3]}"
            notes.append((f"T{n}", "ICD-O", joined))
        m = re.search("|".join(V.DIFFERENTIATION), text)
        if m:
            n += 1
            t_lines.append(f"T{n}\tdifferenciation {m.start()} {m.end()}\t{m.group()}")
            notes.append((f"T{n}", "ICD-O", str(V.DIFFERENTIATION.index(m.group()) + 1)))
        if rng.random() < 0.05 and n:
            notes.append((f"T{rng.randint(1, n)}", "ICD-O", "tocheck"))
        lines = t_lines + [f"#{j}\t{kind} {target}\t{value}" for j, (target, kind, value) in enumerate(notes, start=1)]
        _write_brat(out, f"cc_demo{i:04d}", text, lines)


def _write_jsonl_task(out: Path, name: str, rng: random.Random, sizes: dict, noise: float, make,
                      multilabel: bool) -> None:
    """``make(rng) -> (text, label or labels)``; train first, then dev/test restricted to train labels."""
    out.mkdir(parents=True, exist_ok=True)
    train_labels: list[str] = []
    seen: set[str] = set()
    for split, n in sizes.items():
        rows = []
        while len(rows) < n:
            with G.vocabulary_part(_part(split)):
                text, y = make(rng)
            ys = y if multilabel else [y]
            if split != "train" and any(label not in train_labels for label in ys):
                continue
            if split == "train":
                seen.update(ys)
            if rng.random() < noise:
                pool = train_labels if split != "train" else sorted(seen)
                if multilabel and ys:
                    k = rng.randrange(len(ys))
                    ys = sorted(set(ys[:k] + [rng.choice(pool)] + ys[k + 1:]))
                elif not multilabel and len(pool) > 1:
                    ys = [rng.choice([p for p in pool if p != ys[0]])]
            rows.append({"id": f"{name}-{split}-{len(rows):04d}", "text": text,
                         **({"labels": ys} if multilabel else {"label": ys[0]})})
        if split == "train":
            train_labels = sorted({label for r in rows for label in (r["labels"] if multilabel else [r["label"]])})
        atomic_write_text(out / f"{split}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _distemist_example(rng: random.Random):
    doc = G.generate_problem_list(rng)
    return doc.text, doc.labels["topics"]


def _meddialog_example(rng: random.Random):
    doc = G.generate_dialogue(rng)
    return doc.text, doc.labels["topic"]


def _diamed_example(rng: random.Random):
    doc = G.generate_admission(rng)
    return doc.text, doc.labels["topic"]


def write_demo_source(name: str, out_dir: str | Path, seed: int, n_train: int = 300, n_dev: int = 100,
                      n_test: int = 100, noise: float = 0.1) -> None:
    """Write one demo task source (table in the module doc) atomically to ``out_dir``.

    Args:
        name: one of :data:`DEMO_SOURCES`.
        out_dir: destination folder (replaced when complete).
        seed: random seed; mixed with ``name`` so sources differ.
        n_train, n_dev, n_test: examples per split (see module doc).
        noise: fraction of examples (NER: entities) with a wrong label, in [0, 1).

    Raises:
        ValueError: unknown ``name``, non-positive sizes or ``noise`` outside [0, 1).
    """
    if name not in DEMO_SOURCES:
        raise ValueError(f"demo task source {name!r} is not one of {DEMO_SOURCES}")
    if min(n_train, n_dev, n_test) <= 0 or not 0 <= noise < 1:
        raise ValueError(f"demo sizes must be positive and noise in [0, 1); got {n_train}/{n_dev}/{n_test}, {noise}")
    rng = random.Random(f"{seed}:{name}")
    sizes = {"train": n_train, "dev": n_dev, "test": n_test}
    with atomic_output_dir(out_dir) as tmp:
        if name == "quaero":
            _write_quaero(tmp, rng, sizes, noise)
        elif name == "fracco":
            _write_fracco(tmp, rng, n_train + n_dev + n_test, noise)
        else:
            make = {"distemist": _distemist_example, "meddialog": _meddialog_example, "diamed": _diamed_example}[name]
            _write_jsonl_task(tmp, name, rng, sizes, noise, make, multilabel=name == "distemist")
