"""The files researchers actually have, and the bad inputs they bring.

One table: each case writes a small file set made for the purpose, then either
loads it cleanly with the right values or fails with one error that names the
file, key or line. Task cases go through ``prepare_task`` into a fresh output
folder: a refused task leaves no output and no temporary folder behind.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from clmdetour.tasks.prepare import build_task, prepare_task
from clmdetour.tasks.spec import TaskError, resolve_task_spec

# ------------------------------------------------------------------ helpers


def _w(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def _sentences(n: int, start: int = 0, stem: str = "phrase") -> list[str]:
    """Distinct texts of 6+ words (so that the split-overlap check does not fire by accident)."""
    return [f"{stem} numéro {i} du patient hospitalisé aujourd'hui" for i in range(start, start + n)]


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _mc_rows(prefix: str, n: int, start: int = 0) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": t, "label": "a" if i % 2 else "b"}
            for i, t in enumerate(_sentences(n, start), start=start)]


def _mc_jsonl_task(root: Path, **files) -> dict:
    """A multiclass jsonl task with distinct train/dev/test rows (files may be overridden), ids read from 'id'."""
    defaults = {"train.jsonl": _jsonl(_mc_rows("t", 8)), "dev.jsonl": _jsonl(_mc_rows("d", 4, 100)),
                "test.jsonl": _jsonl(_mc_rows("e", 4, 200))}
    defaults.update(files)
    for name, data in defaults.items():
        if data is not None:
            _w(root / name, data)
    return {"type": "multiclass", "source": "jsonl", "path": str(root), "id_field": "id"}


def _brat(root: Path, split: str, stem: str, text: str | bytes, ann: str | bytes) -> None:
    _w(root / split / f"{stem}.txt", text)
    _w(root / split / f"{stem}.ann", ann)


def _brat_task(root: Path, docs: dict[str, tuple[str | bytes, str | bytes]], **over) -> dict:
    """A BRAT ner task: ``docs`` go to train; dev and test get one plain document each with the same types."""
    for stem, (text, ann) in docs.items():
        _brat(root, "train", stem, text, ann)
    for split in ("dev", "test"):
        text = f"Le {split} signale une fièvre et une douleur thoracique."
        a, b = text.index("fièvre"), text.index("douleur")
        _brat(root, split, f"{split}1", text, f"T1\tDISO {a} {a + 6}\tfièvre\nT2\tDISO {b} {b + 7}\tdouleur\n")
    return {"type": "ner", "source": "brat", "path": str(root), **over}


def _words_tags(rows, doc_prefix: str) -> list[tuple[str, str]]:
    return [(w, t) for r in rows if r["id"].startswith(doc_prefix) for w, t in zip(r["words"], r["tags"])]


def _labels_by_id(rows) -> dict[str, list[str]]:
    return {r["id"]: r["labels"] for r in rows}


# ------------------------------------------------------------------ cases
# Each case: (root) -> (spec, check) for a task, where check(rows, labels, manifest) asserts the values,
# or -> (spec, regex) for a refused task; non-task cases return ("call", fn, check_or_regex).


def case_csv_bom_header(root):
    """Issue example: a CSV whose header starts with a BOM kept its ids (today: id read as '\\ufeffid')."""
    body = "id,text,label\r\n" + "".join(f"r{i},{t},{'a' if i % 2 else 'b'}\r\n" for i, t in enumerate(_sentences(6)))
    _w(root / "train.csv", "\ufeff" + body)
    _w(root / "dev.csv", "\ufeffid,text,label\r\nd1,un texte de développement assez long ici,a\r\n")
    _w(root / "test.csv", "\ufeffid,text,label\r\ne1,un texte de test assez long pour compter,b\r\n")

    def check(rows, labels, man):
        assert [r["id"] for r in rows["train"]] + [r["id"] for r in rows["dev"]] == [
            "r0", "r1", "r2", "r3", "r4", "r5", "d1"]
        assert man["ids"]["train"] == "field 'id'"
    return {"type": "multiclass", "source": "csv", "path": str(root), "id_field": "id"}, check


CRLF_TEXT = "Patient de 45 ans.\r\nDouleur thoracique.\r\nFièvre à 39."


def case_brat_crlf_offsets_one_char(root):
    """Issue example: CRLF .txt, .ann counting each line break as one character (today: T2 covers '\\nDouleu')."""
    lf = CRLF_TEXT.replace("\r\n", "\n")
    d, f = lf.index("Douleur"), lf.index("Fièvre")  # 19 and 39 (CRLF as 2 characters: 20 and 41)
    ann = f"T1\tLIVB 0 7\tPatient\nT2\tDISO {d} {d + 7}\tDouleur\nT3\tDISO {f} {f + 6}\tFièvre\n"

    def check(rows, labels, man):
        wt = dict(_words_tags(rows["train"], "crlf"))
        assert wt["Patient"] == "B-LIVB" and wt["Douleur"] == "B-DISO" and wt["Fièvre"] == "B-DISO"
        assert man["annotations"]["offsets_line_breaks_as_one"] == 1
    return _brat_task(root, {"crlf": (CRLF_TEXT, ann)}, entity_types=None, label_set={"unseen": "drop"},
                      max_unlabelled_fraction=1.0), check


def case_brat_crlf_offsets_two_chars(root):
    """The other convention: offsets count CRLF as 2 characters; loads as written."""
    d, f = CRLF_TEXT.index("Douleur"), CRLF_TEXT.index("Fièvre")  # 20 and 41
    ann = f"T1\tDISO {d} {d + 7}\tDouleur\nT2\tDISO {f} {f + 6}\tFièvre\n"

    def check(rows, labels, man):
        wt = dict(_words_tags(rows["train"], "crlf"))
        assert wt["Douleur"] == "B-DISO" and wt["Fièvre"] == "B-DISO"
        assert man["annotations"].get("offsets_line_breaks_as_one", 0) == 0
    return _brat_task(root, {"crlf": (CRLF_TEXT, ann)}), check


def case_brat_crlf_offsets_fit_neither(root):
    """Offsets that fit neither convention: the error names the .ann line and the line endings."""
    ann = "T1\tDISO 20 27\tDouleur\nT2\tDISO 40 46\tFièvre\n"  # T1 as CRLF = 2, T2 as CRLF = 1
    return _brat_task(root, {"crlf": (CRLF_TEXT, ann)}), (
        r"crlf\.ann:2: entity T2 .*CRLF line endings.*neither.*counted as 1")


def case_brat_bom_txt_and_ann(root):
    """A .txt and a .ann saved with a BOM: offsets that do not count it fit; the .ann's first line is read."""
    text = "\ufeffUne fièvre modérée."
    ann = "\ufeffT1\tDISO 4 10\tfièvre\n"

    def check(rows, labels, man):
        assert _words_tags(rows["train"], "bom") == [("Une", "O"), ("fièvre", "B-DISO"), ("modérée", "O"), (".", "O")]
        assert man["annotations"]["offsets_without_bom"] == 1
    return _brat_task(root, {"bom": (text, ann)}), check


def case_brat_relation_to_a_missing_entity_counted(root):
    """A relation line naming an entity the .ann does not define (a cut or hand-edited file): counted in the
    manifest (it was ignored without a word); the entities themselves are read as before."""
    text = "Une fièvre et une toux."
    ann = "T1\tDISO 4 10\tfièvre\nT2\tDISO 18 22\ttoux\nR1\tAssoc Arg1:T1 Arg2:T2\nR2\tAssoc Arg1:T1 Arg2:T9\n"

    def check(rows, labels, man):
        assert man["annotations"]["references_to_missing_entities"] == 1
        assert _words_tags(rows["train"], "rel")[1] == ("fièvre", "B-DISO")
    return _brat_task(root, {"rel": (text, ann)}), check


def case_brat_nfd_text(root):
    """NFD text (e + U+0301): words never split inside a character and come out in NFC."""
    text = unicodedata.normalize("NFD", "Une fièvre élevée persiste.")
    surface = unicodedata.normalize("NFD", "fièvre élevée")
    ann = f"T1\tDISO 4 {4 + len(surface)}\t{surface}\n"

    def check(rows, labels, man):
        assert _words_tags(rows["train"], "nfd") == [("Une", "O"), ("fièvre", "B-DISO"), ("élevée", "I-DISO"),
                                                     ("persiste", "O"), (".", "O")]
        assert all(unicodedata.is_normalized("NFC", w) for r in rows["train"] for w in r["words"])
    return _brat_task(root, {"nfd": (text, ann)}), check


def case_conll_cr_line_endings_and_comments(root):
    """Issue example: '# sent_id = 1' and '# text O' lines are comments, not words; CR-only line endings."""
    train = "# sent_id = 1\r# text O\rUne O\rfièvre B-DISO\r\r# sent_id = 2\rLe O\rpatient B-LIVB\r"
    _w(root / "train.conll", train)
    _w(root / "dev.conll", "Une O\rdouleur B-DISO\r")
    _w(root / "test.conll", "# sent_id = 9\nLe O\rpatient B-LIVB\r\n")

    def check(rows, labels, man):
        assert [r["words"] for r in rows["train"]] == [["Une", "fièvre"], ["Le", "patient"]]
        assert rows["train"][0]["tags"] == ["O", "B-DISO"] and labels["labels"] == ["DISO", "LIVB"]
    return {"type": "ner", "source": "conll", "path": str(root), "max_unlabelled_fraction": 1.0,
            "max_split_overlap": 1.0}, check


def case_tsv_quote_swallows_rows(root):
    """Issue example: a TSV field starting with '"' kept 5 rows as 5 (today: 2, one holding tabs and newlines)."""
    rows = ['id\ttext\tlabels', 'q1\t"Citation sans fin\tA|B'] + [
        f"q{i}\t{t}\tA" for i, t in zip(range(2, 6), _sentences(4))]
    _w(root / "train.tsv", "\n".join(rows) + "\n")
    _w(root / "dev.tsv", 'id\ttext\tlabels\nd1\t"x" y est une citation de cinq mots\tB\n')
    _w(root / "test.tsv", "id\ttext\tlabels\ne1\tun texte de test assez long\tA|B\n")

    def check(out, labels, man):
        assert man["counts"]["train"] == 5
        first = out["train"][0]
        assert first["text"] == '"Citation sans fin' and first["labels"] == ["A", "B"]
        assert out["dev"][0]["text"] == '"x" y est une citation de cinq mots'  # issue example: quotes kept
    return {"type": "multilabel", "source": "tsv", "path": str(root), "label_field": "labels"}, check


