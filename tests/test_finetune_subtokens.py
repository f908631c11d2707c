"""Words without a sub-token of their own (``.`` inside the token ``).``): counted apart from truncated
words, scored through the covering token, warned about when they touch a gold entity."""
import logging
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import tiny_modernbert, train_tokenizer
from helpers_finetune import WORD_RE, write_task_folder

from clmdetour.finetune import inputs as R
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.contract import TaskData
from clmdetour.tasktypes import TASK_TYPES, get_task_type
from clmdetour.tasktypes.align import (
    covering_words,
    entities_out_of_reach,
    iob2_entities,
    tags_of_words_without_token,
    word_ids_from_offsets,
)

# ")." closes most sentences of the training text, so the BPE learns it as one token.
TRAIN_TEXTS = [f"Le patient {i} a une fièvre (CRP). Examen normal (IRM). Bilan (protéine C réactive)."
               for i in range(60)]
TAGS = ["O", "B-EXAM", "I-EXAM"]


def _row(rid: str, text: str, tags_by_word: dict[str, str]) -> dict:
    """A contract row of ``text`` (words by WORD_RE, with offsets); tags by word text, ``O`` elsewhere."""
    spans = [m.span() for m in WORD_RE.finditer(text)]
    words = [text[a:b] for a, b in spans]
    return {"id": rid, "text": text, "words": words, "tags": [tags_by_word.get(w, "O") for w in words],
            "word_offsets": [list(s) for s in spans]}


# the entity ends before ")": "." has no token but the entity is whole
R_OUTSIDE = _row("outside", "Examen normal (IRM).", {"IRM": "B-EXAM"})
# the entity runs on through ")." (an annotation that keeps the final mark): "." inside it, still reachable
R_INSIDE = _row("inside", "Bilan (protéine C réactive).", {"(": "B-EXAM", "protéine": "I-EXAM", "C": "I-EXAM",
                                                             "réactive": "I-EXAM", ")": "I-EXAM", ".": "I-EXAM"})
# the entity ends at ")" and "." is outside: its boundary falls inside the token ")." (out of reach)
R_CUT = _row("cut", "Taux de CRP (protéine C réactive).", {"CRP": "B-EXAM", "(": "I-EXAM", "protéine": "I-EXAM",
                                                            "C": "I-EXAM", "réactive": "I-EXAM", ")": "I-EXAM"})


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TRAIN_TEXTS, vocab_size=320)


def _tokens(tokenizer, row):
    enc = tokenizer(row["text"], add_special_tokens=False, return_offsets_mapping=True)
    return enc["offset_mapping"], word_ids_from_offsets(enc["offset_mapping"], row["word_offsets"])


def test_the_tokenizer_merges_the_closing_bracket_and_the_full_stop(tokenizer):
    for row in (R_OUTSIDE, R_INSIDE, R_CUT):
        offsets, wids = _tokens(tokenizer, row)
        assert [row["text"][a:b] for a, b in offsets][-1] == ")."  # one token over the words ")" and "."
        close, stop = len(row["words"]) - 2, len(row["words"]) - 1
        assert wids[-1] == close and stop not in wids
        assert covering_words(offsets, row["word_offsets"], wids) == {stop: close}


def _task(rows_by_split):
    return TaskData(name="t", task_type=TASK_TYPES["ner"], labels=TAGS, metric="f1_micro", splits=rows_by_split)


def _encode(tokenizer, rows, max_length=64, context=0):
    settings = SimpleNamespace(ner_context_tokens=context)  # the one setting a NER split's encoding reads
    task = _task({"test": rows})
    return task.task_type.encode(rows, task.labels, tokenizer, max_length, settings, task.name)


def test_words_without_token_are_counted_apart_from_truncated_words(tokenizer):
    counts = {}
    for row in (R_OUTSIDE, R_INSIDE, R_CUT):
        enc = _encode(tokenizer, [row])
        counts[row["id"]] = (enc.truncated, enc.words_without_token, enc.words_without_token_in_entity,
                             enc.entities_out_of_reach, enc.entities)
    # (truncated, without token, of them in an entity, entities out of reach, entities)
    assert counts == {"outside": (0, 1, 0, 0, 1), "inside": (0, 1, 1, 0, 1), "cut": (0, 1, 0, 1, 1)}
    both = _encode(tokenizer, [R_OUTSIDE, R_INSIDE, R_CUT])
    assert (both.truncated, both.words_without_token, both.words_without_token_in_entity,
            both.entities_out_of_reach, both.entities) == (0, 3, 1, 1, 3)


