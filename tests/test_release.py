"""Release stage: compatibility patches, staging round trip, model card, snippets, push (no network)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from helpers import tiny_modernbert_config
from helpers_release import (
    GLOBAL_EVERY,
    GLOBAL_THETA,
    LOCAL_THETA,
    SPECIAL_IDS,
    TASKS,
    build_model,
    default_eval_rows,
    stage_kwargs,
    write_records,
)

from clmdetour.release import ReleaseError
from clmdetour.release.compat import global_every_n, legacy_model_config, legacy_tokenizer_config, mask_token_lstrip
from clmdetour.release.licence import check_licence_policy, licence_restriction
from clmdetour.release.push import LOGIN_HELP, commit_operations, git_blob_sha1, push_release
from clmdetour.release.stage import repo_id_for, stage_release

torch.set_num_threads(1)
SENTENCES = ["Le patient présente une douleur thoracique irradiant vers le bras gauche depuis trois jours.",
             "Adénocarcinome du côlon sigmoïde avec métastases hépatiques multiples, traité par chimiothérapie."]
REPO = "clmdetour-test/cpt-fr-demo"
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The tiny final model and its records (built once per module)."""
    root = tmp_path_factory.mktemp("release")
    model = build_model(root / "final_model")
    return SimpleNamespace(root=root, model=model, records=write_records(root / "records"))


@pytest.fixture(scope="module")
def staged(built):
    """The fixture model staged with no repo id (the card's snippets load the staged folder's path)."""
    out = built.root / "release" / "clm-detour"
    summary = stage_release("clm-detour", **stage_kwargs(built.records, built.model, out))
    return SimpleNamespace(out=out, summary=summary)


def _bare_config():
    """A one-layer ModernBERT of the fixture's vocabulary with transformers' default windows (128 tokens) and
    positions (8192), for a bare ``ModernBertModel``: not an architecture the release stages."""
    return tiny_modernbert_config(600, num_hidden_layers=1, local_attention=128, max_position_embeddings=8192,
                                  **SPECIAL_IDS)


def _front_matter_free(text: str) -> str:
    return text.split("\n---\n", 1)[1]


# ----------------------------------------------------------------------------- compat

def test_global_every_n_matches_the_layer_pattern():
    f, s = "full_attention", "sliding_attention"
    assert global_every_n([f, s, s, f, s, s, f]) == 3
    assert global_every_n([f, f, f]) == 1
    assert global_every_n([f, s, f]) == 2
    with pytest.raises(ReleaseError, match="cannot express"):
        global_every_n([s, f, s])
    with pytest.raises(ReleaseError, match="cannot express"):
        global_every_n([f, s, f, f])
    with pytest.raises(ReleaseError, match="unknown entries"):
        global_every_n([f, "chunked_attention"])


def test_legacy_model_config_adds_the_keys_older_transformers_read():
    from transformers import ModernBertConfig

    cfg = ModernBertConfig(num_hidden_layers=4, global_attn_every_n_layers=2, global_rope_theta=80_000.0,
                           local_rope_theta=2_500.0).to_dict()
    for key in ("global_rope_theta", "local_rope_theta"):
        cfg.pop(key, None)
    out = legacy_model_config(cfg)
    assert (out["global_rope_theta"], out["local_rope_theta"], out["global_attn_every_n_layers"]) == (80_000.0, 2_500.0, 2)
    assert out["rope_parameters"] == cfg["rope_parameters"]  # the new keys stay for recent versions
    bad = dict(cfg, global_rope_theta=1.0)
    with pytest.raises(ReleaseError, match="global_rope_theta"):
        legacy_model_config(bad)
    with pytest.raises(ReleaseError, match="model_type"):
        legacy_model_config(dict(cfg, model_type="bert"))