def case_tsv_tab_inside_field(root):
    """A row with one field too many (a tab inside the text) is refused, naming the line."""
    _mc_jsonl_task(root)
    _w(root / "train.tsv", "id\ttext\tlabel\nr1\tun\ttexte\ta\n")
    for s in ("dev", "test"):
        _w(root / f"{s}.tsv", f"id\ttext\tlabel\n{s}1\tun texte\ta\n")
    return {"type": "multiclass", "source": "tsv", "path": str(root)}, r"train\.tsv:2: 4 fields, the header has 3"


def case_csv_quoting_option_for_tsv(root):
    """quoting: csv reads an Excel-style TSV whose quoted field holds a tab."""
    _w(root / "train.tsv", 'id\ttext\tlabel\nr1\t"avec\tune tabulation dedans ici"\ta\nr2\tautre texte de six mots ici\tb\n')
    for s in ("dev", "test"):
        _w(root / f"{s}.tsv", f"id\ttext\tlabel\n{s}1\tun texte court\ta\n")

    def check(rows, labels, man):
        assert rows["train"][0]["text"] == "avec\tune tabulation dedans ici"
    return {"type": "multiclass", "source": "tsv", "path": str(root), "quoting": "csv"}, check


def case_id_field_misnamed(root):
    """Issue example: a configured id_field absent from the file is refused (today: silent <stem>-<line> ids)."""
    return ({**_mc_jsonl_task(root), "id_field": "doc_id"},
            r"train\.jsonl:1: id field 'doc_id' \(id_field\) missing")


def case_id_field_absent_default(root):
    """id_field null: no field is an id, not even 'id' (dev has one): every id is generated, and the manifest says so."""
    rows = [{"text": t, "label": "a" if i % 2 else "b"} for i, t in enumerate(_sentences(6))]
    spec = {**_mc_jsonl_task(root, **{"train.jsonl": _jsonl(rows)}), "id_field": None}

    def check(out, labels, man):
        assert [r["id"] for r in out["train"]][:2] == ["train-1", "train-2"]
        assert [r["id"] for r in out["dev"]] == ["dev-1", "dev-2", "dev-3", "dev-4"]  # dev's 'id' field is not read
        assert man["ids"]["train"] == "generated: <file stem>-<line> (6 rows; id_field is null)"
        assert man["ids"]["dev"] == ("generated: <file stem>-<line> (4 rows; id_field is null; 4 rows have an 'id' "
                                     "field, not read: set tasks.bad.id_field: id to use it)")
    return spec, check


def case_splits_without_dev(root):
    """Issue example: a splits map without dev (today: KeyError 'dev'): dev derived from train by hash, test kept."""
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(_mc_rows("t", 40)), "dev.jsonl": None})
    spec.update(splits={"train": "train.jsonl", "test": "test.jsonl"}, split={"dev_fraction": 0.25})

    def check(out, labels, man):
        from clmdetour.tasks.split import hash_unit

        assert man["counts"]["test"] == 4 and man["counts"]["train"] + man["counts"]["dev"] == 40
        assert {r["id"] for r in out["dev"]} == {f"t{i}" for i in range(40) if hash_unit(f"t{i}", "clmdetour") < 0.25}
        assert man["split"]["dev"]["derived_from"] == "train"
    return spec, check


def case_splits_without_test(root):
    """A splits map without test names the key."""
    spec = _mc_jsonl_task(root)
    spec["splits"] = {"train": "train.jsonl", "dev": "dev.jsonl"}
    return spec, r"tasks\.bad\.splits\.test: the splits map needs 'test'"


def case_conll_hash_split_by_document(root):
    """Issue example: a hash split of a CoNLL file keeps each -DOCSTART- document in one split (today: by sentence)."""
    lines = []
    for d in range(36):
        lines.append("-DOCSTART- -X- O O\n")
        for s in range(3):
            lines.append(f"Phrase O\n{d} O\nnuméro O\n{s} O\navec O\nfièvre B-DISO\n\n")
    _w(root / "all.conll", "".join(lines))

    def check(out, labels, man):
        docs = {split: {r["id"] for r in rows} for split, rows in out.items()}
        assert sum(len(v) for v in docs.values()) == 108
        # each document's 3 sentences sit together in one split
        assert all(len(rows) % 3 == 0 for rows in out.values())
        assert man["split"]["unit"].startswith("document")
    return {"type": "ner", "source": "conll", "path": str(root / "all.conll"), "max_split_overlap": 1.0,
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}, check


def case_json_array_as_jsonl(root):
    """Issue example: a JSON array file given as jsonl is read (today: a message that does not say it is an array)."""
    spec = _mc_jsonl_task(root, **{"train.jsonl": json.dumps(_mc_rows("t", 6), ensure_ascii=False, indent=2)})

    def check(out, labels, man):
        assert [r["id"] for r in out["train"]] == [f"t{i}" for i in range(6)]
    return spec, check


def case_pretty_printed_json_object(root):
    """One JSON object over several lines is named as such."""
    spec = _mc_jsonl_task(root, **{"dev.jsonl": json.dumps({"id": "d", "text": "x", "label": "a"}, indent=2)})
    return spec, r"dev\.jsonl: the file is one JSON object spread over several lines"


def case_text_from_several_fields(root):
    """Issue example: text_field takes a list of fields, dotted paths allowed, joined by text_separator."""
    def rows(prefix, n, start):
        return [{"id": f"{prefix}{i}", "meta": {"title": f"Titre {i}"}, "abstract": t, "label": "a" if i % 2 else "b"}
                for i, t in enumerate(_sentences(n, start), start=start)]
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(rows("t", 6, 0)), "dev.jsonl": _jsonl(rows("d", 2, 50)),
                                   "test.jsonl": _jsonl(rows("e", 2, 60))})
    spec.update(text_field=["meta.title", "abstract"], text_separator=" | ")

    def check(out, labels, man):
        assert out["train"][0]["text"] == "Titre 0 | phrase numéro 0 du patient hospitalisé aujourd'hui"
    return spec, check


def case_wrong_label_separator(root):
    """Issue example: ';' on '|'-separated labels (today: 161 'labels', 66 test rows unlabelled, job succeeds)."""
    codes = [f"C{i:02d}" for i in range(12)]

    def rows(prefix, n, start, step):
        return [f"{prefix}{i}\t{t}\t{codes[i % 12]}|{codes[(i + step) % 12]}"
                for i, t in zip(range(start, start + n), _sentences(n, start))]
    for split, (n, start, step) in {"train": (40, 0, 1), "dev": (10, 100, 5), "test": (10, 200, 5)}.items():
        _w(root / f"{split}.tsv", "\n".join(["id\ttext\tlabels"] + rows(split[0], n, start, step)) + "\n")
    return ({"type": "multilabel", "source": "tsv", "path": str(root), "label_field": "labels",
             "label_separator": ";"},
            (r"test rows .* have no label seen in train .*label_separator is ';'; a raw label value: 'C\d\d\|C\d\d' "
             r"\(.*test\.tsv:2\)"))


def case_many_unseen_labels(root):
    """Many unseen labels: the error counts them and suggests the label field, not 'unseen: drop'."""
    test = [{"id": f"e{i}", "text": t, "label": f"z{i}"} for i, t in enumerate(_sentences(6, 300))]
    spec = _mc_jsonl_task(root, **{"test.jsonl": _jsonl(test)})
    return spec, r"test\.jsonl:1: label 'z0' in test is not in train; 6 distinct test labels in 6 of 6 rows.*check label_field 'label'"


def case_same_file_train_and_test(root):
    """Issue example: the same file copied to train and test is refused (today: prepared without a word)."""
    data = _jsonl(_mc_rows("t", 8))
    spec = _mc_jsonl_task(root, **{"test.jsonl": data.replace('"id": "t', '"id": "e')})
    return spec, (r"tasks\.bad: 8 of 8 test examples \(100\.0 %\) have the same text .*max_split_overlap = 0\.01; "
                  r"e\.g\. test ids \['e0', 'e1', 'e2'\]")


def case_dev_file_copied_from_train(root):
    """A dev split identical to train is refused (it was recorded in the manifest and accepted)."""
    data = _jsonl(_mc_rows("t", 8))
    spec = _mc_jsonl_task(root, **{"dev.jsonl": data.replace('"id": "t', '"id": "d')})
    spec["max_split_overlap"] = 1.0  # the test-split limit does not cover dev
    return spec, (r"tasks\.bad: every one of the 8 dev examples has the same text \(near-exact: NFKC, lower-case, "
                  r"words\) as a train example: the dev split is a copy of train")


def case_label_forms_that_merge_are_counted(root):
    """1 and "1", "a " and "a" become one label: the manifest counts each raw form (they merged silently)."""
    raw = [1, "1", 1, "1", "a ", "a ", "b", "b"]  # dev and test: "a" and "b" twice each (_mc_rows)
    train = [{"id": f"t{i}", "text": t, "label": raw[i]} for i, t in enumerate(_sentences(8))]
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(train)})

    def check(rows, labels, man):
        merged = man["merged_label_forms"]
        assert merged["1"]["forms"] == {"'1'": 2, "1": 2} and merged["a"]["forms"] == {"'a '": 2, "'a'": 4}
        assert "b" not in merged  # one raw form: nothing merged
        assert merged["1"]["where"]["1"].endswith("train.jsonl:1") and set(labels["labels"]) >= {"1", "a"}
    return spec, check


def case_near_exact_copy(root):
    """Case and punctuation do not hide a copy: near-exact duplicates are counted too."""
    test = [{"id": f"e{i}", "text": r["text"].upper() + " !", "label": r["label"]} for i, r in enumerate(_mc_rows("t", 4))]
    spec = _mc_jsonl_task(root, **{"test.jsonl": _jsonl(test)})
    spec["max_split_overlap"] = 1.0

    def check(out, labels, man):
        assert man["split_overlap"]["pairs"]["train-test"] == {"exact": 0, "near_exact": 4}
        assert man["split_overlap"]["test_fraction"] == 1.0
    return spec, check


