"""Decontamination of pretraining documents against evaluation texts.

Rule (after the 13-gram overlap test of GPT-3, Brown et al. 2020,
appendix C): words are matches of the language's word pattern
(:attr:`clmdetour.language.Language.word_pattern`: ``\\w+`` runs for French
and English) after NFKC normalisation and lower-casing; a pretraining document is dropped if it shares a 13-word n-gram
with the dev/test text of a task, or contains a whole evaluation text of
5-12 words (titles are too short for 13-grams). An n-gram (or short text)
found in more than ``boilerplate_max_documents`` pretraining documents is
boilerplate (licence notices, section headers) and never causes a drop, so a
source is not wiped out by text it shares with an evaluation set by accident.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter

from clmdetour.language import get_language


@functools.lru_cache(maxsize=8)
def _word_re(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def words(text: str, language: str | None = None) -> list[str]:
    """The words of the NFKC-normalised, lower-cased text: matches of the language's word pattern
    (``\\w+`` runs; :mod:`clmdetour.language`; ``language`` None = the active language).

    Raises:
        clmdetour.language.LanguageError: an unknown language code.
    """
    return _word_re(get_language(language).word_pattern).findall(unicodedata.normalize("NFKC", text).lower())


class Decontaminator:
    """Index of evaluation n-grams and short texts, and the per-document matcher.

    Args:
        eval_texts: ``{task: [texts of its dev and test splits]}``.
        ngram: n-gram length in words (13).
        short_min_words, short_max_words: evaluation texts of this many words are
            matched whole (5-12).
    """

    def __init__(self, eval_texts: dict[str, list[str]], ngram: int = 13, short_min_words: int = 5,
                 short_max_words: int = 12):
        self.ngram = ngram
        self.short_lengths: set[int] = set()
        self.keys: dict[str, set[str]] = {}  # key -> tasks
        for task, texts in eval_texts.items():
            for text in texts:
                w = words(text)
                if short_min_words <= len(w) <= short_max_words:
                    self._add(" ".join(w), task)
                    self.short_lengths.add(len(w))
                for i in range(len(w) - ngram + 1):
                    self._add(" ".join(w[i:i + ngram]), task)

    def _add(self, key: str, task: str) -> None:
        self.keys.setdefault(key, set()).add(task)

    def matches(self, text: str) -> list[str]:
        """Evaluation keys (n-grams or whole short texts) found in ``text``, sorted, unique."""
        if not self.keys:
            return []
        w = words(text)
        found = set()
        for n in {self.ngram, *self.short_lengths}:
            for i in range(len(w) - n + 1):
                key = " ".join(w[i:i + n])
                if key in self.keys:
                    found.add(key)
        return sorted(found)


def decide_drops(doc_matches: list[list[str]], decon: Decontaminator, boilerplate_max_documents: int = 10):
    """Which documents to drop, given each document's matched keys.

    Args:
        doc_matches: per pretraining document, its matched keys (``Decontaminator.matches``).
        decon: the index (maps keys to tasks).
        boilerplate_max_documents: keys found in more documents than this are ignored.

    Returns:
        ``(drop, tasks_per_doc, boilerplate_keys)``: a list of bools, for each
        dropped document the tasks it overlapped, and the set of ignored keys.
    """
    counts = Counter(k for m in doc_matches for k in set(m))
    boilerplate = {k for k, c in counts.items() if c > boilerplate_max_documents}
    drop, tasks = [], []
    for m in doc_matches:
        real = [k for k in m if k not in boilerplate]
        drop.append(bool(real))
        tasks.append(sorted({t for k in real for t in decon.keys[k]}))
    return drop, tasks, boilerplate


def decontamination_tasks(config: dict, left_out: dict | list | tuple = ()) -> tuple[list[str], str]:
    """The tasks whose dev/test texts are removed from training text, and a warning for the others.

    Args:
        config: the validated config (``corpus.decontaminate_against``, ``tasks``).
        left_out: user-provided tasks left out for missing files
            (:func:`clmdetour.tasks.spec.left_out_tasks`); ``all`` skips them.

    Returns:
        ``(tasks, warning)``: task names in config order for ``all`` (every
        configured task not left out), else the explicit list as given; the
        warning names every configured task that is not decontaminated against
        (empty string when none), since its dev/test text may then sit in the
        pretraining corpus.
    """
    configured = list(config.get("tasks") or {})
    spec = config["corpus"]["decontaminate_against"]
    tasks = [t for t in configured if t not in left_out] if spec == "all" else list(spec)
    missing = [t for t in configured if t not in tasks]
    if not missing:
        return tasks, ""
    if spec == "all":
        why, fix = "their files are missing", "once provided they are, which reruns corpus preparation and pretraining"
    else:
        why, fix = "corpus.decontaminate_against does not list them", "set it to all, or list them"
    return tasks, (f"{len(missing)} configured task(s) are not decontaminated against ({why}): {', '.join(missing)}; "
                   f"their dev/test texts may occur in the pretraining corpus ({fix}; docs/tasks.md, Decontamination)")