def _perfect_logits(enc):
    """Per window, logits whose argmax is the gold tag at every labelled token (first sub-tokens), O elsewhere."""
    out = []
    for ex in enc.examples:
        logits = np.zeros((len(ex["input_ids"]), len(TAGS)), dtype=np.float32)
        for pos, lab in enumerate(ex["labels"]):
            logits[pos, max(lab, 0)] = 1.0  # -100 (unlabelled): O
        out.append(logits)
    return out


@pytest.mark.parametrize("max_length", [64, 6])  # 6: several windows per document (4 tokens each)
def test_a_word_without_token_takes_the_covering_words_tag(tokenizer, max_length):
    ner = get_task_type("ner")
    inside = _encode(tokenizer, [R_INSIDE], max_length)
    assert max_length == 64 or len(inside.examples) > 1
    # perfect at every token: "." continues the entity through ")." and the entity is matched
    assert ner.score(TAGS, "f1_micro", inside, _perfect_logits(inside))["f1_micro"] == 1.0
    cut = _encode(tokenizer, [R_OUTSIDE, R_CUT], max_length)
    scores = ner.score(TAGS, "f1_micro", cut, _perfect_logits(cut))
    # the entity ending at ")" runs on to "." whatever the model says: recall is capped at 1 - 1/2
    assert scores["recall_micro"] == 1 - cut.entities_out_of_reach / cut.entities == 0.5


def test_tags_of_words_without_token_and_entities_out_of_reach():
    tags = ["O", "B-X", "I-X", "O", "B-Y", "O"]
    covered = {2: 1, 3: 1, 5: None}  # words 2 and 3 inside word 1's token; no token over word 5
    assert tags_of_words_without_token(tags, covered) == ["O", "B-X", "I-X", "I-X", "B-Y", "O"]
    assert iob2_entities(["I-X", "B-X", "I-X", "I-Y", "B-Y"]) == {(1, 3, "X"), (4, 5, "Y")}  # strict IOB2
    assert entities_out_of_reach(tags, covered) == 1  # X would run on to word 3; Y keeps its bounds
    assert entities_out_of_reach(["O", "O", "B-X"], {2: 1}) == 1  # an entity starting inside a token
    assert entities_out_of_reach(["O", "B-X", "O"], {2: None}) == 0
    assert entities_out_of_reach(["O", "B-X", "I-X"], {2: None}) == 1  # no token at all over an entity word
    assert entities_out_of_reach(tags, {}) == 0


def test_covering_words_of_a_dropped_character():
    spans = [(0, 3), (4, 5), (5, 6)]
    offsets = [(0, 3), (4, 5)]  # nothing over (5, 6)
    assert covering_words(offsets, spans, word_ids_from_offsets(offsets, spans)) == {2: None}


def test_the_record_counts_them_and_warns_when_they_touch_an_entity(tokenizer, tmp_path, caplog):
    from helpers_finetune import job_settings, task_settings

    model_dir = tiny_modernbert(tokenizer, tmp_path / "model", hidden_size=16, num_layers=1)
    folder = write_task_folder(tmp_path / "task", "puncttask", "ner",
                               {"train": [R_OUTSIDE], "dev": [R_INSIDE], "test": [R_CUT, R_OUTSIDE]})
    config = task_settings("ner", "f1_micro")
    settings = FinetuneSettings.from_dict(job_settings(ner_context_tokens=0, attn_implementation="auto"))
    with caplog.at_level(logging.WARNING, logger="clmdetour.finetune"):
        prepared = R.prepare_task_inputs("puncttask", folder, config, model_dir, settings)
    info = prepared.info
    assert info["truncated"] == {"train": 0, "dev": 0, "test": 0}
    assert info["words_without_token"] == {"train": 1, "dev": 1, "test": 2}
    assert info["words_without_token_in_entity"] == {"train": 0, "dev": 1, "test": 0}
    assert info["entities_out_of_reach"] == {"train": 0, "dev": 0, "test": 1}
    warned = [r.getMessage() for r in caplog.records if "sub-token of their own" in r.getMessage()]
    assert len(warned) == 2, warned  # dev (a word inside an entity) and test (an entity out of reach), not train
    dev, test = sorted(warned)
    assert dev.startswith("task puncttask, split dev: 1 words have no sub-token of their own")
    assert "1 of them inside a gold entity; 0 of 1 gold entities" in dev and "recall at most 1.0000" in dev
    assert test.startswith("task puncttask, split test: 2 words")
    assert "0 of them inside a gold entity; 1 of 2 gold entities" in test and "recall at most 0.5000" in test