def case_brat_subfolder_list(root):
    """Issue example: a BRAT corpus spread over several folders is read as one task."""
    for sub in ("EMEA", "MEDLINE"):
        for split in ("train", "dev", "test"):
            _brat(root, f"{split}/{sub}", f"{split}1", f"Une fièvre {sub} {split}.", "T1\tDISO 4 10\tfièvre\n")

    def check(out, labels, man):
        assert [r["id"] for r in out["train"]] == ["EMEA/train1", "MEDLINE/train1"]
        assert man["documents"]["test"] == 2
    return {"type": "ner", "source": "brat", "path": str(root), "subfolder": ["EMEA", "MEDLINE"]}, check


def case_brat_type_from_notes(root):
    """Issue example: a concept id in the type slot, the group in AnnotatorNotes; a type map for the rest."""
    docs = {"cui": ("Une fièvre et un rein.", ("T1\tC0015967 4 10\tfièvre\n#1\tAnnotatorNotes T1\tDISO\n"
                     "T2\tC0022646 17 21\trein\n"))}

    def check(out, labels, man):
        assert _words_tags(out["train"], "cui")[1:] == [("fièvre", "B-DISO"), ("et", "O"), ("un", "O"),
                                                        ("rein", "B-ANAT"), (".", "O")]
        assert man["annotations"]["types_from_note"] == 1 and man["annotations"]["types_mapped"] == 1
    return _brat_task(root, docs, type_from_note="AnnotatorNotes", type_map={"C0022646": "ANAT"},
                      label_set={"unseen": "drop"}), check


def case_discontinuous_keeps_gold_mention(root):
    """Issue example: full_extent swallowed the contiguous gold mention; the default keeps it."""
    text = "Des cancers du sein et de l'ovaire."
    ann = "T1\tDISO 4 19\tcancers du sein\nT2\tDISO 4 11;23 34\tcancers de l'ovaire\n"

    def check(out, labels, man):
        assert _words_tags(out["train"], "disc")[1:4] == [("cancers", "B-DISO"), ("du", "I-DISO"), ("sein", "I-DISO")]
        assert _words_tags(out["train"], "disc")[4][1] == "O"  # 'et': the discontinuous extent is dropped
        pol = man["discontinuous_policies"]
        assert pol["chosen"] == "contiguous_first"
        assert pol["contiguous_first"]["contiguous_lost"] == 0 and pol["full_extent"]["contiguous_lost"] == 1
    return _brat_task(root, {"disc": (text, ann)}), check


def case_sentence_split_after_abbreviations(root):
    """Issue example: 'Le Dr. Martin a vu M. Dupont. Il va bien.' is 2 sentences (today: 4); offsets survive."""
    text = "Le Dr. Martin a vu M. Dupont. Il va bien.\nMme. Durand prend 2,5 mg/j. Voir p. 12 du RCP."
    m, r = text.index("M. Dupont"), text.index("RCP")  # 19, 82
    ann = f"T1\tLIVB {m} {m + 9}\tM. Dupont\nT2\tCHEM {r} {r + 3}\tRCP\n"

    def check(out, labels, man):
        texts = [r["text"] for r in out["train"] if r["id"].startswith("abbr")]
        assert texts == ["Le Dr. Martin a vu M. Dupont.", "Il va bien.", "Mme. Durand prend 2,5 mg/j.",
                         "Voir p. 12 du RCP."]
        assert _words_tags(out["train"], "abbr:0")[6:9] == [("M", "B-LIVB"), (".", "I-LIVB"), ("Dupont", "I-LIVB")]
        assert ("RCP", "B-CHEM") in _words_tags(out["train"], "abbr:3")
    return _brat_task(root, {"abbr": (text, ann)}, segmentation="sentence", label_set={"unseen": "drop"}), check


def case_not_utf8(root):
    """A Latin-1 byte in a CSV names the file and line."""
    _mc_jsonl_task(root)
    _w(root / "train.csv", b"id,text,label\nr1,une fi\xe8vre,a\n")
    for s in ("dev", "test"):
        _w(root / f"{s}.csv", f"id,text,label\n{s}1,un texte,a\n")
    return {"type": "multiclass", "source": "csv", "path": str(root)}, r"train\.csv:2: not UTF-8"


# ---- entity types held in a structured note (BRAT), document markers in CoNLL comments


NOTE_TEXT = "Une fièvre et un rein, avec du paracétamol."


def _note_doc(notes: dict[str, str]) -> tuple[str, str]:
    """NOTE_TEXT with T1 fièvre, T2 rein, T3 paracétamol (concept ids in the type slot) and one note per entity given."""
    ents = [("T1", "C0015967", "fièvre"), ("T2", "C0022646", "rein"), ("T3", "C0030049", "paracétamol")]
    lines = []
    for n, (tid, cui, word) in enumerate(ents, start=1):
        a = NOTE_TEXT.index(word)
        lines.append(f"T{n}\t{cui} {a} {a + len(word)}\t{word}")
        if tid in notes:
            lines.append(f"#{n}\tAnnotatorNotes {tid}\t{notes[tid]}")
    return NOTE_TEXT, "\n".join(lines) + "\n"


def case_brat_type_from_note_field(root):
    """Issue example: the group is the last field of '"C0001", "name", "semantic type", "GROUP"' (today: the whole
    note is the type, so every note is its own type); a short note yields no type and keeps the written type, a
    'CHEM|DISO' note takes its first group under multi_group: first; the manifest counts each outcome."""
    docs = {"cui": _note_doc({"T1": '"C0015967", "Fièvre, SAI", "Sign or Symptom", "DISO"',
                              "T2": '"C0022646", "rein"',
                              "T3": '"C0030049", "paracétamol", "Pharmacologic Substance", "CHEM|DISO"'})}

    def check(out, labels, man):
        assert _words_tags(out["train"], "cui") == [
            ("Une", "O"), ("fièvre", "B-DISO"), ("et", "O"), ("un", "O"), ("rein", "B-C0022646"), (",", "O"),
            ("avec", "O"), ("du", "O"), ("paracétamol", "B-CHEM"), (".", "O")]
        assert labels["labels"] == ["C0022646", "CHEM", "DISO"]
        rep = man["type_from_note"]
        assert rep["notes"] == {"read": 3, "used": 2, "unmatched": 1, "multi_group": 1, "without_entity": 0}
        # without_note: the 2 + 2 entities of the dev and test documents, which have no notes
        assert rep["entities"] == {"from_note": 2, "without_note": 4, "unmatched_kept_written_type": 1,
                                   "unmatched_dropped": 0, "multi_group_first": 1, "multi_group_dropped": 0}
        assert rep["resolution"] == {"unmatched": "written", "multi_group": "first"}
        assert rep["examples"]["unmatched"].endswith("cui.ann:4 '\"C0022646\", \"rein\"'")
        assert rep["rule"]["field"] == 3 and man["policies"]["type_from_note"]["note"] == "AnnotatorNotes"
    return _brat_task(root, docs, type_from_note={"field": 3, "multi_group": "first"}), check


def case_brat_type_from_note_regex_drops(root):
    """A regex with one group takes the note's last quoted field; a multi-group note and a note it does not match
    drop their entities (multi_group: drop, unmatched: drop), counted, never turned into types."""
    docs = {"rx": _note_doc({"T1": '"C0015967", "fièvre", "DISO"', "T2": '"C0022646", "rein", "ANAT|DISO"',
                             "T3": "trad"})}

    def check(out, labels, man):
        assert [t for _, t in _words_tags(out["train"], "rx")] == ["O", "B-DISO"] + ["O"] * 8
        assert labels["labels"] == ["DISO"]
        ann = man["annotations"]
        assert ann["types_from_note"] == 1 and ann["types_multi_group_dropped"] == 1
        assert ann["types_unmatched_dropped"] == 1 and ann["type_notes_unmatched"] == 1
        assert man["type_from_note"]["examples"]["multi_group"].endswith("rx.ann:4 '\"C0022646\", \"rein\", \"ANAT|DISO\"'")
    return _brat_task(root, docs, type_from_note={"regex": r'"([^"]+)"\s*$', "multi_group": "drop",
                                                  "unmatched": "drop"}), check


def case_brat_type_from_note_multi_group_stops_by_default(root):
    """By default a note listing two groups stops the task, naming the .ann line and the key to set."""
    docs = {"mg": _note_doc({"T1": '"C0015967", "fièvre", "DISO"', "T2": '"C0022646", "rein", "ANAT|DISO"'})}
    return _brat_task(root, docs, type_from_note={"field": -1}), (
        r"mg\.ann:4: AnnotatorNotes note of entity T2 lists 2 groups \('ANAT\|DISO'\); set "
        r"tasks\.bad\.type_from_note\.multi_group to first .* or drop")


def case_brat_type_from_note_unmatched_error(root):
    """unmatched: error stops at the first note the field does not reach, naming the line and the rule."""
    docs = {"um": _note_doc({"T1": '"C0015967", "fièvre", "DISO"', "T2": '"C0022646"'})}
    return _brat_task(root, docs, type_from_note={"field": 2, "unmatched": "error"}), (
        r"um\.ann:4: AnnotatorNotes note of entity T2 \('\"C0022646\"'\) yields no type by "
        r"tasks\.bad\.type_from_note \(field 2\)")


def case_brat_type_from_note_docs_first_example_reads_two_codes(root):
    """checkable-scores item 4: the docs' first type_from_note example on a note listing two codes (OBJC|CHEM)
    gives the first group, not a stop."""
    docs = {"two": _note_doc({"T1": '"C0015967", "fièvre", "DISO"', "T2": '"C0022646", "rein", "ANAT"',
                              "T3": '"C0030049", "paracétamol", "OBJC|CHEM"'})}

    def check(out, labels, man):
        assert [t for _, t in _words_tags(out["train"], "two")] == [
            "O", "B-DISO", "O", "O", "B-ANAT", "O", "O", "O", "B-OBJC", "O"]
        assert man["annotations"]["types_multi_group_first"] == 1
    return _brat_task(root, docs, type_from_note={"regex": r'"([A-Z]{4}(?:\|[A-Z]{4})*)"\s*$',
                                                  "multi_group": "first", "unmatched": "error"}), check