def test_legacy_tokenizer_config_and_mask_lstrip():
    tok_json = {"added_tokens": [{"id": 0, "content": "[CLS]", "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": True},
                                 {"id": 3, "content": "[MASK]", "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": True}]}
    patched = mask_token_lstrip(tok_json, "[MASK]")
    assert [t["lstrip"] for t in patched["added_tokens"]] == [False, True]
    assert tok_json["added_tokens"][1]["lstrip"] is False  # input untouched
    with pytest.raises(ReleaseError, match="not among added_tokens"):
        mask_token_lstrip(tok_json, "<mask>")
    out = legacy_tokenizer_config({"tokenizer_class": "TokenizersBackend", "model_max_length": 10**30},
                                  patched, {"mask_token": "[MASK]", "cls_token": "[CLS]"}, max_positions=512)
    assert out["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert out["model_input_names"] == ["input_ids", "attention_mask"]
    assert out["model_max_length"] == 512
    assert out["added_tokens_decoder"]["3"]["lstrip"] is True and out["mask_token"] == "[MASK]"


@pytest.mark.parametrize("licence,kind", [
    ("CC-BY-4.0", None), ("CC0-1.0", None), ("MIT", None), ("GFDL-1.3-or-later", None),
    ("CC-BY-NC-4.0", "non-commercial"), ("CC-BY-NC-SA-4.0", "non-commercial"), ("CC BY-NC", "non-commercial"),
    ("research use only", "research-only"), ("unknown", "unknown"), ("", "unknown"), (None, "unknown"),
    ("NOASSERTION", "unknown"), ("LicenseRef-hospital", "unknown"),
    # text that is no known permissive licence is unknown (a release then needs release.licence_reason)
    ("All rights reserved", "unknown"), ("proprietary", "unknown"), ("DUA", "unknown"),
    ("CC-BY-NC4.0", "non-commercial"), ("Apache-2.0", None), ("Etalab-2.0", None), ("ODbL-1.0", None)])
def test_licence_restriction(licence, kind):
    assert licence_restriction(licence) == kind


def test_licence_policy_requires_a_reason():
    with pytest.raises(ReleaseError, match=r"release\.licence_reason.*") as e:
        check_licence_policy({"a": "CC-BY-4.0", "b": "CC-BY-NC-4.0"}, None)
    assert "b (CC-BY-NC-4.0: non-commercial)" in str(e.value) and "a (" not in str(e.value)
    assert check_licence_policy({"b": "CC-BY-NC-4.0"}, "internal research release") == {"b": "non-commercial"}
    assert check_licence_policy({"a": "CC-BY-4.0"}, None) == {}


def test_repo_id_for():
    assert repo_id_for({"repo_ids": {"clm-detour": "org/one"}, "repo_template": "org/x-{variant}"}, "clm-detour") == "org/one"
    assert repo_id_for({"repo_ids": {}, "repo_template": "org/x-{variant}"}, "mlm-baseline") == "org/x-mlm-baseline"
    assert repo_id_for({"repo_ids": {}, "repo_template": None}, "clm-detour") is None
    with pytest.raises(ReleaseError, match="release.repo_ids.clm-detour"):
        repo_id_for({"repo_ids": {"clm-detour": "no-namespace"}}, "clm-detour")


# ----------------------------------------------------------------------------- staging

def test_staged_model_round_trip(built, staged):
    """Staged folder: same logits as the final model, same token ids, compat keys, no token_type_ids."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src_tok, tok = AutoTokenizer.from_pretrained(built.model), AutoTokenizer.from_pretrained(staged.out)
    enc = src_tok(SENTENCES, padding=True, return_tensors="pt")
    assert tok(SENTENCES, padding=True, return_tensors="pt")["input_ids"].tolist() == enc["input_ids"].tolist()
    assert sorted(tok(SENTENCES[0]).keys()) == ["attention_mask", "input_ids"]
    with torch.no_grad():
        a = AutoModelForMaskedLM.from_pretrained(built.model).eval()(**enc).logits
        b = AutoModelForMaskedLM.from_pretrained(staged.out).eval()(**enc).logits
    assert a.shape == (2, enc["input_ids"].shape[1], 600)
    assert torch.equal(a, b)

    cfg = json.loads((staged.out / "config.json").read_text())
    assert (cfg["global_rope_theta"], cfg["local_rope_theta"], cfg["global_attn_every_n_layers"]) == (
        GLOBAL_THETA, LOCAL_THETA, GLOBAL_EVERY)
    tcfg = json.loads((staged.out / "tokenizer_config.json").read_text())
    assert tcfg["tokenizer_class"] == "PreTrainedTokenizerFast" and "token_type_ids" not in tcfg["model_input_names"]
    assert tcfg["model_max_length"] == cfg["max_position_embeddings"]
    assert sorted(p.name for p in staged.out.iterdir()) == ["README.md", "config.json", "model.safetensors",
                                                           "special_tokens_map.json", "tokenizer.json",
                                                           "tokenizer_config.json"]


def test_staged_special_tokens(built, staged):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(staged.out)
    cfg = json.loads((staged.out / "config.json").read_text())
    assert (tok.cls_token, tok.sep_token, tok.pad_token, tok.mask_token, tok.unk_token) == (
        "[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]")
    assert (tok.pad_token_id, tok.cls_token_id, tok.sep_token_id) == (
        cfg["pad_token_id"], cfg["cls_token_id"], cfg["sep_token_id"])
    ids = tok("une douleur")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    # The mask absorbs the space before it, as a masked "Ġword" token did in training: the source
    # tokenizer gives an extra "Ġ" token before the mask, the staged one does not.
    text = "Le patient présente une [MASK] thoracique"
    staged_ids = tok(text)["input_ids"]
    src_ids = AutoTokenizer.from_pretrained(built.model)(text)["input_ids"]
    i = staged_ids.index(tok.mask_token_id)
    assert tok.convert_ids_to_tokens(staged_ids[i - 1]) == "Ġune"
    assert src_ids[:i] + src_ids[i + 1:] == staged_ids and tok.convert_ids_to_tokens(src_ids[i]) == "Ġ"


def test_staging_is_atomic_and_refuses_other_architectures(built, tmp_path):
    from transformers import ModernBertModel

    bare = tmp_path / "bare"
    ModernBertModel(_bare_config()).save_pretrained(bare)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(built.model / f, bare / f)
    out = tmp_path / "release" / "clm-detour"
    with pytest.raises(ReleaseError, match="ModernBertForMaskedLM"):
        stage_release("clm-detour", **stage_kwargs(built.records, bare, out))
    assert not out.exists() and [p.name for p in out.parent.iterdir()] == [".versions"]
    assert not list((out.parent / ".versions" / "clm-detour").iterdir())  # no version, no temporary left


def test_ctrl_c_in_the_middle_of_staging_keeps_the_release(built, tmp_path, monkeypatch):
    """Issue 58, a fault never tried: SIGINT (Ctrl-C) while a restage writes its card, after the model was
    exported into the new version. A real signal to this process: the half-staged version is removed, the
    previous release stays whole and linked by ``{variant}.last-good``, and the job's log gets one line."""
    import signal

    import clmdetour.release.stage as stage_module
    from clmdetour.errors import _hook

    out = tmp_path / "release" / "clm-detour"
    stage_release("clm-detour", **stage_kwargs(built.records, built.model, out))
    first = out.resolve()
    before = {p.name: p.read_bytes() for p in first.iterdir() if p.is_file()}
    real_render = stage_module.render_card

    def render_then_ctrl_c(inputs):
        text = real_render(inputs)
        os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt at the next bytecode
        return text

    monkeypatch.setattr(stage_module, "render_card", render_then_ctrl_c)
    out.unlink()  # what Snakemake does to the output before the job
    # a job's Python process has the default handler (an earlier test of this session may have set another)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            stage_release("clm-detour", **stage_kwargs(built.records, built.model, out))
    finally:
        signal.signal(signal.SIGINT, previous)
    store = out.parent / ".versions" / "clm-detour"
    assert [p.name for p in store.iterdir()] == [first.name]  # no temporary, no half version
    last_good = out.with_name("clm-detour.last-good")
    assert last_good.resolve() == first
    assert {p.name: p.read_bytes() for p in last_good.resolve().iterdir() if p.is_file()} == before
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    _hook(KeyboardInterrupt, caught.value, caught.tb)
    first_line = log.getvalue().splitlines()[0]
    assert first_line.startswith("error: stopped by SIGINT (Ctrl-C)") and "Traceback" not in first_line


def test_a_failed_restage_keeps_the_last_good_release(built, tmp_path):
    """Snakemake deletes a directory output before its job runs: the release is a link to a complete
    version, so a restage that fails leaves the previous release whole, named by ``{variant}.last-good``."""
    from transformers import ModernBertModel

    out = tmp_path / "release" / "clm-detour"
    stage_release("clm-detour", **stage_kwargs(built.records, built.model, out))
    first = out.resolve()
    assert out.is_symlink() and (out / "README.md").exists() and (out / "model.safetensors").exists()
    bare = tmp_path / "bare"  # the replacement fails: not a ModernBertForMaskedLM
    ModernBertModel(_bare_config()).save_pretrained(bare)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(built.model / f, bare / f)
    out.unlink()  # what Snakemake does to the output before the job
    with pytest.raises(ReleaseError, match="ModernBertForMaskedLM"):
        stage_release("clm-detour", **stage_kwargs(built.records, bare, out))
    last_good = out.with_name("clm-detour.last-good")
    assert last_good.resolve() == first and (last_good / "README.md").read_text().startswith("---")
    assert sorted(p.name for p in (last_good / ".").iterdir()) == sorted(p.name for p in first.iterdir())
    for _ in range(2):  # two good restages: the link moves, the two newest versions are kept
        stage_release("clm-detour", **stage_kwargs(built.records, built.model, out))
    versions = [p for p in first.parent.iterdir() if not p.name.startswith(".")]
    assert len(versions) == 2 and first not in versions and out.resolve() == last_good.resolve() in versions


# ----------------------------------------------------------------------------- card

def test_card_front_matter_validates(built, staged):
    """Front matter parses with ModelCard / ModelCardData; model-index: one entry per task, values from the table."""
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.repocard_data import model_index_to_eval_results

    card = ModelCard.load(staged.out / "README.md", ignore_metadata_errors=False)
    data = card.data
    assert data.license == "mit" and data.pipeline_tag == "fill-mask" and data.language == ["fr"]
    assert data.library_name == "transformers"
    again = ModelCardData(**data.to_dict())  # the dict form rebuilds an equal card data object
    assert again.to_dict() == data.to_dict()
    name, results = model_index_to_eval_results(data.to_dict()["model-index"])
    assert name == "clm-detour"
    table = pd.read_csv(built.records["eval_table"], sep="\t").set_index("model")
    assert [r.dataset_name for r in results] == list(TASKS)
    for r, task in zip(results, TASKS):
        assert r.metric_type == TASKS[task]["metric"]
        assert r.metric_value == pytest.approx(round(table.loc["clm-detour", f"{task}_mean"], 4))
        assert r.task_type == {"ner": "token-classification", "multilabel": "text-classification"}[TASKS[task]["type"]]


def test_card_numbers_come_from_the_records(built, staged):
    text = _front_matter_free((staged.out / "README.md").read_text())
    p1 = json.loads(built.records["phase1"].read_text())
    dec = json.loads(built.records["decay"].read_text())
    manifest = json.loads(built.records["manifest"].read_text())
    table = pd.read_csv(built.records["eval_table"], sep="\t").set_index("model")
    cfg = json.loads((staged.out / "config.json").read_text())

    for rec in (p1, dec):
        assert f"{rec['tokens']:,}" in text
        assert f"{rec['trainable_parameters']:,}" in text
    # positions and the non-padding tokens read, both from run.json
    real = f"{p1['real_tokens'] + dec['real_tokens']:,} = {p1['real_tokens']:,} (phase1) + {dec['real_tokens']:,} (decay)"
    assert f"the non-padding tokens read: {real}" in text
    # each evaluated type's averaging convention (the registry's wording), once
    from clmdetour.tasktypes import TASK_TYPES

    for name in {TASKS[t]["type"] for t in TASKS}:
        assert text.count(f"{name}: {TASK_TYPES[name].averaging}") == 1
    assert f"{p1['tokens'] + dec['tokens']:,} tokens" in text
    # tokens consumed (the phases' run.json) apart from the corpus size (the manifest's training split)
    consumed = re.search(r"\*\*Tokens consumed in training:\*\* ([\d,]+) = ([\d,]+) \(phase1\) \+ ([\d,]+) \(decay\)", text)
    assert consumed and [int(g.replace(",", "")) for g in consumed.groups()] == \
        [p1["tokens"] + dec["tokens"], p1["tokens"], dec["tokens"]]
    corpus_tokens = sum(src["tokens_train"] for src in manifest["sources"].values())
    assert f"| **corpus** | {sum(src['documents_train'] for src in manifest['sources'].values()):,} | {corpus_tokens:,} |" in text
    assert f"warm-up over {p1['section']['warmup_tokens']:,} tokens" in text
    assert f"masking rate {100 * dec['section']['masking_rate']:g} %" in text
    assert f"{p1['device']['count']} × {p1['device']['name']}" in text
    assert f"{p1['wall_time_s'] / 3600:.1f} h" in text and f"{dec['wall_time_s'] / 60:.1f} min" in text
    assert "2 tensors: layers 0-1" in text  # phase 1 froze tensors of layers 0 and 1
    for name, src in manifest["sources"].items():
        assert re.search(rf"\| {name} \| {src['documents_train']:,} \| {src['tokens_train']:,} \| .* \| "
                         rf"{src['epochs']:.2f} \| {src['licence']} \|", text)
    assert f"| Hidden size | {cfg['hidden_size']} |" in text and f"| Layers | {cfg['num_hidden_layers']} |" in text
    assert f"{cfg['global_rope_theta']:g} / {cfg['local_rope_theta']:g}" in text
    for model in table.index.drop("trivial"):
        row = table.loc[model]
        cell = f"{100 * row['emea_mean']:.1f} ± {100 * row['emea_std']:.1f}"
        line = next(line for line in text.splitlines() if line.startswith("| ") and model in line.split("|")[1])
        assert cell in line and f"{100 * row['macro_avg']:.1f}" in line
    assert "[camembert-bio](https://huggingface.co/almanach/camembert-bio-base)" in text
    assert f"one-sided exact p = {table.loc['clm-detour', 'sign_p']:.4f}" in text
    assert f"{100 * table.loc['clm-detour', 'emea_delta']:+.1f}" in text


def test_card_shows_seeds_paired_p_mdd_and_the_trivial_row(built, staged):
    text = _front_matter_free((staged.out / "README.md").read_text())
    table = pd.read_csv(built.records["eval_table"], sep="\t").set_index("model")
    clm = table.loc["clm-detour"]
    assert f"- `emea`: named entity recognition, {TASKS['emea']['metric']}, 3 seeds" in text
    assert "| task | seeds | Δ vs mlm-baseline (points) | paired p | Welch p | MDD (points) |" in text
    assert (f"| emea | 3 | {100 * clm['emea_delta']:+.1f} | {clm['emea_p_paired']:.3g} | {clm['emea_p_welch']:.3g} | "
            f"{100 * clm['emea_mdd']:.1f} |") in text
    assert f"| fracco-30 | 3 | {100 * clm['fracco-30_delta']:+.1f} | – | {clm['fracco-30_p_welch']:.3g} | n/a |" in text
    assert "| trivial (best constant predictor) | 0.0 | 38.9 | – |" in text
    assert f"Counting tasks built from the same documents once (by their mean difference): 2 wins, 0 ties, " \
           f"one-sided exact p = {clm['sign_groups_p']:.4f}." in text


def _snippets(readme: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.DOTALL)


def test_card_snippets_run_as_written(staged, monkeypatch):
    """Each python block of the card runs unchanged against the staged folder."""
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snippets = _snippets(staged.out / "README.md")
    assert len(snippets) == 2
    tok = AutoTokenizer.from_pretrained(staged.out)
    cfg = json.loads((staged.out / "config.json").read_text())
    assert f"une {tok.mask_token} thoracique" in snippets[0]
    assert f"max_length={cfg['max_position_embeddings']}, truncation=True" in snippets[1]
    outputs = []
    for code in snippets:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, "README.md snippet", "exec"), {"__name__": "__snippet__"})  # noqa: S102 (the test runs the card example as written)
        outputs.append(buf.getvalue().splitlines())
    guesses = outputs[0]
    assert len(guesses) == 5 and all(re.match(r"\d\.\d{3}  ", g) for g in guesses)
    assert outputs[1] == [f"torch.Size([1, {cfg['hidden_size']}])"]


