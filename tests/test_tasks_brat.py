"""BRAT conversion: offsets, nested / discontinuous policies, segmentation, words and IOB2 tags.

The fixture below is hand-written; its expected IOB2 output was checked by hand.
"""

from collections import Counter

import pytest

from clmdetour.tasks.brat import (
    BratError,
    document_to_examples,
    parse_ann,
    read_brat_folder,
    sentence_spans,
    spans_to_iob2,
    tokenize,
)
from clmdetour.tasktypes.tags import iob2_to_spans

TEXT = "Le cancer du sein gauche et l'hépatite B ou C sont traités par tamoxifène."
# T1 outer DISO; T2/T3 nested ANAT; T4 contiguous DISO; T5 discontinuous "hépatite ... C"; T6 CHEM.
ANN = (
    "T1\tDISO 3 24\tcancer du sein gauche\n"
    "T2\tANAT 13 24\tsein gauche\n"
    "T3\tANAT 13 17\tsein\n"
    "T4\tDISO 30 40\thépatite B\n"
    "T5\tDISO 30 38;44 45\thépatite C\n"
    "#1\tAnnotatorNotes T5\tC0019196\n"
    "T6\tCHEM 63 73\ttamoxifène\n"
)
WORDS = ["Le", "cancer", "du", "sein", "gauche", "et", "l'", "hépatite", "B", "ou", "C", "sont", "traités", "par",
         "tamoxifène", "."]
FULL_EXTENT_TAGS = ["O", "B-DISO", "I-DISO", "I-DISO", "I-DISO", "O", "O", "B-DISO", "I-DISO", "I-DISO", "I-DISO",
                    "O", "O", "O", "B-CHEM", "O"]
FIRST_FRAGMENT_TAGS = ["O", "B-DISO", "I-DISO", "I-DISO", "I-DISO", "O", "O", "B-DISO", "I-DISO", "O", "O",
                       "O", "O", "O", "B-CHEM", "O"]


@pytest.fixture()
def brat_dir(tmp_path):
    (tmp_path / "doc1.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "doc1.ann").write_text(ANN, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("policy,tags,nested", [("full_extent", FULL_EXTENT_TAGS, 3),
                                                ("first_fragment", FIRST_FRAGMENT_TAGS, 3)])
def test_nested_and_discontinuous_against_hand_checked_tags(brat_dir, policy, tags, nested):
    (doc,) = read_brat_folder(brat_dir)
    assert len(doc.notes) == 1 and doc.notes[0].target == "T5"
    counts = Counter()
    (ex,) = document_to_examples(doc, "document", policy, counts=counts)
    assert ex["words"] == WORDS
    assert ex["tags"] == tags
    assert ex["text"] == TEXT
    assert counts["discontinuous"] == 1
    assert counts["nested"] == nested
    assert counts["entities"] == 6


def test_surface_mismatch_names_file_and_line(tmp_path):
    (tmp_path / "d.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "d.ann").write_text("T1\tDISO 3 9\tcancer\nT2\tCHEM 63 73\ttamoxifene\n", encoding="utf-8")
    with pytest.raises(BratError, match=r"d\.ann:2: entity T2 .*'tamoxifène'.*'tamoxifene'"):
        read_brat_folder(tmp_path)


def test_offsets_outside_text_and_malformed_lines(tmp_path):
    with pytest.raises(BratError, match=r"x\.ann:1: .*outside the text"):
        (tmp_path / "x.ann").write_text("T1\tDISO 70 90\tfoo\n", encoding="utf-8")
        parse_ann(tmp_path / "x.ann", TEXT)
    (tmp_path / "y.ann").write_text("\nT1\tDISO three 9\tcancer\n", encoding="utf-8")
    with pytest.raises(BratError, match=r"y\.ann:2: entity T1 has malformed"):
        parse_ann(tmp_path / "y.ann", TEXT)


def test_missing_ann_is_an_error_or_counted(tmp_path):
    (tmp_path / "a.txt").write_text("Texte.", encoding="utf-8")
    with pytest.raises(BratError, match=r"a\.ann: annotation file missing for a\.txt"):
        read_brat_folder(tmp_path)
    counts = Counter()
    assert read_brat_folder(tmp_path, missing_ann="drop", counts=counts) == []
    assert counts["documents_without_ann"] == 1
    with pytest.raises(BratError, match="BRAT folder not found"):
        read_brat_folder(tmp_path / "nope")


def test_sentence_split_rule_and_entities_never_cut():
    text = "Il a de la fièvre. Le patient va bien !\nDeuxième ligne sans point"
    spans = [text[a:b] for a, b in sentence_spans(text)]
    assert spans == ["Il a de la fièvre.", "Le patient va bien !", "Deuxième ligne sans point"]
    # lower-case after the period: no boundary; an entity across a boundary protects it
    assert len(sentence_spans("Dose de 5 mg. puis arrêt.")) == 1
    protected = [(11, 21, "DISO")]  # "fièvre. Le"
    assert next(text[a:b] for a, b in sentence_spans(text, protected)) == "Il a de la fièvre. Le patient va bien !"


def test_sentence_segmentation_offsets_are_relative_to_the_segment(tmp_path):
    text = "Prialt est indiqué.\nLa douleur intense persiste."
    (tmp_path / "e.txt").write_text(text, encoding="utf-8")
    (tmp_path / "e.ann").write_text("T1\tCHEM 0 6\tPrialt\nT2\tDISO 23 38\tdouleur intense\n", encoding="utf-8")
    (doc,) = read_brat_folder(tmp_path)
    ex = document_to_examples(doc, "sentence")
    assert [e["id"] for e in ex] == ["e:0", "e:1"]
    assert ex[1]["text"] == "La douleur intense persiste."
    assert ex[1]["words"] == ["La", "douleur", "intense", "persiste", "."]
    assert ex[1]["tags"] == ["O", "B-DISO", "I-DISO", "O", "O"]
    assert ex[0]["tags"] == ["B-CHEM", "O", "O", "O"]


def test_french_tokenisation_keeps_elisions_accents_hyphens_and_decimals():
    text = "l'hépatite d’origine extra-utérine à 12,5 mg/j (qu'il)"
    words = [text[a:b] for a, b in tokenize(text)]
    assert words == ["l'", "hépatite", "d’", "origine", "extra-utérine", "à", "12,5", "mg", "/", "j", "(", "qu'",
                     "il", ")"]
    # an entity boundary inside a word cuts it
    word = "antiviraux"
    assert [word[a:b] for a, b in tokenize(word, {4})] == ["anti", "viraux"]


def test_words_to_tags_round_trip():
    words = [(0, 2), (3, 9), (10, 12), (13, 17), (18, 24)]
    ents = [(3, 9, "DISO"), (13, 24, "ANAT")]
    tags = spans_to_iob2(words, ents)
    assert tags == ["O", "B-DISO", "O", "B-ANAT", "I-ANAT"]
    back = [(words[s][0], words[e - 1][1], t) for s, e, t in iob2_to_spans(tags)]
    assert back == ents
    # adjacent entities of one type stay distinct in IOB2
    assert iob2_to_spans(["B-X", "B-X", "I-X"]) == [(0, 1, "X"), (1, 3, "X")]
    with pytest.raises(ValueError, match="continues no DISO entity"):
        iob2_to_spans(["O", "I-DISO"])
    with pytest.raises(ValueError, match="not O, B-<type> or I-<type>"):
        iob2_to_spans(["DISO"])