def case_brat_type_from_note_one_code_regex_names_multi_group(root):
    """A one-code regex that does not match a two-code note stops naming multi_group and a regex reading both."""
    docs = {"one": _note_doc({"T1": '"C0015967", "fièvre", "DISO"', "T3": '"C0030049", "paracétamol", "OBJC|CHEM"'})}
    return _brat_task(root, docs, type_from_note={"regex": r'"([A-Z]{4})"\s*$', "unmatched": "error"}), (
        r"one\.ann:\d+: AnnotatorNotes note of entity T3 .* yields no type by tasks\.bad\.type_from_note .*; the "
        r"note lists several groups separated by '\|': read them all and choose one with "
        r"tasks\.bad\.type_from_note\.multi_group \(first or drop\), e\.g\.")


def case_brat_type_from_note_regex_two_groups(root):
    """A type regex with two capture groups is refused when the spec is resolved, naming the key."""
    docs = {"g2": _note_doc({"T1": '"C0015967", "fièvre", "DISO"'})}
    return _brat_task(root, docs, type_from_note={"regex": r'"(C\d+)".*"(\w+)"$'}), (
        r"^tasks\.bad\.type_from_note\.regex: .* has 2 capture groups; it needs exactly one, holding the entity type")


def _marked_conll(n_docs: int, n_sent: int, mark) -> str:
    """``n_docs`` documents of ``n_sent`` sentences; ``mark(d, s)`` is the comment line before each sentence.
    The second word of every sentence is its document number."""
    out = []
    for d in range(n_docs):
        for s in range(n_sent):
            out.append(f"{mark(d, s)}\nPhrase O\n{d} O\nnuméro O\n{s} O\navec O\nfièvre B-DISO\n\n")
    return "".join(out)


def _docs_by_split(out) -> dict[str, set[str]]:
    """Each document number (second word) -> the splits its sentences went to."""
    where: dict[str, set[str]] = {}
    for split, rows in out.items():
        for r in rows:
            where.setdefault(r["words"][1], set()).add(split)
    return where


def case_conll_doc_marker_hash_split(root):
    """Issue example: '# doc=D7 sent=2' comments (today: skipped, so a hash split cuts documents apart and the
    manifest says the file marks no documents): with doc_marker each document's sentences stay in one split."""
    f = _w(root / "all.conll", _marked_conll(36, 3, lambda d, s: f"# doc=D{d} sent={s}"))
    spec = {"type": "ner", "source": "conll", "path": str(f), "max_split_overlap": 1.0,
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}

    def check(out, labels, man):
        where = _docs_by_split(out)
        assert len(where) == 36 and all(len(v) == 1 for v in where.values())
        assert len({s for v in where.values() for s in v}) == 3  # the split did split
        assert man["documents"] == {k: sum(v == {k} for v in where.values()) for k in ("train", "dev", "test")}
        assert man["split"]["unit"] == r"document (-DOCSTART- lines or comments matching doc_marker 'doc=(\\w+)')"
        assert man["policies"]["doc_marker"] == r"doc=(\w+)"
        # without the marker (today's rule) the same file is split by sentence, 108 'documents'
        _, _, plain = build_task("plain", spec)
        assert sum(plain["documents"].values()) == 108 and plain["split"]["unit"].startswith("sentence (the file")
    return {**spec, "doc_marker": r"doc=(\w+)"}, check


def case_conll_doc_marker_derived_dev(root):
    """A dev set derived from train keeps marked documents whole; consecutive sentences under one id are one
    document, a new id starts another; a -DOCSTART- file now counts documents, not sentences."""
    _w(root / "train.conll", _marked_conll(30, 2, lambda d, s: f"# text = x\n# doc: n{d} (sentence {s})"))
    _w(root / "test.conll", "-DOCSTART- -X- O O\n\n" + _marked_conll(2, 3, lambda d, s: "# sent").replace(
        "# sent\nPhrase O\n1 O\nnuméro O\n0", "-DOCSTART- -X- O O\n\n# sent\nPhrase O\n1 O\nnuméro O\n0"))
    spec = {"type": "ner", "source": "conll", "path": str(root), "max_split_overlap": 1.0,
            "splits": {"train": "train.conll", "test": "test.conll"}, "split": {"dev_fraction": 0.3},
            "doc_marker": r"^# doc: (\S+)"}

    def check(out, labels, man):
        where = _docs_by_split({k: v for k, v in out.items() if k != "test"})
        assert len(where) == 30 and all(len(v) == 1 for v in where.values())
        assert man["documents"]["train"] + man["documents"]["dev"] == 30 and man["documents"]["dev"] > 0
        assert man["counts"]["train"] == 2 * man["documents"]["train"]
        assert man["documents"]["test"] == 2 and man["counts"]["test"] == 6
        assert "doc_marker '^# doc: (\\\\S+)'" in man["split"]["dev"]["unit"]
    return spec, check


def case_conll_doc_marker_without_group(root):
    """A doc_marker without a capture group is refused when the spec is resolved, naming the key."""
    _w(root / "all.conll", _marked_conll(4, 1, lambda d, s: f"# doc=D{d}"))
    return ({"type": "ner", "source": "conll", "path": str(root / "all.conll"), "split": {"policy": "hash"},
             "doc_marker": r"doc=\S+"},
            r"^tasks\.bad\.doc_marker: 'doc=\\\\S\+' has 0 capture groups; it needs exactly one, holding the document id")


def case_read_conll_doc_marker_two_groups(root):
    """read_conll called directly names doc_marker for a pattern with two groups."""
    from clmdetour.tasks.formats import read_conll

    f = _w(root / "a.conll", "# doc=A\nUne O\n")
    return "call", lambda: read_conll(f, "#", r"(doc)=(\w+)"), r"^doc_marker: '\(doc\)=\(\\\\w\+\)' has 2 capture groups"


# ---- repeated records (tasks.<name>.duplicates) and id_field null


def case_identical_repeat_stops_by_default(root):
    """A record repeated with the same id, text and label stops the task (duplicates: error), naming both lines."""
    train = _mc_rows("t", 8)
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(train + [train[1]])})
    return spec, (r"train\.jsonl:9: id 't1' appears twice \(.*train\.jsonl:2\) in task 'bad'; the two records are "
                  r"identical \(same text and labels\): set tasks\.bad\.duplicates: drop_identical")


def case_identical_repeats_dropped_and_counted(root):
    """duplicates: drop_identical keeps the first copy: a repeat in train and a test copy of a train record leave."""
    train, test = _mc_rows("t", 8), _mc_rows("e", 4, 200)
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(train + [train[1]]), "test.jsonl": _jsonl(test + [train[2]])})
    spec["duplicates"] = "drop_identical"

    def check(out, labels, man):
        assert man["counts"] == {"train": 8, "dev": 4, "test": 4}
        assert [r["id"] for r in out["test"]] == ["e200", "e201", "e202", "e203"]  # t2's test copy is gone
        assert man["duplicates"] == {
            "policy": "drop_identical", "dropped": {"train": 1, "dev": 0, "test": 1}, "dropped_total": 2,
            "across_splits": 1,
            "examples": [{"id": "t1", "kept": f"{root}/train.jsonl:2", "dropped": f"{root}/train.jsonl:9"},
                         {"id": "t2", "kept": f"{root}/train.jsonl:3", "dropped": f"{root}/test.jsonl:5"}]}
        assert man["split_overlap"]["test_overlapping"] == 0 and man["policies"]["duplicates"] == "drop_identical"
    return spec, check


def case_same_id_other_label_stops_even_when_dropping(root):
    """A same-id record with another label is never dropped: the error names both places and both labels."""
    dev = _mc_rows("d", 4, 100) + [{**_mc_rows("t", 8)[3], "label": "b"}]
    spec = {**_mc_jsonl_task(root, **{"dev.jsonl": _jsonl(dev)}), "duplicates": "drop_identical"}
    return spec, (r"dev\.jsonl:5: id 't3' appears twice \(.*train\.jsonl:4\) in task 'bad' with different labels "
                  r"\('a' vs 'b'\); ids must be unique \(tasks\.bad\.duplicates drops identical records only\)")


def case_same_id_other_text_stops(root):
    """A same-id record with another text: the error shows both texts (cut at 40 characters)."""
    train = _mc_rows("t", 8)
    spec = {**_mc_jsonl_task(root, **{"train.jsonl": _jsonl(train + [{**train[5], "text": "autre texte"}])}),
            "duplicates": "drop_identical"}
    return spec, (r"train\.jsonl:9: id 't5' appears twice \(.*train\.jsonl:6\) in task 'bad' with a different text "
                  r"\('phrase numéro 5 du patient hospitalisé a\.\.\.' vs 'autre texte'\)")


def case_multilabel_repeat_in_another_order_is_identical(root):
    """A multilabel repeat listing the same labels in another order is the same record: dropped, first copy kept."""
    rows = [f"q{i}\t{t}\t{'A|B' if i % 2 else 'A'}" for i, t in enumerate(_sentences(6))]
    _w(root / "train.tsv", "\n".join(["id\ttext\tlabels", *rows, rows[1].replace("A|B", "B|A")]) + "\n")
    _w(root / "dev.tsv", "id\ttext\tlabels\nd1\tun texte de développement assez long ici\tA\n")
    _w(root / "test.tsv", "id\ttext\tlabels\ne1\tun texte de test assez long pour compter\tA|B\n")

    def check(out, labels, man):
        assert [r["id"] for r in out["train"]] == [f"q{i}" for i in range(6)]
        assert out["train"][1]["labels"] == ["A", "B"]
        assert man["duplicates"]["dropped"] == {"train": 1, "dev": 0, "test": 0}
        assert man["duplicates"]["examples"] == [{"id": "q1", "kept": f"{root}/train.tsv:3", "dropped": f"{root}/train.tsv:8"}]
    return {"type": "multilabel", "source": "tsv", "path": str(root), "label_field": "labels", "id_field": "id",
            "duplicates": "drop_identical"}, check


def case_id_field_null_does_not_read_an_id_column(root):
    """id_field null on a TSV with an id column: ids are <file stem>-<line>, and the manifest says the column went unread."""
    for split, n in (("train", 4), ("dev", 2), ("test", 2)):
        rows = [f"{split[0]}{i}\t{t}\t{'ab'[i % 2]}" for i, t in enumerate(_sentences(n, start=len(split) * 100))]
        _w(root / f"{split}.tsv", "\n".join(["id\ttext\tlabel", *rows]) + "\n")

    def check(out, labels, man):
        assert [r["id"] for r in out["train"]] == ["train-2", "train-3", "train-4", "train-5"]
        assert [r["id"] for r in out["test"]] == ["test-2", "test-3"]
        assert man["ids"]["test"] == ("generated: <file stem>-<line> (2 rows; id_field is null; 2 rows have an 'id' "
                                      "field, not read: set tasks.bad.id_field: id to use it)")
    return {"type": "multiclass", "source": "tsv", "path": str(root), "id_field": None}, check