def test_card_names_the_repo_when_configured(built, tmp_path):
    kwargs = stage_kwargs(built.records, built.model, tmp_path / "clm-detour")
    kwargs["release"] = dict(kwargs["release"], repo_ids={"clm-detour": REPO})
    stage_release("clm-detour", **kwargs)
    text = (tmp_path / "clm-detour" / "README.md").read_text()
    assert f'pipeline("fill-mask", model="{REPO}")' in text and f'from_pretrained("{REPO}")' in text
    assert f"https://huggingface.co/{REPO}" in text and text.splitlines()[0] == "---"
    assert f"# {REPO.split('/')[1]}" in text


# ----------------------------------------------------------------------------- refusals

def test_missing_cells_refused_unless_allowed(built, tmp_path):
    rows = default_eval_rows()
    rows["clm-detour"]["emea_mean"] = float("nan")
    recs = write_records(tmp_path / "records", eval_rows=rows)
    out = tmp_path / "release" / "clm-detour"
    for evaluation in ({"allow_missing": False}, None):
        with pytest.raises(ReleaseError, match=r"missing cells \['emea_mean'\].*evaluation\.allow_missing"):
            stage_release("clm-detour", **stage_kwargs(recs, built.model, out, evaluation=evaluation))
        assert not out.exists()
    summary = stage_release("clm-detour", **stage_kwargs(recs, built.model, out, evaluation={"allow_missing": True}))
    assert summary["missing_cells"] == ["emea_mean"]
    text = (out / "README.md").read_text()
    assert "Incomplete evaluation" in text and "emea_mean" in text
    from huggingface_hub import ModelCard

    assert [r.dataset_name for r in ModelCard(text).data.eval_results] == ["fracco-30"]


