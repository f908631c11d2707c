"""The generated model card (``README.md``) of a staged release.

Front matter: a ``huggingface_hub.ModelCardData`` (licence, language,
base_model, tags, datasets, ``pipeline_tag: fill-mask`` and a ``model-index``
with one entry per task and its metric). Body: architecture (from the staged
``config.json``), training data (tokens and licence per source, from the corpus
manifest), method (phases, tokens, optimiser, schedule, batch, hardware, from
each phase's ``run.json``), evaluation (from ``results/eval_table.tsv``, with
the reference models), usage snippets that a test runs as written,
limitations, licence and citation. Nothing numeric is typed here: every number
is read from those inputs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from clmdetour.language import get_language
from clmdetour.objectives import get_objective
from clmdetour.tasktypes import TASK_TYPES

from . import ReleaseError
from .compat import MIN_TRANSFORMERS
from .licence import check_release_metadata


@dataclass
class CardInputs:
    """Everything the card states, read from the run's files (see ``stage.collect_card_inputs``).

    Attributes:
        variant: variant name (``clm-detour``).
        description: the variant's config description, or None.
        title: card title (the repo name, else the variant).
        repo_id: the Hub repo id (``release.repo_ids`` / ``repo_template``), or None.
        model_ref: what the usage snippets load: the Hub repo id, else the staged folder's path.
        release: the resolved ``release`` config section.
        base_model: the ``base_model`` config section (``key``, ``hub_id``).
        model_config: the staged ``config.json``.
        n_parameters: unique parameters of the staged model (tied decoder counted once).
        tokenizer: ``{"mask_token", "vocab_size", "model_max_length", "class"}`` of the staged tokenizer.
        phases: ``[(phase, run.json record, variant that trained it)]`` in training order.
        sources: per-source manifest rows.
        restricted: ``{source: restriction}`` (licence.py).
        table: the evaluation table (pandas DataFrame).
        tasks: ``{task: {"type", "metric", ...}}`` from the config, in config order.
        baseline: model deltas are measured against.
        reference_models: ``{key: {"hub_id", ...}}`` from the config.
        missing: missing cells of the variant's row (allowed by ``evaluation.allow_missing``).
        left_out: ``{task: why}`` of configured tasks left out of the evaluation (e.g. a
            user-provided task whose files are missing; ``evaluation.missing_user_tasks: skip``).
        language: the config's ``language`` code: the card's wording, usage examples and widget
            (:mod:`clmdetour.language`); None = the active language.
        claims: the rows of ``results/claims.tsv`` (:mod:`clmdetour.evaluation.claims`), or None.
    """

    variant: str
    description: str | None
    title: str
    repo_id: str | None
    model_ref: str
    release: dict[str, Any]
    base_model: dict[str, Any]
    model_config: dict[str, Any]
    n_parameters: int
    tokenizer: dict[str, Any]
    phases: list[tuple[str, dict[str, Any], str]]
    sources: dict[str, dict[str, Any]]
    restricted: dict[str, str]
    table: Any
    tasks: dict[str, dict[str, Any]]
    baseline: str | None = None  # evaluation.baseline (its default lives in the schema); None: no delta lines
    reference_models: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)
    language: str | None = None
    claims: list[dict] | None = None


def _num(value) -> float | None:
    """A float, or None for an empty / NaN cell."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def _row(inp: CardInputs, model: str) -> dict[str, Any] | None:
    rows = inp.table[inp.table["model"] == model]
    return None if rows.empty else rows.iloc[0].to_dict()


def _tokens(n) -> str:
    """Token counts with thousands separators (``10,000,000,000``)."""
    return f"{int(n):,}"


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _pct(fraction: float | None, digits: int = 1) -> str:
    return "–" if fraction is None else f"{100 * fraction:.{digits}f}"


def _hub_link(hub_id: str | None, label: str) -> str:
    return f"[{label}](https://huggingface.co/{hub_id})" if hub_id else label


