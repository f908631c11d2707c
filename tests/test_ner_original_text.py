"""NER rows carry the original text and each word's offsets; the model is fed that text."""
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from clmdetour.tasks.brat import BratDocument, document_to_examples
from clmdetour.tasks.contract import TaskData
from clmdetour.tasks.formats import read_conll, read_table
from clmdetour.tasks.prepare import build_task
from clmdetour.tasktypes import TASK_TYPES
from clmdetour.tasktypes.base import special_tokens
from clmdetour.textio import locate_words, word_spans

REPO = Path(__file__).resolve().parents[1]
QUAERO = REPO.parent / "shared" / "data" / "quaero" / "corpus"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _task(rows, tags) -> TaskData:
    return TaskData(name="t", task_type=TASK_TYPES["ner"], labels=tags, metric="f1_micro", splits={"test": rows})


def _fed_ids_equal_the_text_ids(rows, tokenizer) -> list[bool]:
    """Per row: whether the ids fed to the model are exactly the ids of tokenising its ``text``."""
    tags = sorted({"O"} | {t for r in rows for t in r["tags"]})
    task = _task(rows, tags)
    enc = task.task_type.encode(rows, task.labels, tokenizer, 100_000, None, task.name)
    prefix, suffix = special_tokens(tokenizer)
    assert len(enc.examples) == len(rows)  # one window per row at this length
    return [ex["input_ids"] == prefix + tokenizer(r["text"], add_special_tokens=False)["input_ids"] + suffix
            for ex, r in zip(enc.examples, rows)]


def test_brat_rows_feed_the_original_text(tokenizer):
    text = "Chez l'adulte, la fièvre à 37,5 °C persiste (voir rubrique 4.4).\nPosologie : 1 g/j."
    doc = BratDocument(doc_id="d", text=text, entities=[], notes=[], txt_path="d.txt", ann_path="d.ann")
    [row] = document_to_examples(doc, "document", "contiguous_first", None)
    assert row["text"] == text
    assert [row["text"][a:b] for a, b in row["word_offsets"]] == row["words"]
    assert " ".join(row["words"]) != text  # the words joined by spaces are another string ...
    assert _fed_ids_equal_the_text_ids([row], tokenizer) == [True]  # ... but the model is fed the text
    # a row prepared before word offsets existed is still read, through the joining rule
    old = {k: v for k, v in row.items() if k != "word_offsets"}
    assert _fed_ids_equal_the_text_ids([old], tokenizer) == [False]


@pytest.mark.skipif(not QUAERO.is_dir(), reason=f"real QUAERO data absent ({QUAERO})")
def test_every_quaero_emea_test_row_feeds_the_ids_of_its_original_text(tokenizer):
    from clmdetour.config import load_yaml

    spec = dict(load_yaml(REPO / "config" / "config.yaml")["tasks"]["emea"], source="brat", path=str(QUAERO))
    rows, _, _ = build_task("emea", spec)
    test = rows["test"]
    for r in test:
        assert [r["text"][a:b] for a, b in r["word_offsets"]] == r["words"], r["id"]
    assert all(_fed_ids_equal_the_text_ids(test, tokenizer))
    joined = [r["text"] != word_spans(r["words"])[0] for r in test]
    # QUAERO's text is itself mostly spaced around punctuation; 92 of its 640 test sentences
    # differ from their words joined by spaces (measured 2026-12-01)
    assert sum(joined) >= 50


def test_word_only_sources_join_words_with_single_spaces(tmp_path):
    conll = tmp_path / "train.conll"
    conll.write_text("l'\tO\nadulte\tB-LIVB\n,\tO\n37,5\tO\n°\tO\nC\tO\n", encoding="utf-8")
    [row] = read_conll(conll)
    assert row["text"] == "l' adulte , 37,5 ° C" and row["word_offsets"] == word_spans(row["words"])[1]


def test_jsonl_rows_with_their_text_feed_it_when_the_words_are_found_in_order(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text('{"id": "a", "text": "Chez l\'adulte, 37,5 °C.", "words": ["Chez", "l\'", "adulte", ",", "37,5", "°", "C", "."],'
                    ' "tags": ["O", "O", "B-LIVB", "O", "O", "O", "O", "O"]}\n'
                    '{"id": "b", "text": "texte sans rapport", "words": ["autre", "chose"], "tags": ["O", "O"]}\n',
                    encoding="utf-8")
    a, b = read_table(path, "jsonl", TASK_TYPES["ner"], {"text_field": "text", "words_field": "words", "tags_field": "tags",
                                             "id_field": "id"})
    assert a["text"] == "Chez l'adulte, 37,5 °C." and [a["text"][s:e] for s, e in a["word_offsets"]] == a["words"]
    assert b["text"] == "autre chose"  # words that are not the text's: joined, as for word-only sources


def test_locate_words_needs_whitespace_only_between_words():
    assert locate_words("la  fièvre\n(38)", ["la", "fièvre", "(", "38", ")"]) == [[0, 2], [4, 10], [11, 12], [12, 14], [14, 15]]
    assert locate_words("la  fièvre\n( 38 )", ["la", "fièvre", "(", "38", ")"]) == [[0, 2], [4, 10], [11, 12], [13, 15], [16, 17]]
    assert locate_words("la fièvre", ["fièvre"]) is None  # text before the first word
    assert locate_words("la fièvre", ["la"]) is None  # text after the last word
    assert locate_words("la fièvre", ["la", "toux"]) is None