# ---- leakage on short texts (overlap_min_words) and conflicting labels


def _short_text_task(root) -> dict:
    """Train and test share 3 short texts (1-3 words; one exact, two near-exact) and no long one."""
    train = [("toux sèche", "a"), ("fièvre", "b"), ("Douleur thoracique aiguë", "a")] + [
        (t, "ab"[i % 2]) for i, t in enumerate(_sentences(5))]
    test = [("Toux sèche !", "a"), ("fièvre", "b"), ("douleur thoracique aiguë", "a"), ("céphalées intenses", "b")]
    files = {f"{split}.jsonl": _jsonl([{"id": f"{split}{i}", "text": t, "label": y} for i, (t, y) in enumerate(rows)])
             for split, rows in (("train", train), ("test", test))}
    return _mc_jsonl_task(root, **files)


def case_short_text_overlap_counted_below_the_floor(root):
    """Repeats under overlap_min_words (5) do not stop the task but are counted: 3 of 4 test texts occur in train."""
    def check(out, labels, man):
        leak = man["split_overlap"]
        assert leak["min_words"] == 5 and leak["test_overlapping"] == 0 and leak["test_overlapping_below_floor"] == 3
        assert leak["pairs"]["train-test"] == {"exact": 0, "near_exact": 0}
        assert leak["by_length"]["train-test"] == {"below_floor": {"exact": 1, "near_exact": 3},
                                                   "at_or_above_floor": {"exact": 0, "near_exact": 0}}
        assert leak["by_length"]["train-dev"]["below_floor"] == {"exact": 0, "near_exact": 0}
    return _short_text_task(root), check


def case_short_text_overlap_checked_with_a_lower_floor(root):
    """overlap_min_words: 1 checks every length: the same data are refused, the floor named in the message."""
    spec = {**_short_text_task(root), "overlap_min_words": 1}
    return spec, (r"tasks\.bad: 3 of 4 test examples \(75\.0 %\) have the same text \(.*1\+ words, "
                  r"tasks\.bad\.overlap_min_words\) as a train example, more than tasks\.bad\.max_split_overlap = 0\.01")


