"""The language setting (clmdetour.language): sentence splitting, word rules, card wording, one place."""
from __future__ import annotations

import ast
import re

import pytest
from helpers import REPO

from clmdetour import language
from clmdetour.config import ConfigError, drop_removed_entries, validate_config
from clmdetour.corpus.decontaminate import words
from clmdetour.tasks import segment
from clmdetour.tasks.brat import sentence_spans


def _sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in sentence_spans(text, splitter="spacy")]


def test_english_splitter_keeps_abbreviations_inside_sentences():
    with language.using("en"):
        assert _sentences("Dr. Smith arrived. He left.") == ["Dr. Smith arrived.", "He left."]
        assert len(_sentences("The dose was raised e.g. in adults. Then it fell.")) == 2
    # the explicit argument wins over the active language
    assert segment.sentence_starts(["Dr. Smith arrived. He left."], language="en") == [[19]]


def test_french_splitting_is_unchanged_and_stays_the_default():
    assert language.active() == language.DEFAULT_LANGUAGE
    text = "Le Dr. Martin a vu M. Dupont. Il va bien."
    assert _sentences(text) == ["Le Dr. Martin a vu M. Dupont.", "Il va bien."]
    # the French pipeline is the trained senter, the English one the rule-based sentencizer
    assert "senter" in segment.spacy_pipeline().pipe_names
    assert segment.spacy_pipeline("en").pipe_names == ["sentencizer"]


def test_activate_restores_and_unknown_codes_name_the_key():
    with language.using("en"):
        assert language.active() == "en"
    assert language.active() == language.DEFAULT_LANGUAGE
    with pytest.raises(language.LanguageError, match=r"config key 'language': 'de' .*\['en', 'fr'\]"):
        language.get_language("de")
    with pytest.raises(language.LanguageError):
        words("text", language="xx")


def test_word_rule_comes_from_the_language():
    text = "L'état général, 2,5 mg/j; patient's CT-scan"
    assert words(text, "fr") == ["l", "état", "général", "2", "5", "mg", "j", "patient", "s", "ct", "scan"]
    assert words(text, "en") == words(text, "fr")  # both \w+ runs (GPT-3's rule), documented in the module


def test_schema_codes_are_the_module_languages():
    import yaml

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    entry = schema["properties"]["language"]
    assert sorted(entry["enum"]) == sorted(language.LANGUAGES) and entry["default"] == language.DEFAULT_LANGUAGE
    tasks = yaml.safe_load((REPO / "workflow/schemas/tasks.schema.yaml").read_text())
    task_entry = tasks["$defs"]["tasks"]["additionalProperties"]["properties"]["language"]
    assert sorted(task_entry["enum"]) == sorted(language.LANGUAGES) and "default" not in task_entry


def _string_constants(tree: ast.AST):
    """String constants of a module, docstrings excluded."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_no_language_code_literal_outside_the_language_module():
    pattern = re.compile(r"^(fr|en)$|^fr[-_]|fr_core|^\[?'fr'", re.IGNORECASE)
    offenders = []
    for path in sorted((REPO / "src").rglob("*.py")) + sorted((REPO / "workflow/scripts").rglob("*.py")):
        if path == REPO / "src/clmdetour/language.py":
            continue
        for node in _string_constants(ast.parse(path.read_text(encoding="utf-8"))):
            if pattern.search(node.value):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value[:60]!r}")
    assert not offenders, offenders


def _config(**over) -> dict:
    import yaml

    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg.update(over)
    return cfg


def test_release_language_must_include_the_language():
    with pytest.raises(ConfigError, match=r"release.language \['fr'\] does not include the config's language 'en'"):
        validate_config(_config(language="en"))
    cfg = validate_config(_config())
    assert cfg["language"] == "fr"
    with pytest.raises(ConfigError, match="config key 'language'"):
        validate_config(_config(language="de"))


def test_null_removes_tasks_and_reference_models():
    cfg = _config()
    cfg["tasks"]["emea"] = None
    cfg["reference_models"]["drbert-7gb"] = None
    assert drop_removed_entries(dict(cfg)) == {"tasks": ["emea"], "reference_models": ["drbert-7gb"]}
    cfg = _config()
    cfg["tasks"]["emea"] = None
    validate_config(cfg)
    assert "emea" not in cfg["tasks"] and "medline" in cfg["tasks"]


def test_english_card_has_no_word_of_the_french_template(tmp_path):
    from helpers_release import build_model, stage_kwargs, write_records

    from clmdetour.release.stage import stage_release

    fr, en = language.get_language("fr"), language.get_language("en")
    template = f"{fr.fill_mask_sentence} {fr.fill_mask_word} {fr.embed_text} {fr.domain} {fr.name}"
    english = set(words(f"{en.fill_mask_sentence} {en.embed_text} {en.domain}"))
    french_words = {w for w in words(template) if len(w) > 3 and w not in english and not w.isdigit()}
    assert {"patiente", "douleur", "thoracique", "french"} <= french_words
    records = write_records(tmp_path / "records")
    model = build_model(tmp_path / "model")
    out = tmp_path / "release"
    kwargs = stage_kwargs(records, model, out, reference_models={}, language="en")
    kwargs["release"] = dict(kwargs["release"], language=["en"], tags=["modernbert", "biomedical", "english"])
    stage_release("clm-detour", **kwargs)
    text = (out / "README.md").read_text()
    found = sorted(french_words & set(words(text)))
    assert not found, found
    assert "language:\n- en" in text and en.fill_mask_sentence.split("{mask}")[0] in text
    assert "widget:" in text and "English biomedical and clinical text" in text