def test_card_names_the_tasks_left_out(built, tmp_path):
    out = tmp_path / "release" / "clm-detour"
    why = "task 'diamed' needs files you must provide: missing ['resources/datasets/diamed/train.jsonl']"
    stage_release("clm-detour", **stage_kwargs(built.records, built.model, out, evaluation={"left_out": {"diamed": why}}))
    text = (out / "README.md").read_text()
    assert "**Tasks left out** (1 configured task(s) not evaluated in this run): `diamed`: " + why in text


def test_missing_row_or_task_column_refused(built, tmp_path):
    rows = default_eval_rows()
    del rows["clm-detour"]
    recs = write_records(tmp_path / "records", eval_rows=rows)
    with pytest.raises(ReleaseError, match=r"<row>"):
        stage_release("clm-detour", **stage_kwargs(recs, built.model, tmp_path / "out"))
    tasks = dict(TASKS, cantemist={"type": "ner", "metric": "f1_micro"})
    with pytest.raises(ReleaseError, match=r"cantemist_mean"):
        stage_release("clm-detour", **stage_kwargs(built.records, built.model, tmp_path / "out", tasks=tasks))


def test_restricted_licence_needs_a_reason_stated_in_the_card(built, tmp_path):
    licences = {"clinical_cases": "CC-BY-4.0", "drug_leaflets": "CC-BY-NC-4.0", "abstracts": "unknown"}
    recs = write_records(tmp_path / "records", licences=licences)
    out = tmp_path / "release" / "clm-detour"
    with pytest.raises(ReleaseError, match=r"release\.licence_reason") as e:
        stage_release("clm-detour", **stage_kwargs(recs, built.model, out))
    assert "drug_leaflets (CC-BY-NC-4.0: non-commercial)" in str(e.value) and "abstracts (unknown" in str(e.value)
    assert not out.exists()
    reason = "Weights only, for non-commercial research, as agreed with the data providers."
    kwargs = stage_kwargs(recs, built.model, out)
    kwargs["release"] = dict(kwargs["release"], licence="cc-by-nc-4.0", licence_reason=reason)
    summary = stage_release("clm-detour", **kwargs)
    assert summary["restricted_sources"] == {"drug_leaflets": "non-commercial", "abstracts": "unknown"}
    text = (out / "README.md").read_text()
    assert reason in text and "- drug_leaflets: `CC-BY-NC-4.0` (non-commercial)" in text
    assert "CC-BY-NC-4.0 (non-commercial) |" in text  # flagged in the training-data table