def case_hash_split_by_text_keeps_repeats_together(root):
    """docs/tasks.md: doc_id_field naming the text field hashes the text, so its repeats share a split."""
    rows = [{"id": f"r{3 * i + k}", "text": f"terme {i}", "label": "ab"[i % 2]} for i in range(30) for k in range(3)]
    f = _w(root / "all.jsonl", _jsonl(rows))
    spec = {"type": "multiclass", "source": "jsonl", "path": str(f), "id_field": "id", "doc_id_field": "text",
            "overlap_min_words": 1, "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}

    def check(out, labels, man):
        assert sum(man["counts"].values()) == 90 and all(n % 3 == 0 for n in man["counts"].values())
        assert all(b["below_floor"]["near_exact"] == 0 for b in man["split_overlap"]["by_length"].values())
        with pytest.raises(TaskError, match=r"test examples .* 1\+ words"):  # split by row id instead: refused
            build_task("bad", {**spec, "doc_id_field": None})
    return spec, check


def case_conflicting_labels_counted(root):
    """The same normalised text under different label sets, within train and across train-test, is counted."""
    rows = [f"q{i}\t{t}\tA" for i, t in enumerate(_sentences(4))]
    _w(root / "train.tsv", "\n".join(["id\ttext\tlabels", *rows, "q8\tToux sèche\tA|B", "q9\ttoux sèche.\tA"]) + "\n")
    _w(root / "dev.tsv", "id\ttext\tlabels\nd1\tun texte de développement assez long ici\tA\n")
    _w(root / "test.tsv", "id\ttext\tlabels\ne1\tTOUX SÈCHE\tB|A\ne2\tun texte de test assez long\tB\n")

    def check(out, labels, man):
        c = man["conflicting_labels"]
        assert (c["texts"], c["rows"]) == (1, 3)
        assert c["within"] == {"train": 1, "dev": 0, "test": 0}
        assert c["across"] == {"train-dev": 0, "train-test": 1, "dev-test": 0}
        assert c["examples"] == [{"text": "Toux sèche", "labels": [["A", "B"], ["A"]],
                                  "ids": {"train": ["q8", "q9"], "test": ["e1"]}}]
    return {"type": "multilabel", "source": "tsv", "path": str(root), "label_field": "labels", "id_field": "id"}, check


# non-task cases: ("call", fn, check) where fn raises or returns


def case_release_licence_spelling(root):
    """Issue example: 'Apache 2.0' (today: silently lower-cased to 'apache 2.0') suggests 'apache-2.0'."""
    from clmdetour.release.licence import check_release_metadata

    return "call", lambda: check_release_metadata({"licence": "Apache 2.0"}), (
        r"config key release\.licence: 'Apache 2\.0' is not a licence id the Hub accepts; did you mean 'apache-2\.0'")


def case_release_dataset_id(root):
    """release.datasets entries must be Hub dataset ids (owner/name)."""
    from clmdetour.release.licence import check_release_metadata

    return "call", lambda: check_release_metadata({"licence": "mit", "datasets": ["DrBenchmark/QUAERO", "QUAERO FrenchMed"]}), (
        r"config key release\.datasets\[1\]: 'QUAERO FrenchMed' is not a Hub dataset id; expected 'owner/name'")


def case_launcher_fewer_gpus(root):
    """Issue example: 4 GPUs asked, 1 visible stops, naming both (today: runs on 1); 0 visible stays the CPU fallback."""
    import sys

    from clmdetour.training.launch import build_command

    assert build_command(4, 0, ["-m", "x"]) == [sys.executable, "-m", "x"]
    assert build_command(4, 4, ["-m", "x"])[3:5] == ["-n", "4"]
    return "call", lambda: build_command(4, 1, ["-m", "x"]), r"launch: 4 GPU\(s\) requested .* but only 1 visible"


def case_corpus_hub_source_fails(root):
    """Issue example: a hub corpus source that datasets cannot load names the source and its config key."""
    from clmdetour.corpus.sources import load_source

    _w(root / "snap" / "README.md", "no data files here\n")
    src = {"name": "wiki", "format": "hub", "hub_id": "someone/wiki-fr", "split": "train"}
    return "call", lambda: load_source(src, hub_dir=root / "snap"), (
        r"corpus source 'wiki' \(config corpus\.sources, hub_id 'someone/wiki-fr'.*datasets cannot load")


def case_corpus_bom_cr_nfd(root):
    """Corpus text files: BOM, CR line endings and NFD give the same documents as clean UTF-8."""
    from clmdetour.corpus.sources import load_source

    _w(root / "c.txt", "\ufeff" + unicodedata.normalize("NFD", "Une fièvre.\rDeux.\r"))

    def check(ds):
        assert ds["text"][:] == ["Une fièvre.", "Deux."]
    return "call", lambda: load_source({"name": "c", "format": "text", "path": str(root / "c.txt")}), check


def case_hub_task_with_local_path(root):
    """Issue example: a hub task that gives a local path is not fetched (today: schedules a network fetch)."""
    spec = resolve_task_spec("h", {"type": "multiclass", "source": "hub", "hub_id": "o/n", "path": str(root)})
    fetched = resolve_task_spec("h", {"type": "multiclass", "source": "hub", "hub_id": "o/n"})

    def check(_):
        assert spec["fetch"] is False and spec["path"] == str(root)
        assert fetched["fetch"] is True and fetched["path"] == "resources/datasets/h"
    return "call", lambda: None, check



# ---- fault paths: checks at planning, errors that name the file, key or line


def _paper_config(**over):
    from clmdetour.config import deep_merge, load_yaml

    return deep_merge(load_yaml(Path(__file__).resolve().parents[1] / "config" / "config.yaml"), over)


def case_lr_grid_not_increasing_fails_at_planning(root):
    """A learning-rate grid out of order stops planning, naming the key the user set (not every fine-tune job)."""
    from clmdetour.config import validate_config
    from clmdetour.pipeline import Pipeline

    cfg = validate_config(_paper_config(evaluation={"lr_grid": [3.0e-5, 1.0e-5]}))
    return "call", lambda: Pipeline(cfg), r"evaluation\.lr_grid: \[3e-05, 1e-05\] is not strictly increasing"


def case_task_lr_grid_repeat_names_the_task_key(root):
    """A task's own grid with a repeat names tasks.<task>.finetune.lr_grid."""
    from clmdetour.evaluation.grid import finetune_task_params

    cfg = {"evaluation": {"lr_grid": [1e-5]},
           "tasks": {"emea": {"type": "ner", "max_length": 8, "seeds": 1,
                              "finetune": {"lr_grid": [1e-5, 1e-5], "epochs": 1, "batch_size": 8, "warmup_ratio": 0.1,
                                           "betas": [0.9, 0.98], "eps": 1e-6, "weight_decay": 1e-5}}}}
    return "call", lambda: finetune_task_params(cfg, "emea"), r"tasks\.emea\.finetune\.lr_grid: .* not strictly increasing"


def case_licence_in_the_wrong_case_fails_at_planning(root):
    """'MIT' is refused when the DAG is planned (not at staging, after Snakemake removed the old release)."""
    from clmdetour.config import validate_config
    from clmdetour.pipeline import Pipeline

    cfg = validate_config(_paper_config(release={"licence": "MIT"}))
    return "call", lambda: Pipeline(cfg), r"release\.licence: 'MIT' is not a licence id the Hub accepts; did you mean 'mit'"


def case_missing_licence_is_said_at_planning(root):
    """Without release.licence, `all` stages no release: planning says so once (the paper config's case)."""
    from clmdetour.config import validate_config
    from clmdetour.pipeline import Pipeline

    def check(p):
        assert p.release_warning().startswith("release.licence is not set, so `all` stages no release")
        assert p.release_outputs("clm-detour") == []
    return "call", lambda: Pipeline(validate_config(_paper_config())), check


def case_table_task_folder_where_hash_needs_a_file(root):
    """split.policy hash reads one file: a folder there is refused at planning, naming tasks.<task>.path."""
    _mc_jsonl_task(root)
    spec = {"type": "multiclass", "source": "jsonl", "path": str(root), "split": {"policy": "hash"}}
    return "call", lambda: resolve_task_spec("t", spec), rf"tasks\.t\.path: {root} is a folder, but split\.policy hash reads one jsonl file"


def case_table_task_file_where_given_needs_a_folder(root):
    """split.policy given reads a folder of split files: one file there is refused, naming the key."""
    f = _w(root / "all.jsonl", _jsonl(_mc_rows("t", 8)))
    spec = {"type": "multiclass", "source": "jsonl", "path": str(f)}
    return "call", lambda: resolve_task_spec("t", spec), r"tasks\.t\.path: .*all\.jsonl is a file, but split\.policy given reads a folder"


def case_splits_map_ignored_under_hash(root):
    """A splits map beside split.policy hash would be silently ignored: refused, naming the key."""
    f = _w(root / "all.jsonl", _jsonl(_mc_rows("t", 8)))
    spec = {"type": "multiclass", "source": "jsonl", "path": str(f), "split": {"policy": "hash"},
            "splits": {"train": "a.jsonl", "test": "b.jsonl"}}
    return "call", lambda: resolve_task_spec("t", spec), r"tasks\.t\.splits: split\.policy is hash, .* would be ignored"


def case_resolving_a_resolved_spec_changes_nothing(root):
    """The prepare_task job resolves the spec planning resolved (defaults filled): the same spec again, no error."""
    f = _w(root / "all.jsonl", _jsonl(_mc_rows("t", 8)))
    spec = {"type": "multiclass", "source": "jsonl", "path": str(f), "split": {"policy": "hash"}}
    once = resolve_task_spec("t", spec)

    def check(twice):
        assert twice == once and once["splits"] == {"train": "train.jsonl", "dev": "dev.jsonl", "test": "test.jsonl"}
    return "call", lambda: resolve_task_spec("t", once), check


def case_variant_named_like_the_base_model(root):
    """A variant named like the base model's key would replace its row of the table: refused, naming the key."""
    from clmdetour.config import validate_config

    cfg = _paper_config(pretraining={"variants": {"moderncamembert-base": {"phase1": {"objective": "clm"}}}})
    return "call", lambda: validate_config(cfg), (
        r"pretraining\.variants\.moderncamembert-base: the name is also the base model's key \(base_model\.key\)")


def case_two_corpus_sources_with_one_name(root):
    """Two corpus sources named alike would share one fetched folder and one manifest row: refused."""
    from clmdetour.config import validate_config

    cfg = _paper_config()
    first = dict(cfg["corpus"]["sources"][0])
    cfg["corpus"]["sources"] = [first, dict(first, hub_id="someone/else")]
    return "call", lambda: validate_config(cfg), (
        rf"corpus\.sources\[1\]\.name: '{first['name']}' is also the name of corpus\.sources\[0\]")


def case_variant_target_collides_with_a_task_target(root):
    """A variant whose generated target is another generated target (prepare_task_emea) is refused by name."""
    from clmdetour.config import validate_config
    from clmdetour.pipeline import Pipeline

    cfg = validate_config(_paper_config(pretraining={"variants": {"prepare-task-emea": {"phase1": {"objective": "clm"}}}}))
    return "call", lambda: Pipeline(cfg), (
        r"tasks\.emea: name collides with the rule 'prepare_task_emea' \(a target of variant 'prepare-task-emea'\)")


def case_empty_checkpoint_root_fails_at_planning(root):
    """pretraining.checkpoint_root: '' planned scratch folders at the file system's root (/scratch/corpus-shards/)."""
    from clmdetour.config import validate_config

    return "call", lambda: validate_config(_paper_config(pretraining={"checkpoint_root": " "})), (
        r"pretraining\.checkpoint_root: ' ' is an empty path; .*remove the key for checkpoints, the default")


def case_empty_task_path_fails_at_planning(root):
    """An empty path of a task (as of a model or a corpus source) is refused, naming the key."""
    from clmdetour.config import validate_config

    return "call", lambda: validate_config(_paper_config(tasks={"emea": {"path": ""}})), (
        r"tasks\.emea\.path: '' is an empty path; .*or null \(or remove the key\) for none")


def case_float_micro_batch_says_which_whole_number(root):
    """micro_batch_sequences: 8.0 (an integer or auto) got "not valid under any of the given schemas"."""
    from clmdetour.config import validate_config

    return "call", lambda: validate_config(_paper_config(pretraining={"micro_batch_sequences": 8.0})), (
        r"config key 'pretraining\.micro_batch_sequences': 8\.0 is a float where a whole number is expected; write 8")


def case_config_alias_bomb_refused_while_reading(root):
    """8 nested levels of 10 aliases (10^8 nodes) took 25 s and 3 GB, then a 580 MB error line."""
    from clmdetour.config import load_yaml

    f = _w(root / "bomb.yaml", "a: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)))
    return "call", lambda: load_yaml(f), (
        r"bomb\.yaml: line 4 invalid YAML: aliases expand to more than 10,000 nodes \(at \*a2\).*check_config")


def case_config_dotted_command_line_key(root):
    """`--config evaluation.first_seed=3` is a Snakemake traceback; check_config says how to write it."""
    from clmdetour.pipeline.check_config import command_line_config

    return "call", lambda: command_line_config(["evaluation.first_seed=3"]), (
        r"--config 'evaluation\.first_seed=3': Snakemake takes no dotted key \('evaluation\.first_seed'\); nest the "
        r"value: --config evaluation='\{first_seed: 3\}'")


def case_phase_section_not_json(root):
    """The phase command's --section that is not JSON names the option and the position."""
    from clmdetour.training.cli import section_from_json

    return "call", lambda: section_from_json("{not json"), (
        r"--section: not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2 "
        r"\(character 1\)")


def case_local_corpus_source_missing_at_planning(root):
    """A local corpus file that is not there stops planning the corpus, naming corpus.sources[i].path."""
    from clmdetour.config import validate_config
    from clmdetour.pipeline import Pipeline

    cfg = _paper_config()
    cfg["corpus"]["sources"] = [{"name": "notes", "format": "jsonl", "path": str(root / "absent.jsonl"),
                                 "weight": 1.0, "licence": "CC0-1.0"}]
    cfg["corpus"]["decontaminate_against"] = []
    p = Pipeline(validate_config(cfg))
    return "call", lambda: p.corpus_inputs({}), r"corpus\.sources\[0\]\.path \('notes'\): .*absent\.jsonl does not exist"


def case_duplicates_policy_misspelt(root):
    """An unknown duplicates policy names the key and the choices."""
    spec = {**_mc_jsonl_task(root), "duplicates": "drop"}
    return "call", lambda: resolve_task_spec("t", spec), (
        r"tasks\.t\.duplicates: 'drop' is not one of \('error', 'drop_identical'\)")


def case_overlap_min_words_negative(root):
    """overlap_min_words below 0 (or not a whole number) names the key."""
    spec = {**_mc_jsonl_task(root), "overlap_min_words": -1}
    return "call", lambda: resolve_task_spec("t", spec), r"tasks\.t\.overlap_min_words: -1 is not a whole number of words >= 0"


def case_seq_len_above_the_models_positions(root):
    """corpus.seq_len above a built base model's max_position_embeddings stops planning, naming both numbers."""
    from clmdetour.config import deep_merge, load_yaml, validate_config

    cfg = deep_merge(_paper_config(), load_yaml(Path(__file__).resolve().parents[1] / "config" / "demo.yaml"))
    cfg["corpus"]["seq_len"] = 1024
    return "call", lambda: validate_config(cfg), (
        r"corpus\.seq_len \(1,024 tokens\) is longer than the base model \(base_model\.build\)'s "
        r"max_position_embeddings \(512 tokens\)")


def case_seq_len_checked_against_a_model_folder(root):
    """Where planning cannot know the model (not fetched yet), the phase checks before any step."""
    from clmdetour.config import check_context_length

    return "call", lambda: check_context_length(8192, 512, "the input model m"), (
        r"corpus\.seq_len \(8,192 tokens\) is longer than the input model m's max_position_embeddings \(512 tokens\)")


def _corpus_call(root: Path, file: str, data: str, expect: str, fmt: str = "jsonl", **source):
    """A "call" case: ``load_source`` on one corpus file written with ``data``, expected to fail with ``expect``."""
    from clmdetour.corpus.sources import load_source

    f = _w(root / file, data)
    return "call", lambda: load_source({"name": "c", "format": fmt, "path": str(f), **source}), expect


def case_corpus_jsonl_bad_line_names_the_line(root):
    """One malformed line of a corpus JSON-lines file: the message names file and line."""
    return _corpus_call(root, "c.jsonl", '{"text": "Une fièvre."}\n{"text": "Deux."}\n{"text": "Trois.\n',
                        r"corpus source 'c' \(config corpus\.sources\): .*c\.jsonl:3: not valid JSON")


def case_corpus_text_a_number_names_file_line_and_field(root):
    """`"text": 12345` on every line: the column is numbers; the message names file, line and field."""
    return _corpus_call(root, "c.jsonl", '{"body": 12345}\n{"body": 67890}\n',
                        r"corpus source 'c' \(config corpus\.sources\): .*c\.jsonl:1: field 'body' is a JSON number "
                        r"\(12345\), not a string", text_field="body")


def case_corpus_text_a_list_among_strings_names_its_line(root):
    """One line whose text is a list among string lines: the line is named."""
    return _corpus_call(root, "c.jsonl", '{"text": "Une fièvre."}\n{"text": "Deux."}\n{"text": ["Trois", "quatre"]}\n',
                        r"corpus source 'c' \(config corpus\.sources\): .*c\.jsonl:3: field 'text' is a JSON array "
                        r"\(\[\"Trois\", \"quatre\"\]\), not a string")


def case_corpus_file_empty_says_so(root):
    """An empty (or blank) corpus file says it is empty (it was a bare StopIteration from datasets)."""
    return _corpus_call(root, "c.jsonl", "\n\n",
                        r"corpus source 'c' \(config corpus\.sources\): .*c\.jsonl is empty \(no line with text\)")


def case_corpus_jsonl_of_nulls_names_the_line(root):
    """A JSON-lines file whose lines are `null` crashed the process inside datasets (a segmentation fault)."""
    return _corpus_call(root, "c.jsonl", "null\nnull\n",
                        r"corpus source 'c' \(config corpus\.sources\): .*c\.jsonl:1: a JSON null, not an object")


def case_corpus_rows_without_the_field_hold_no_documents(root):
    """A header-only CSV: "holds no documents", not datasets' 'Instruction "train" corresponds to no data'."""
    return _corpus_call(root, "c.csv", "id,text\n", r"corpus source 'c' \(config corpus\.sources\): .*c\.csv holds no "
                        r"documents \(no row with a 'text' field\)", fmt="csv")


def case_corpus_folder_with_a_broken_link_names_it(root):
    """A broken symlink named like a corpus file in a source folder: named, not a raw FileNotFoundError;
    a sub-folder named like a file is walked, not opened."""
    import os

    from clmdetour.corpus.sources import load_source

    _w(root / "docs" / "a.jsonl", '{"text": "Une fièvre modérée depuis trois jours."}\n')
    (root / "docs" / "sub.jsonl").mkdir()
    os.symlink(root / "absent.jsonl", root / "docs" / "x.jsonl")
    return "call", lambda: load_source({"name": "c", "format": "jsonl", "path": str(root / "docs")}), (
        r"docs/x\.jsonl: a link to a file that does not exist")


def case_truncated_parquet_corpus_source_names_the_file(root):
    """data-safe, an untried fault: a Parquet corpus source cut short (a copy interrupted) is named, with the
    reader's reason, before any shard job runs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from clmdetour.corpus.sources import load_source

    (root / "docs").mkdir(parents=True)
    pq.write_table(pa.table({"text": [f"Document {i} : une fièvre modérée." for i in range(500)]}),
                   root / "docs" / "c.parquet")
    data = (root / "docs" / "c.parquet").read_bytes()
    (root / "docs" / "c.parquet").write_bytes(data[: len(data) // 2])
    return "call", lambda: load_source({"name": "c", "format": "parquet", "path": str(root / "docs" / "c.parquet"),
                                        "text_field": "text"}), (
        r"corpus source 'c' \(config corpus\.sources\): cannot read .*docs/c\.parquet as parquet: ArrowInvalid")


def case_model_folder_without_tokenizer(root):
    """A model folder without a tokenizer file names the folder and the files expected (not a Hub hint)."""
    from clmdetour.modeling.folders import check_model_folder

    _w(root / "m" / "config.json", '{"model_type": "modernbert"}')
    return "call", lambda: check_model_folder(root / "m"), r"m: no tokenizer file \(one of: tokenizer\.json, vocab\.json \+ merges\.txt"


def case_base_model_not_modernbert(root):
    """A BERT folder given as the base model: one line naming its model type, before any training step."""
    from clmdetour.modeling.folders import check_model_folder

    _w(root / "m" / "config.json", '{"model_type": "bert"}')
    _w(root / "m" / "vocab.txt", "[PAD]\n")
    return "call", lambda: check_model_folder(root / "m", model_type="modernbert"), (
        r"m/config\.json: model_type 'bert', but this step needs a 'modernbert' checkpoint")


def case_truncated_safetensors_names_the_file(root):
    """data-safe item 6: a model.safetensors cut short gave three raw SafetensorErrors naming no file."""
    import torch
    from safetensors.torch import save_file

    from clmdetour.modeling.folders import check_model_folder

    _w(root / "m" / "config.json", '{"model_type": "modernbert"}')
    _w(root / "m" / "vocab.txt", "[PAD]\n")
    save_file({"w": torch.zeros(64, 64)}, str(root / "m" / "model.safetensors"))
    data = (root / "m" / "model.safetensors").read_bytes()
    (root / "m" / "model.safetensors").write_bytes(data[: len(data) // 2])
    return "call", lambda: check_model_folder(root / "m"), (
        r"m/model\.safetensors: [\d,]+ bytes, but its header lists tensors up to byte [\d,]+ \(a copy cut short")


def case_safetensors_without_a_header_names_the_file(root):
    """A weights file of 3 bytes (an interrupted copy) is named, with what it lacks."""
    from clmdetour.modeling.folders import check_model_folder

    _w(root / "m" / "config.json", '{"model_type": "modernbert"}')
    _w(root / "m" / "vocab.txt", "[PAD]\n")
    (root / "m" / "model.safetensors").write_bytes(b"abc")
    return "call", lambda: check_model_folder(root / "m"), r"m/model\.safetensors: 3 bytes, too short for its safetensors header"


def case_killed_write_leaves_no_stale_temporary(root):
    """A staging job killed mid-write leaves a hidden temporary folder of weights: the next write removes it."""
    from clmdetour.io import atomic_output_dir

    out = root / "release" / "clm-detour"
    _w(root / "release" / ".clm-detour.k1ll3d.tmp" / "model.safetensors", b"x" * 1000)
    _w(root / "release" / ".clm-detour.old" / "README.md", "old")

    def write():
        with atomic_output_dir(out) as tmp:
            _w(tmp / "README.md", "new")
        return sorted(p.name for p in out.parent.iterdir())

    def check(names):
        assert names == ["clm-detour"] and (out / "README.md").read_text() == "new"
    return "call", write, check


def case_versions_come_from_package_metadata(root):
    """The card's software line: every version is read from the installed distributions (no 'unknown')."""
    from importlib.metadata import version

    from clmdetour.io import versions

    def check(v):
        assert "unknown" not in v.values() and v["seqeval"] == version("seqeval")
        assert v["clmdetour"] == version("clmdetour") and v["composer"] == version("mosaicml")
    return "call", versions, check

# ---- English readers: CoNLL columns, relation markers, BigBIO offsets


def _conll4(words_tags: list[tuple[str, str]]) -> str:
    return "".join(f"{w}\tNN\tO\t{t}\n" for w, t in words_tags) + "\n"


def case_conll_line_with_the_wrong_column_count(root):
    """A CoNLL line with 3 columns in a 4-column file: the error names file:line and the first word line."""
    _w(root / "train.txt", _conll4([("Aspirin", "B-Chem"), ("helps", "O")]) + "Fever\tNN\tB-Dis\n")
    for split in ("dev", "test"):
        _w(root / f"{split}.txt", _conll4([("Aspirin", "B-Chem")]))
    splits = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
    return ({"type": "ner", "source": "conll", "path": str(root), "splits": splits, "tag_column": 3},
            r"train\.txt:4: 3 columns, but the file's first word line \(.*train\.txt:1\) has 4")


def case_conll_tag_column_out_of_range(root):
    """tag_column 4 in a 4-column file: the error names the key, the file and the line."""
    for split in ("train", "dev", "test"):
        _w(root / f"{split}.txt", _conll4([("Aspirin", "B-Chem")]))
    splits = {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}
    return ({"type": "ner", "source": "conll", "path": str(root), "splits": splits, "tag_column": 4},
            r"^tasks\.bad\.tag_column: column 4 is not a tag column of .*train\.txt:1, which has 4 columns")


def case_relation_line_without_both_markers(root):
    """A relation row whose second argument is not marked: the error names file:line and the key."""
    rows = [{"text": f"<< drug{i} >> inhibits the [[ protein{i} ]] strongly in cells", "label": "INHIBITOR"}
            for i in range(6)]
    bad = rows[:3] + [{"text": "<< aspirin >> inhibits the protein COX strongly in cells", "label": "INHIBITOR"}]
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(bad), "dev.jsonl": _jsonl(rows[3:4]),
                                   "test.jsonl": _jsonl(rows[4:])})
    spec.update(id_field=None, entity_markers=[["<<", ">>"], ["[[", "]]"]], label_map={"INHIBITOR": "CPR:4"})
    return spec, (r"train\.jsonl:4: opening entity marker '\[\[' \(followed by a space\) occurs 0 times, expected "
                  r"once \(tasks\.bad\.entity_markers")