def _task_type(task: str, spec: dict[str, Any]) -> str:
    kind = spec.get("type")
    if kind not in TASK_TYPES:
        raise ReleaseError(f"config key tasks.{task}.type is {kind!r}; allowed: {sorted(TASK_TYPES)}")
    if not spec.get("metric"):
        raise ReleaseError(f"config key tasks.{task}.metric is missing")
    return TASK_TYPES[kind].hub_task


# ----------------------------------------------------------------------------- front matter

def card_data(inp: CardInputs):
    """The card's front matter as ``huggingface_hub.ModelCardData``.

    ``model-index`` has one ``EvalResult`` per configured task with a result:
    task type (Hub id), dataset (the task's ``hub_id`` or its key), split
    ``test``, metric (the task's configured ``metric``) and value (the variant's
    ``{task}_mean``, a fraction in [0, 1], 4 decimals). ``widget``: the language's fill-mask sentence
    with the tokenizer's mask token (:mod:`clmdetour.language`), once the tokenizer is known.

    Raises:
        ReleaseError: ``release.licence`` unset or not a Hub licence id, licence
            ``other`` without ``licence_name``, a ``release.datasets`` entry that is
            not ``owner/name`` (:func:`clmdetour.release.licence.check_release_metadata`),
            or a task without a known ``type`` / a ``metric``.
    """
    from huggingface_hub import EvalResult, ModelCardData

    rel = inp.release
    licence = check_release_metadata(rel)
    row = _row(inp, inp.variant) or {}
    results = []
    for task, spec in inp.tasks.items():
        task_type = _task_type(task, spec)
        value = _num(row.get(f"{task}_mean"))
        if value is None:
            continue
        results.append(EvalResult(
            task_type=task_type, task_name=TASK_TYPES[spec["type"]].description,
            dataset_type=spec.get("hub_id") or task, dataset_name=spec.get("name") or task, dataset_split="test",
            metric_type=str(spec["metric"]), metric_name=str(spec["metric"]), metric_value=round(value, 4)))
    lang = get_language(inp.language)
    language = rel.get("language") or [lang.code]
    mask = (inp.tokenizer or {}).get("mask_token")  # known once the model is exported
    widget = [{"text": lang.fill_mask_sentence.format(mask=mask)}] if mask else None
    return ModelCardData(
        license=licence, license_name=rel.get("licence_name"), license_link=rel.get("licence_link"),
        language=[language] if isinstance(language, str) else list(language),
        base_model=inp.base_model.get("hub_id") or None,
        tags=list(rel.get("tags") or []) or None, datasets=list(rel.get("datasets") or []) or None,
        library_name="transformers", pipeline_tag="fill-mask",
        model_name=inp.title if results else None, eval_results=results or None, widget=widget)


# ----------------------------------------------------------------------------- body sections

def _architecture(inp: CardInputs) -> str:
    c = inp.model_config
    n = c["global_attn_every_n_layers"]
    depth = c["num_hidden_layers"]
    global_layers = ", ".join(str(i) for i in range(0, depth, n))
    rows = [
        ("Architecture", f"ModernBERT encoder (`{', '.join(c.get('architectures') or ['ModernBertForMaskedLM'])}`)"),
        ("Parameters", f"{inp.n_parameters:,} ({inp.n_parameters / 1e6:.1f} M; input embeddings tied to the MLM decoder)"),
        ("Layers", str(depth)),
        ("Hidden size", str(c["hidden_size"])),
        ("Intermediate size (GLU)", str(c["intermediate_size"])),
        ("Attention heads", str(c["num_attention_heads"])),
        ("Attention", (f"global on layers {global_layers} (one layer in {n}), "
                       f"sliding window of {c['local_attention']} tokens on the others")),
        ("RoPE θ (global / local)", f"{c['global_rope_theta']:g} / {c['local_rope_theta']:g}"),
        ("Maximum sequence length", f"{c['max_position_embeddings']:,} tokens"),
        ("Vocabulary", f"{c['vocab_size']:,} tokens ({inp.tokenizer['class']}, mask token `{inp.tokenizer['mask_token']}`)"),
        ("Activation / normalisation", f"{c.get('hidden_activation', 'gelu')} / LayerNorm (eps {c.get('norm_eps', 1e-5):g})"),
    ]
    base = inp.base_model
    rows.append(("Initialised from", _hub_link(base.get("hub_id"), base.get("hub_id") or f"`{base.get('key')}` (built by the pipeline)")))
    lines = ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "## Model details\n\n" + "\n".join(lines) + "\n"