def test_unset_licence_refused_before_export(built, tmp_path):
    kwargs = stage_kwargs(built.records, built.model, tmp_path / "out")
    kwargs["release"] = dict(kwargs["release"], licence=None)
    with pytest.raises(ReleaseError, match=r"release\.licence is not set"):
        stage_release("clm-detour", **kwargs)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- push

class FakeHub:
    """Stands in for ``huggingface_hub.HfApi``: records calls, keeps files, serves a tree like the Hub's."""

    def __init__(self, remote: dict[str, bytes] | None = None, private: bool = True, corrupt: str | None = None):
        self.remote = dict(remote or {})
        self.private = private
        self.corrupt = corrupt
        self.calls = []
        self.oid = "f" * 40

    def create_repo(self, repo_id, private=None, exist_ok=False, repo_type=None):
        from huggingface_hub import RepoUrl

        self.calls.append(("create_repo", repo_id, {"private": private, "exist_ok": exist_ok, "repo_type": repo_type}))
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def repo_info(self, repo_id, repo_type=None):
        self.calls.append(("repo_info", repo_id))
        return SimpleNamespace(private=self.private)

    def list_repo_files(self, repo_id, repo_type=None):
        self.calls.append(("list_repo_files", repo_id))
        return list(self.remote)

    def create_commit(self, repo_id, operations, commit_message, repo_type=None):
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete
        from huggingface_hub.hf_api import CommitInfo

        operations = list(operations)
        self.calls.append(("create_commit", repo_id, {"operations": operations, "message": commit_message}))
        for op in operations:
            if isinstance(op, CommitOperationAdd):
                self.remote[op.path_in_repo] = Path(op.path_or_fileobj).read_bytes()
            elif isinstance(op, CommitOperationDelete):
                del self.remote[op.path_in_repo]
        if self.corrupt:
            self.remote[self.corrupt] = b"corrupted"
        return CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/{self.oid}", commit_message=commit_message,
                          commit_description="", oid=self.oid)

    def list_repo_tree(self, repo_id, revision=None, recursive=False, repo_type=None):
        from huggingface_hub.hf_api import RepoFile

        assert revision == self.oid and recursive
        for path, data in self.remote.items():
            git_id = hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()
            lfs = ({"size": len(data), "oid": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
                   if path.endswith(".safetensors") else None)
            yield RepoFile(path=path, size=len(data), oid=git_id, lfs=lfs)


@pytest.fixture(scope="module")
def staged_for_repo(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("push") / "clm-detour"
    kwargs = stage_kwargs(built.records, built.model, out)
    kwargs["release"] = dict(kwargs["release"], repo_ids={"clm-detour": REPO})
    stage_release("clm-detour", **kwargs)
    return out


def test_push_builds_one_commit_and_a_receipt(staged_for_repo, caplog):
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    secret = "hf_" + "x" * 34
    hub = FakeHub(remote={".gitattributes": b"*.safetensors filter=lfs\n", "pytorch_model.bin": b"old"})
    with caplog.at_level(logging.DEBUG):
        receipt = push_release(staged_for_repo, REPO, private=True, commit_message="Release clm-detour",
                               token=secret, api=hub)
    names = [c[0] for c in hub.calls]
    assert names == ["create_repo", "repo_info", "list_repo_files", "create_commit"]
    assert hub.calls[0][2] == {"private": True, "exist_ok": True, "repo_type": "model"}
    ops = hub.calls[3][2]["operations"]
    files = sorted(p.name for p in staged_for_repo.iterdir())
    adds = [op for op in ops if isinstance(op, CommitOperationAdd)]
    assert [op.path_in_repo for op in adds] == files
    assert [op.path_in_repo for op in ops if isinstance(op, CommitOperationDelete)] == ["pytorch_model.bin"]
    assert hub.calls[3][2]["message"] == "Release clm-detour"
    assert receipt["commit_sha"] == hub.oid and receipt["repo_id"] == REPO and receipt["verified"]
    assert receipt["url"] == f"https://huggingface.co/{REPO}" and receipt["commit_url"].endswith(hub.oid)
    assert receipt["deleted"] == ["pytorch_model.bin"] and receipt["private"] is True
    for name in files:
        data = (staged_for_repo / name).read_bytes()
        assert receipt["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    assert sorted(hub.remote) == sorted(files + [".gitattributes"])
    assert secret not in json.dumps(receipt) and secret not in caplog.text


def test_push_verification_catches_a_changed_file(staged_for_repo):
    for corrupt in ("model.safetensors", "config.json"):
        with pytest.raises(ReleaseError, match=f"{corrupt} differs"):
            push_release(staged_for_repo, REPO, commit_message="m", token="t", api=FakeHub(corrupt=corrupt))


def test_push_refuses_a_public_repo_when_private(staged_for_repo):
    hub = FakeHub(private=False)
    with pytest.raises(ReleaseError, match="exists and is public"):
        push_release(staged_for_repo, REPO, private=True, commit_message="m", token="t", api=hub)
    assert "create_commit" not in [c[0] for c in hub.calls]


def test_push_refuses_a_card_staged_for_another_repo(staged_for_repo):
    hub = FakeHub()
    with pytest.raises(ReleaseError, match="staged for"):
        push_release(staged_for_repo, "someone/else", commit_message="m", token="t", api=hub)
    assert hub.calls == []


def test_push_without_token_fails_before_any_call(staged_for_repo, monkeypatch, tmp_path):
    import huggingface_hub.constants as hc

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hc, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(hc, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-stored-tokens"), raising=False)
    hub = FakeHub()
    with pytest.raises(ReleaseError) as e:
        push_release(staged_for_repo, REPO, commit_message="m", api=hub)
    assert str(e.value) == LOGIN_HELP
    assert "hf auth login" in LOGIN_HELP and "huggingface-cli login" in LOGIN_HELP and "HF_TOKEN" in LOGIN_HELP
    assert hub.calls == []


def test_commit_operations_hash_files(staged_for_repo):
    ops, hashes = commit_operations(staged_for_repo, remote_files=[".gitattributes", "README.md", "old.txt"])
    assert [type(o).__name__ for o in ops].count("CommitOperationDelete") == 1
    assert math.isclose(hashes["config.json"]["bytes"], (staged_for_repo / "config.json").stat().st_size)


def test_git_blob_sha1_matches_git(staged_for_repo):
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    path = staged_for_repo / "config.json"
    expected = subprocess.run([git, "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert git_blob_sha1(path) == expected


# ----------------------------------------------------------------------------- workflow scripts

def _run_script(name: str, smk: SimpleNamespace, monkeypatch) -> None:
    """Run workflow/scripts/{name} as Snakemake would, with ``snakemake`` injected; restores stderr, the
    logging configuration and the exception hook that the script's ``redirect_to_log`` replaces."""
    import logging
    import runpy
    import sys

    from clmdetour.smk import OFFLINE_VARS

    for var in OFFLINE_VARS:
        monkeypatch.setenv(var, os.environ.get(var, "0"))
    saved, hook = sys.stderr, sys.excepthook
    root, ours = logging.getLogger(), logging.getLogger("clmdetour")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    try:
        runpy.run_path(str(REPO_ROOT / "workflow" / "scripts" / name), init_globals={"snakemake": smk})
    finally:
        for h in root.handlers:
            if h not in handlers:
                root.removeHandler(h)
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(levels[0])
        ours.setLevel(levels[1])
        sys.excepthook = hook
        if sys.stderr is not saved:
            sys.stderr.close()
        sys.stderr = saved


def test_stage_release_script(built, tmp_path, monkeypatch):
    from clmdetour.evaluation.claims import ClaimsSpec, build_claims, write_claims

    out = tmp_path / "results" / "release" / "clm-detour"
    kw = stage_kwargs(built.records, built.model, out)
    claims = tmp_path / "results" / "claims.tsv"
    write_claims(build_claims(None, [], None, ClaimsSpec("clm-detour", "mlm-baseline", 4)), str(claims),
                 str(tmp_path / "results" / "claims.md"))
    smk = SimpleNamespace(
        input=SimpleNamespace(model=str(built.model), phase1_run=str(built.records["phase1"]),
                              decay_run=str(built.records["decay"]), manifest=str(built.records["manifest"]),
                              eval_table=str(built.records["eval_table"]), claims=str(claims)),
        params=SimpleNamespace(release=kw["release"], tasks=kw["tasks"], evaluation=kw["evaluation"],
                               base_model=kw["base_model"], description=kw["description"],
                               reference_models=kw["reference_models"], phase1_owner="clm-detour",
                               language="fr"),
        output=[str(out)], log=[str(tmp_path / "stage.log")], wildcards=SimpleNamespace(variant="clm-detour"),
        threads=1, rule="stage_release")
    _run_script("stage_release.py", smk, monkeypatch)
    assert (out / "README.md").exists() and (out / "model.safetensors").exists()
    card = (out / "README.md").read_text()
    assert "What this run says about the paper's claims (`results/claims.tsv`" in card
    assert "- C1, clm-detour beats the matched MLM baseline mlm-baseline across tasks: **not measured (" in card
    assert "staged ['README.md'" in (tmp_path / "stage.log").read_text()


def test_push_release_script_without_token(staged_for_repo, built, tmp_path, monkeypatch):
    import huggingface_hub.constants as hc

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hc, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    receipt = tmp_path / "clm-detour.push.json"
    smk = SimpleNamespace(
        input=SimpleNamespace(staged=str(staged_for_repo), decay_run=str(built.records["decay"])),
        params=SimpleNamespace(repo_id=REPO, private=True, commit_message="Release {variant} ({git_sha})"),
        output=[str(receipt)], log=[str(tmp_path / "push.log")], wildcards=SimpleNamespace(variant="clm-detour"),
        threads=1, rule="push_release")
    with pytest.raises(ReleaseError, match="hf auth login"):
        _run_script("push_release.py", smk, monkeypatch)
    assert not receipt.exists()
