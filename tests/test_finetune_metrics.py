"""seqeval strict IOB2, classification F1 and the dev-chosen multilabel threshold."""
import numpy as np
import pytest

from clmdetour.tasktypes.metrics import (
    choose_threshold,
    f1_over_thresholds,
    multiclass_scores,
    multilabel_scores,
    ner_scores,
)


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_threshold_scores_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    gold = (rng.random((40, 7)) < 0.25).astype(int)
    gold[:, 6] = 0                        # a label with no gold: undefined where nothing is predicted
    probs = np.clip(0.6 * gold + 0.5 * rng.random((40, 7)), 0, 1)
    probs[:, 6] *= 0.3
    grid = [round(0.05 * k, 2) for k in range(1, 20)]
    fast = f1_over_thresholds(gold, probs, grid)
    for i, t in enumerate(grid):
        slow = multilabel_scores(gold, probs, t)
        assert fast["f1_macro"][i] == pytest.approx(slow["f1_macro"], abs=1e-12)
        assert fast["f1_micro"][i] == pytest.approx(slow["f1_micro"], abs=1e-12)
    # the chosen threshold is the one a per-threshold sklearn search prefers (nearest 0.5 among ties)
    for metric in ("f1_macro", "f1_micro"):
        order = sorted(grid, key=lambda t: (abs(t - 0.5), t))
        expected = max(order, key=lambda t: (multilabel_scores(gold, probs, t)[metric], -order.index(t)))
        t, score = choose_threshold(gold, probs, metric)
        assert t == expected and score == pytest.approx(multilabel_scores(gold, probs, t)[metric])


def test_threshold_search_rejects_bad_input():
    gold = np.zeros((3, 2))
    with pytest.raises(ValueError, match="f1_macro or f1_micro"):
        choose_threshold(gold, gold, "accuracy")
    with pytest.raises(ValueError, match=r"\[N, C\]"):
        choose_threshold(gold, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="empty"):
        choose_threshold(gold, gold, grid=[])