def _training_data(inp: CardInputs) -> str:
    total = sum(int(r["tokens"]) for r in inp.sources.values())
    lines = ["| source | documents | tokens | share | epochs | licence |", "|---|---:|---:|---:|---:|---|"]
    for name, r in inp.sources.items():
        share = int(r["tokens"]) / total if total else 0.0
        docs = f"{int(r['documents']):,}" if r.get("documents") is not None else "–"
        epochs = f"{float(r['epochs']):.2f}" if r.get("epochs") is not None else "–"
        lic = r.get("licence") or "unknown"
        flag = f" ({inp.restricted[name]})" if name in inp.restricted else ""
        lines.append(f"| {name} | {docs} | {_tokens(r['tokens'])} | {100 * share:.1f} % | {epochs} | {lic}{flag} |")
    docs_total = sum(int(r.get("documents") or 0) for r in inp.sources.values())
    lines.append(f"| **corpus** | {docs_total:,} | {_tokens(total)} | 100 % | | |")
    consumed = [(ph, int(r["tokens"])) for ph, r, _ in inp.phases]
    parts = " + ".join(f"{_tokens(n)} ({ph})" for ph, n in consumed)
    text = ("## Training data\n\nThe corpus: documents and tokens of its training split per source, from the corpus "
            "manifest. It is one pass over the weighted mix at `corpus.train_tokens`; epochs per source below 1 "
            "mean the source was subsampled (without replacement), above 1 that it was repeated to reach its "
            "weighted share.\n\n" + "\n".join(lines) + "\n\n"
            f"**Tokens consumed in training:** {_tokens(sum(n for _, n in consumed))} = {parts}, the sum of the "
            "phases' `run.json` tokens. Phase 1 reads the corpus once (rounded up to whole global batches); the "
            "decay continues into the next pass, reshuffled.\n")
    real = [(ph, r.get("real_tokens")) for ph, r, _ in inp.phases]  # absent from records written before it existed
    if all(n is not None for _, n in real):
        total_real = sum(int(n) for _, n in real)
        text += (f"These count positions, padding included (budgets and schedules are set in positions); the "
                 f"non-padding tokens read: {_tokens(total_real)} = "
                 + " + ".join(f"{_tokens(int(n))} ({ph})" for ph, n in real) + ".\n")
    return text


def _frozen_summary(frozen) -> str:
    if isinstance(frozen, (int, float)):
        return "none" if not frozen else f"{int(frozen)} tensors"
    names = list(frozen or [])
    if not names:
        return "none"
    layers = sorted({int(m.group(1)) for m in (re.search(r"layers\.(\d+)\.", n) for n in names) if m})
    parts = []
    if any("embeddings" in n for n in names):
        parts.append("embeddings (and the tied decoder)")
    if layers:
        spans, start = [], layers[0]
        for a, b in zip(layers, layers[1:] + [None]):
            if b != a + 1:
                spans.append(f"{start}" if start == a else f"{start}-{a}")
                start = b
        parts.append("layers " + ", ".join(spans))
    return f"{len(names)} tensors: " + "; ".join(parts) if parts else f"{len(names)} tensors"


def _objective(phase: str, rec: dict[str, Any]) -> str:
    return get_objective(rec["objective"], f"{phase} run.json objective").card_text(
        rec["section"], rec["attention"]["implementation"])


