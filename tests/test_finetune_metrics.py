"""seqeval strict IOB2, classification F1 and the dev-chosen multilabel threshold."""
import numpy as np
import pytest

from clmdetour.finetune.metrics import choose_threshold, multiclass_scores, multilabel_scores, ner_scores


def test_strict_and_lenient_seqeval_differ():
    from seqeval.metrics import f1_score

    gold = [["B-DISO", "I-DISO", "O", "B-CHEM"]]
    pred = [["I-DISO", "I-DISO", "O", "B-CHEM"]]  # ill-formed start: lenient accepts it, strict does not
    assert f1_score(gold, pred) == pytest.approx(1.0)  # conlleval-style default
    strict = ner_scores(gold, pred)
    assert strict["precision_micro"] == pytest.approx(1.0)  # only CHEM is predicted, and it is right
    assert strict["recall_micro"] == pytest.approx(0.5)
    assert strict["f1_micro"] == pytest.approx(2 / 3)
    assert strict["f1_macro"] == pytest.approx(0.5)  # DISO 0, CHEM 1


def test_ner_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="document 0"):
        ner_scores([["O", "B-DISO"]], [["O"]])


def test_multiclass_macro_f1():
    s = multiclass_scores([0, 0, 1, 2], [0, 0, 1, 1])
    assert s["f1_macro"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert s["accuracy"] == pytest.approx(0.75)


def test_multilabel_threshold_chosen_on_dev_and_undefined_labels_left_out():
    gold = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]])
    probs = np.array([[0.3, 0.1, 0.0], [0.2, 0.35, 0.0], [0.32, 0.4, 0.1]])
    t, score = choose_threshold(gold, probs)
    assert 0.2 < t <= 0.3 and score == pytest.approx(1.0)
    # label 2: no gold, no prediction -> undefined, left out (not counted as 0)
    assert multilabel_scores(gold, probs, t)["f1_macro"] == pytest.approx(1.0)
    assert multilabel_scores(gold, probs, 0.5)["f1_macro"] == pytest.approx(0.0)