def case_relation_marker_strings_inside_the_text_are_text(root):
    """ChemProt writes 'PGE1>STA2>>17' and '94 >> probenecid': only the markers set off by spaces mark arguments."""
    text = "<< PGE2 >> and [[ EP3 ]]: sulprostone>PGE2>>17-phenyl and 94 >> probenecid, [[(3-iodo)]] ok"
    # two classes: a single-class task is refused (issue 65)
    rows = [{"text": text.replace("PGE2 >>", f"PGE{i} >>"), "label": "ANTAGONIST" if i % 2 else "AGONIST"}
            for i in range(6)]
    spec = _mc_jsonl_task(root, **{"train.jsonl": _jsonl(rows[:3]), "dev.jsonl": _jsonl(rows[3:4]),
                                   "test.jsonl": _jsonl(rows[4:])})
    spec.update(id_field=None, entity_markers=[["<<", ">>"], ["[[", "]]"]],
                label_map={"AGONIST": "CPR:5", "ANTAGONIST": "CPR:6"})

    def check(rows, labels, man):
        assert labels["labels"] == ["CPR:5", "CPR:6"] and rows["train"][0]["text"] == rows_text0
    rows_text0 = rows[0]["text"]
    return spec, check


def case_bigbio_entity_offsets_do_not_match_its_text(root):
    """A bigbio_kb entity whose offsets point at other characters: the error names the file, row and entity id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def doc(i, start):
        title, abstract = f"Case {i}: fever.", "The patient had a fever and a cough."
        s = start if start is not None else len(title) + 1 + abstract.index("fever")
        return {"id": str(i), "document_id": f"pmid{i}",
                "passages": [{"id": "p0", "type": "title", "text": [title], "offsets": [[0, len(title)]]},
                             {"id": "p1", "type": "abstract", "text": [abstract],
                              "offsets": [[len(title) + 1, len(title) + 1 + len(abstract)]]}],
                "entities": [{"id": f"e{i}", "type": "Disease", "text": ["fever"], "offsets": [[s, s + 5]],
                              "normalized": []}], "relations": []}
    for split, docs in (("train", [doc(0, None), doc(1, 3)]), ("validation", [doc(2, None)]), ("test", [doc(3, None)])):
        (root / "cfg").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(docs), root / "cfg" / f"{split}-00000-of-00001.parquet")
    return ({"type": "ner", "source": "user", "format": "bigbio_kb", "hub_config": "cfg", "path": str(root)},
            (r"train-00000-of-00001\.parquet row 1: entity 'e1' text \['fever'\] differs from the document text at "
             r"its offsets \[\[3, 8\]\]: \['e 1: '\]"))


def case_conll_doc_like_comments_without_marker_are_counted(root):
    """'# doc=D7 sent=2' comments without doc_marker: the file is split by sentence, and the manifest counts the
    comment lines skipped (today: only 'the file marks no documents'); test_conll_doc_like_comments_warn warns."""
    f = _w(root / "all.conll", _marked_conll(36, 3, lambda d, s: f"# doc=D{d} sent={s}\n# sent_id = {s}"))
    spec = {"type": "ner", "source": "conll", "path": str(f), "max_split_overlap": 1.0,
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}

    def check(out, labels, man):
        assert man["annotations"]["comment_lines_skipped"] == 216
        assert man["split"]["unit"].startswith("sentence (the file marks no documents")
        _, _, marked = build_task("marked", {**spec, "doc_marker": r"doc=(\w+)"})
        assert marked["annotations"]["comment_lines_skipped"] == 108  # the '# sent_id' lines
    return spec, check


def _brat_entity_types_docs() -> dict:
    """One train document whose 8 entities carry a concept id, the group in a structured note: 2 DISO, 6 others."""
    groups = ["DISO", "CHEM", "ANAT", "PROC", "DISO", "LIVB", "GEOG", "PHYS"]
    words = [f"mot{i}" for i in range(len(groups))]
    text = " ".join(words) + "."
    starts = [text.index(w + (" " if i < len(words) - 1 else ".")) for i, w in enumerate(words)]
    ents = [f"T{i + 1}\tC000{i} {s} {s + len(w)}\t{w}" for i, (s, w) in enumerate(zip(starts, words))]
    notes = [f'#{i + 1}\tAnnotatorNotes T{i + 1}\t"C000{i}", "{w}", "{g}"' for i, (w, g) in enumerate(zip(words, groups))]
    return {"cui": (text, "\n".join(ents + notes) + "\n")}


def case_brat_entity_types_drops_have_examples(root):
    """Entities dropped by entity_types after type_from_note: counted, and the manifest shows 5 of them with
    file:line and the type read from the note (today: only the count type_filtered)."""
    spec = _brat_task(root, _brat_entity_types_docs(), type_from_note={"field": -1}, entity_types=["DISO"])

    def check(out, labels, man):
        assert labels["labels"] == ["DISO"] and man["annotations"]["type_filtered"] == 6
        section = man["entity_types"]
        assert section["kept"] == ["DISO"] and section["type_filtered"] == 6
        ann = str(root / "train" / "cui.ann")
        assert section["examples"] == [f"{ann}:2 'CHEM'", f"{ann}:3 'ANAT'", f"{ann}:4 'PROC'", f"{ann}:6 'LIVB'",
                                       f"{ann}:7 'GEOG'"]
    return spec, check


def _repeated_rows(n: int = 30, copies: int = 2, variant=lambda text, k: text) -> list[dict]:
    """``n`` texts of 6+ words written ``copies`` times each (``variant(text, k)`` for copy k), then ``n`` texts
    written once (so dev is no copy of train), labels a / b."""
    repeated = [{"id": f"r{copies * i + k}", "text": variant(t, k), "label": "ab"[i % 2]}
                for i, t in enumerate(_sentences(n)) for k in range(copies)]
    return repeated + [{"id": f"u{i}", "text": t, "label": "ab"[i % 2]} for i, t in enumerate(_sentences(n, 500, "autre"))]


def case_overlap_of_a_hash_split_by_row_names_doc_id_field(root):
    """A single-file hash split without doc_id_field puts a text's copies in different splits: the refusal
    names doc_id_field (today: 'check the split files (or split by document)')."""
    f = _w(root / "all.jsonl", _jsonl(_repeated_rows()))
    return ({"type": "multiclass", "source": "jsonl", "path": str(f), "id_field": "id",
             "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}},
            (r"tasks\.bad: \d+ of \d+ test examples .*; the file was split row by row \(split\.policy hash without "
             r"tasks\.bad\.doc_id_field\): set tasks\.bad\.doc_id_field to the field naming each row's document"))


def case_overlap_of_case_variants_names_a_normalised_text_field(root):
    """doc_id_field: text keeps exact repeats together, not case or punctuation variants: the refusal says
    to hash a field holding the normalised text (no key normalises it)."""
    rows = _repeated_rows(variant=lambda t, k: t.upper() + " !" if k == 1 else t)
    f = _w(root / "all.jsonl", _jsonl(rows))
    return ({"type": "multiclass", "source": "jsonl", "path": str(f), "id_field": "id", "doc_id_field": "text",
             "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}},
            (r"; set tasks\.bad\.doc_id_field to a field holding each text normalised \(lower-case, without "
             r"punctuation\), so case or punctuation variants of a text hash to one split \(tasks\.bad\.doc_id_field: "
             r"'text' hashes the text as written: exact repeats only\)$"))


def case_overlap_of_given_split_files_names_a_hash_split(root):
    """Given split files sharing texts (a near-exact copy): the refusal says how to split them by the normalised
    text instead."""
    test = [{"id": f"e{i}", "text": r["text"].upper() + " !", "label": r["label"]} for i, r in enumerate(_mc_rows("t", 4))]
    spec = _mc_jsonl_task(root, **{"test.jsonl": _jsonl(test)})
    return spec, (r"; to keep the official split, set tasks\.bad\.max_split_overlap: 1 \(the leak stays reported in "
                  r"the manifest, split_overlap\) or remove the leaked test ids \['e0', 'e1', 'e2', 'e3'\] from the test "
                  r"file; to split anew instead: put the rows in one file with split\.policy: hash, and set "
                  r"tasks\.bad\.doc_id_field to a field holding each text normalised")


def case_overlap_of_a_conll_file_without_documents_names_the_marks(root):
    """A CoNLL file that marks no documents, split by hash, repeats sentences across splits: the refusal says
    to mark the documents."""
    sentences = [(i, "répétée") for i in range(20) for _ in range(2)] + [(i, "unique") for i in range(30)]
    f = _w(root / "all.conll", "".join(f"# sent\nPhrase O\n{w} O\nnuméro O\n{i} O\navec O\nfièvre B-DISO\n\n"
                                       for i, w in sentences))
    return ({"type": "ner", "source": "conll", "path": str(f),
             "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}},
            (r"the file marks no documents, so it was split sentence by sentence: mark them \(-DOCSTART- lines, "
             r"'# doc_id = X' comments, or tasks\.bad\.doc_marker"))


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


def test_at_least_twenty_distinct_bad_inputs():
    assert len(CASES) >= 20, len(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    got = CASES[name](src)
    if got[0] == "call":
        _, fn, expect = got
        if isinstance(expect, str):
            with pytest.raises(Exception, match=expect) as info:
                fn()
            assert len(str(info.value).splitlines()) == 1  # one clear line
        else:
            expect(fn())
        return
    spec, expect = got
    out = tmp_path / "results" / "tasks" / "bad"
    if isinstance(expect, str):
        with pytest.raises(TaskError, match=expect) as info:
            prepare_task("bad", spec, out)
        assert len(str(info.value).splitlines()) == 1
        # nothing half-written: no output folder and no temporary sibling left behind
        assert not out.exists()
        assert not out.parent.exists() or list(out.parent.iterdir()) == []
    else:
        rows, labels, man = build_task("bad", spec)
        expect(rows, labels, man)
        prepare_task("bad", spec, out)
        assert sorted(p.name for p in out.iterdir()) == ["dev", "labels.json", "manifest.json", "test", "train"]
        assert [p.name for p in out.parent.iterdir()] == ["bad"]


def test_refused_task_keeps_an_existing_complete_output(tmp_path):
    """A refused rebuild leaves the previous complete output untouched (atomic writes, clmdetour.io)."""
    spec = _mc_jsonl_task(tmp_path / "src")
    out = tmp_path / "results" / "tasks" / "toy"
    prepare_task("toy", spec, out)
    before = (out / "manifest.json").read_text()
    _w(tmp_path / "src" / "test.jsonl", (tmp_path / "src" / "train.jsonl").read_text().replace('"id": "t', '"id": "e'))
    with pytest.raises(TaskError, match="max_split_overlap"):
        prepare_task("toy", spec, out)
    assert (out / "manifest.json").read_text() == before
    assert [p.name for p in out.parent.iterdir()] == ["toy"]


@pytest.mark.parametrize("marker", [None, r"doc=(\w+)"])
def test_conll_doc_like_comments_warn(tmp_path, caplog, marker):
    """A file that marks no documents but has comments that look like marks ('# doc=D1 sent=0'): a warning names
    the file, the line and tasks.<name>.doc_marker; with doc_marker set to read them, none."""
    f = _w(tmp_path / "all.conll", "# title: notes\n" + _marked_conll(36, 3, lambda d, s: f"# doc=D{d} sent={s}"))
    spec = {"type": "ner", "source": "conll", "path": str(f), "max_split_overlap": 1.0, "doc_marker": marker,
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}
    with caplog.at_level("WARNING", logger="clmdetour.tasks.formats"):
        build_task("t", spec)
    warned = [r.getMessage() for r in caplog.records if "looks like a document mark" in r.getMessage()]
    if marker:
        assert warned == []
        return
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"{f}:2: comment '# doc=D0 sent=0' looks like a document mark")
    assert "(109 comment lines skipped)" in warned[0] and "set tasks.t.doc_marker to a regular expression" in warned[0]


def test_conll_plain_comments_are_counted_without_a_warning(tmp_path, caplog):
    """CoNLL-U '# sent_id' / '# text' comments are counted as skipped, and warn of nothing."""
    f = _w(tmp_path / "all.conll", _marked_conll(36, 3, lambda d, s: f"# sent_id = {s}\n# text = x"))
    spec = {"type": "ner", "source": "conll", "path": str(f), "max_split_overlap": 1.0,
            "split": {"policy": "hash", "dev_fraction": 0.2, "test_fraction": 0.2}}
    with caplog.at_level("WARNING", logger="clmdetour.tasks.formats"):
        _, _, man = build_task("t", spec)
    assert man["annotations"]["comment_lines_skipped"] == 216
    assert not [r for r in caplog.records if "document mark" in r.getMessage()]