def _schedule(phase: str, rec: dict[str, Any]) -> str:
    sec = rec["section"]
    lr = float(sec["lr"])  # the phase's one learning-rate key
    warm = int(sec.get("warmup_tokens") or 0)
    warm_text = f"linear warm-up over {_tokens(warm)} tokens, then " if warm else ""
    if phase == "decay":
        f = float(sec["final_lr_fraction"])  # resolve_phase always sets it (schema default 0.1)
        return (f"{warm_text}1-sqrt decay from {lr:g}: lr(t) = {lr:g} × ({f:g} + {1 - f:g} × (1 − √(t/T))), "
                f"ending at {100 * f:g} % of the peak")
    return f"{warm_text}constant {lr:g}"


def _method(inp: CardInputs) -> str:
    names = {"phase1": "Phase 1", "decay": "Decay"}
    headers = [f"{names.get(ph, ph)} ({rec['objective'].upper()})" + (f", shared with `{owner}`" if owner != inp.variant else "")
               for ph, rec, owner in inp.phases]
    recs = [rec for _, rec, _ in inp.phases]
    opt = lambda r: r["section"]["optimizer"]

    def batch(r):
        gb, seq = int(r["global_batch_sequences"]), int(r["seq_len"])
        return (f"{gb} sequences × {seq:,} tokens = {gb * seq:,} tokens per step; {r['micro_batch_sequences']} "
                f"per device per forward pass, gradient accumulation {r['grad_accum']}")

    def hardware(r):
        d = r["device"]
        name = d.get("name") or d["type"]
        return f"{d['count']} × {name} ({d['type']}), world size {r['world_size']}"

    def software(r):
        v = r.get("versions") or {}
        return ", ".join(f"{k} {v[k]}" for k in sorted(v))

    rows = [
        ("Objective", lambda r, ph: _objective(ph, r)),
        ("Tokens trained", lambda r, ph: _tokens(r["tokens"])),
        ("Optimiser", lambda r, ph: (f"DecoupledAdamW (Composer), betas ({', '.join(f'{b:g}' for b in opt(r)['betas'])}), "
                                     f"eps {opt(r)['eps']:g}, decoupled weight decay {opt(r)['weight_decay']:g} "
                                     f"(not on biases and norms)")),
        ("Learning-rate schedule", lambda r, ph: _schedule(ph, r)),
        ("Batch", lambda r, ph: batch(r)),
        ("Precision", lambda r, ph: str(r.get("precision") or r["section"].get("precision", "–"))),
        ("Frozen parameters", lambda r, ph: _frozen_summary(r["frozen_parameters"])),
        ("Trainable parameters", lambda r, ph: f"{int(r['trainable_parameters']):,}"),
        ("Hardware", lambda r, ph: hardware(r)),
        ("Wall time", lambda r, ph: _duration(float(r["wall_time_s"]))),
        ("Software", lambda r, ph: software(r)),
        ("Code revision", lambda r, ph: f"`{str(r['git_sha'])[:12]}`"),
    ]
    lines = ["| | " + " | ".join(headers) + " |", "|---|" + "---|" * len(headers)]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(fn(r, ph) for (ph, r, _) in inp.phases) + " |")
    total = sum(int(r["tokens"]) for r in recs)
    intro = (f"Continued pretraining of the base model in {len(inp.phases)} phases "
             f"({_tokens(total)} tokens in all), recorded in each phase's `run.json`. The *CLM detour*: a "
             f"first phase of causal language modelling on the encoder, then an MLM decay phase that returns "
             f"it to bidirectional masked-token prediction.")
    return "## Training procedure\n\n" + intro + "\n\n" + "\n".join(lines) + "\n"


TRIVIAL_ROW = "trivial"  # clmdetour.evaluation.table.TRIVIAL_ROW: each task's best constant predictor


def _model_label(inp: CardInputs, model: str) -> str:
    if model == inp.variant:
        return f"**{model} (this model)**"
    if model == TRIVIAL_ROW:
        return "trivial (best constant predictor)"
    ref = (inp.reference_models or {}).get(model) or {}
    if ref.get("hub_id"):
        return _hub_link(ref["hub_id"], model)
    if model == inp.base_model.get("key") and inp.base_model.get("hub_id"):
        return _hub_link(inp.base_model["hub_id"], f"{model} (base)")
    return model


