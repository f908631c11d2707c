"""NER windows cover every word, within the token budget."""
import random

import pytest

from clmdetour.tasktypes.windows import plan_windows, window_inputs, word_token_counts


@pytest.mark.parametrize("seed", range(5))
def test_windows_partition_words_and_fit_budget(seed):
    rng = random.Random(seed)
    counts = [rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(400)] + [40]  # a final word longer than a window
    budget, context = 24, 6
    windows = plan_windows(counts, budget, context)
    covered = [w for win in windows for w in range(win.start, win.end)]
    assert covered == list(range(len(counts)))  # every word scored exactly once, in order
    for win in windows:
        ctx = sum(counts[win.context_start:win.start])
        core = sum(counts[win.start:win.end])
        assert ctx <= context
        assert ctx + core <= budget or win.end - win.start == 1  # only a single over-long word is cut


def test_window_inputs_keep_every_first_subtoken():
    # 3 tokens per word, 30 words, a None token (separator) after word 10
    word_ids = []
    for w in range(30):
        word_ids += [w, w, w] + ([None] if w == 10 else [])
    token_ids = list(range(len(word_ids)))
    counts = word_token_counts(word_ids, 30)
    assert sum(counts) == len(word_ids)
    budget = 10
    seen = {}
    for win in plan_windows(counts, budget, context_tokens=3):
        ids, wids = window_inputs(token_ids, word_ids, 30, win, budget, prefix_ids=[-1], suffix_ids=[-2])
        assert len(ids) <= budget + 2 and ids[0] == -1 and ids[-1] == -2
        for pos, w in enumerate(wids):
            if w is not None and w not in seen:
                seen[w] = ids[pos]
    # the last word (past any single window) is present, and read at its first sub-token
    assert sorted(seen) == list(range(30))
    assert all(seen[w] == word_ids.index(w) for w in range(30))


def test_bad_budget_is_an_error():
    with pytest.raises(ValueError, match="budget"):
        plan_windows([1, 2], 0)