def _seeds(inp: CardInputs, task: str) -> int | None:
    """Seeds with a result for ``task``: the variant's ``{task}_n``, else the largest over the model rows."""
    own = _num((_row(inp, inp.variant) or {}).get(f"{task}_n"))
    if own is not None:
        return int(own)
    col = f"{task}_n"
    if col not in inp.table.columns:
        return None
    vals = [v for v in (_num(x) for x in inp.table[col]) if v is not None]
    return int(max(vals)) if vals else None


def _p_text(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def _evaluation(inp: CardInputs) -> str:
    tasks = list(inp.tasks)
    if not tasks:
        return "## Evaluation\n\nNo evaluation tasks were configured for this run.\n"
    head = "| model | " + " | ".join(f"{t} ({inp.tasks[t]['metric']})" for t in tasks) + " | macro avg |"
    lines = [head, "|---|" + "---:|" * (len(tasks) + 1)]
    for _, r in inp.table.iterrows():
        cells = []
        for t in tasks:
            mean, std = _num(r.get(f"{t}_mean")), _num(r.get(f"{t}_std"))
            cells.append("–" if mean is None else _pct(mean) + ("" if std is None else f" ± {_pct(std)}"))
        cells.append(_pct(_num(r.get("macro_avg"))))
        lines.append(f"| {_model_label(inp, str(r['model']))} | " + " | ".join(cells) + " |")

    def kind(t: str) -> str:
        n = _seeds(inp, t)
        text = f"- `{t}`: {TASK_TYPES[inp.tasks[t]['type']].description}, {inp.tasks[t]['metric']}"
        text += "" if n is None else f", {n} seed{'' if n == 1 else 's'}"
        return text + (f"; {inp.tasks[t]['description'].strip()}" if inp.tasks[t].get("description") else "")

    kinds = "\n".join(kind(t) for t in tasks)
    used = sorted({(inp.tasks[t]["type"], TASK_TYPES[inp.tasks[t]["type"]].averaging_for(inp.tasks[t].get("metric")))
                   for t in tasks})
    kinds += "\n\nHow each score is averaged: " + "; ".join(f"{name}: {wording}" for name, wording in used) + "."
    has_trivial = (inp.table["model"] == TRIVIAL_ROW).any()
    text = ("## Evaluation\n\nEach model is fine-tuned on each task with several seeds (the same seeds for every "
            "model); test scores × 100, mean ± standard deviation over seeds (from `results/eval_table.tsv`)."
            + (" The `trivial` row is each task's best constant predictor, chosen on train and scored on test: the "
               "score a model gets without reading the text." if has_trivial else "")
            + "\n\n" + kinds + "\n\n" + "\n".join(lines) + "\n")
    row = _row(inp, inp.variant) or {}
    if inp.baseline and inp.variant != inp.baseline and _row(inp, inp.baseline) is not None:
        d_lines = ["| task | seeds | Δ vs " + inp.baseline + " (points) | paired p | Welch p | MDD (points) |",
                   "|---|---:|---:|---:|---:|---:|"]
        for t in tasks:
            delta, n = _num(row.get(f"{t}_delta")), _num(row.get(f"{t}_n"))
            mdd = _num(row.get(f"{t}_mdd"))
            d_text = "–" if delta is None else f"{100 * delta:+.1f}"
            d_lines.append(f"| {t} | {'–' if n is None else int(n)} | {d_text} | {_p_text(_num(row.get(f'{t}_p_paired')))} | "
                           f"{_p_text(_num(row.get(f'{t}_p_welch')))} | {'n/a' if mdd is None else f'{100 * mdd:.1f}'} |")
        text += (f"\nDifference to the matched baseline `{inp.baseline}`, with the two-sided paired t-test "
                 "(seeds paired), Welch's t-test and the minimum detectable difference (MDD: the smallest difference "
                 "a two-sample t-test finds at α = 0.05 with power 0.8 given the seeds' spread); – is an undefined "
                 "test (constant scores), n/a an MDD without measured spread:\n\n" + "\n".join(d_lines) + "\n")
        wins, ties, sp = _num(row.get("sign_wins")), _num(row.get("sign_ties")), _num(row.get("sign_p"))
        if wins is not None and sp is not None:
            ties_text = "" if ties is None else f", {int(ties)} tie{'' if int(ties) == 1 else 's'}"
            text += (f"\nSign test across tasks: {int(wins)} wins{ties_text} out of {len(tasks)} tasks, "
                     f"one-sided exact p = {sp:.4f}.\n")
        gw, gt, gp = (_num(row.get(k)) for k in ("sign_groups_wins", "sign_groups_ties", "sign_groups_p"))
        if gw is not None and gp is not None:
            gt_text = "" if gt is None else f", {int(gt)} tie{'' if int(gt) == 1 else 's'}"
            text += (f"Counting tasks built from the same documents once (by their mean difference): {int(gw)} wins"
                     f"{gt_text}, one-sided exact p = {gp:.4f}.\n")
    if inp.claims:
        text += ("\nWhat this run says about the paper's claims (`results/claims.tsv`; the rule behind each "
                 "verdict: docs/claims.md; each pretraining arm is one run, so no verdict covers pretraining-seed "
                 "variance):\n\n" + "\n".join(f"- {c['claim']}, {c['statement']}: **{c['verdict']}**"
                                              + (f" ({c['this_run']})" if c.get("this_run") else "")
                                              for c in inp.claims) + "\n")
    if inp.left_out:
        text += (f"\n**Tasks left out** ({len(inp.left_out)} configured task(s) not evaluated in this run): "
                 + "; ".join(f"`{t}`: {why}" for t, why in inp.left_out.items()) + "\n")
    if inp.missing:
        text += (f"\n**Incomplete evaluation**: no result for {', '.join(inp.missing)} "
                 f"(released with `evaluation.allow_missing: true`).\n")
    return text


def usage_snippets(model_ref: str, mask_token: str, max_length: int, language: str | None = None) -> list[str]:
    """The card's Python usage snippets, as source code.

    Args:
        model_ref: the repo id (or folder) ``from_pretrained`` loads.
        mask_token: the model's own mask token, written literally into the sentence.
        max_length: truncation length (tokens): the model's ``max_position_embeddings``.
        language: language code of the example texts (None: the active language).

    Returns:
        [fill-mask snippet, ``AutoModel`` embedding snippet].
    """
    lang = get_language(language)
    sentence = lang.fill_mask_sentence.format(mask=mask_token)
    fill = (
        "from transformers import pipeline\n\n"
        f"fill_mask = pipeline(\"fill-mask\", model=\"{model_ref}\")\n"
        f"for guess in fill_mask(\"{sentence}\"):\n"
        "    print(f\"{guess['score']:.3f}  {guess['token_str']}\")\n"
    )
    embed = (
        "import torch\n"
        "from transformers import AutoModel, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained(\"{model_ref}\")\n"
        f"model = AutoModel.from_pretrained(\"{model_ref}\")\n"
        f"texts = [\"{lang.embed_text}\"]\n"
        f"inputs = tokenizer(texts, max_length={max_length}, truncation=True, padding=True, return_tensors=\"pt\")\n"
        "with torch.no_grad():\n"
        "    hidden = model(**inputs).last_hidden_state  # (batch, tokens, hidden_size)\n"
        "mask = inputs[\"attention_mask\"].unsqueeze(-1)\n"
        "embeddings = (hidden * mask).sum(1) / mask.sum(1)  # mean pooling: (batch, hidden_size)\n"
        "print(embeddings.shape)\n"
    )
    return [fill, embed]


def _usage(inp: CardInputs) -> str:
    fill, embed = usage_snippets(inp.model_ref, inp.tokenizer["mask_token"], int(inp.model_config["max_position_embeddings"]),
                                 inp.language)
    return (f"## Usage\n\nRequires `transformers >= {MIN_TRANSFORMERS}` (the first release with ModernBERT); the "
            f"mask token is `{inp.tokenizer['mask_token']}`.\n\nFill-mask:\n\n```python\n{fill}```\n\n"
            f"Embeddings for long documents (up to {int(inp.model_config['max_position_embeddings']):,} tokens) "
            f"or as the encoder of a fine-tuned model (`AutoModelForTokenClassification`, "
            f"`AutoModelForSequenceClassification`):\n\n```python\n{embed}```\n")


def _limitations(inp: CardInputs) -> str:
    text = ("## Limitations\n\n"
            "- A pretrained encoder, not a clinical tool: fine-tune and validate it before any use, and never use "
            "its outputs for a diagnosis or treatment decision.\n"
            f"- Evaluated only on the tasks above; scores on other {get_language(inp.language).name} biomedical text, "
            "on other languages "
            "or on other document types are unknown.\n"
            "- The pretraining text carries the biases, errors and dated practice of its sources; the fill-mask "
            "output can state wrong medical facts fluently.\n"
            f"- Sequences longer than {int(inp.model_config['max_position_embeddings']):,} tokens must be truncated "
            "or split.\n")
    extra = (inp.release.get("limitations") or "").strip()
    return text + (f"\n{extra}\n" if extra else "")


def _licence(inp: CardInputs) -> str:
    rel = inp.release
    name = rel.get("licence_name") or rel.get("licence")
    link = rel.get("licence_link")
    text = f"## Licence\n\nThe weights are released under {f'[{name}]({link})' if link else f'`{name}`'}.\n"
    if inp.restricted:
        listed = "\n".join(f"- {s}: `{inp.sources[s].get('licence') or 'unknown'}` ({kind})"
                           for s, kind in sorted(inp.restricted.items()))
        text += (f"\nSome pretraining sources are non-commercial, research-only or of unknown licence:\n\n{listed}\n\n"
                 f"Why this release is published under this licence: {rel['licence_reason'].strip()}\n")
    return text


def _citation(inp: CardInputs) -> str:
    given = (inp.release.get("citation") or "").strip()
    if not given:
        key = re.sub(r"[^A-Za-z0-9]+", "_", inp.title).strip("_")
        where = f"https://huggingface.co/{inp.repo_id}" if inp.repo_id else inp.model_ref
        sha = str(inp.phases[-1][1]["git_sha"])[:12]
        name = get_language(inp.language).name
        given = (f"@misc{{{key},\n  title = {{{inp.title}: a {name} biomedical ModernBERT encoder "
                 f"continued-pretrained with a CLM detour}},\n  howpublished = {{\\url{{{where}}}}},\n"
                 f"  note = {{clmdetour pipeline, revision {sha}}}\n}}")
    return f"## Citation\n\n```bibtex\n{given}\n```\n"


def render_card(inp: CardInputs) -> str:
    """The full ``README.md`` text: YAML front matter and the Markdown body.

    Raises:
        ReleaseError: see ``card_data``.
    """
    data = card_data(inp)
    total = sum(int(r["tokens"]) for _, r, _ in inp.phases)
    base = inp.base_model.get("hub_id") or f"`{inp.base_model.get('key')}`"
    summary = (f"`{inp.variant}`" + (f": {inp.description.strip()}" if inp.description else "") +
               f". A ModernBERT encoder for {get_language(inp.language).domain}, continued-pretrained from {base} "
               f"on {_tokens(total)} tokens.")
    body = "\n".join([f"# {inp.title}\n", summary + "\n", _architecture(inp), _training_data(inp), _method(inp),
                      _evaluation(inp), _usage(inp), _limitations(inp), _licence(inp), _citation(inp)])
    return f"---\n{data.to_yaml()}\n---\n\n{body}"
