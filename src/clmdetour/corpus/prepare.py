"""Corpus preparation: load, clean, deduplicate, decontaminate, split, weight, tokenise, pack.

``prepare_corpus`` writes ``{out}/train``, ``{out}/valid`` (``datasets`` on
disk, columns ``input_ids``: ``seq_len`` ids in the vocabulary's smallest unsigned type, and
``n_tokens``: the real tokens at the start of the row, :mod:`clmdetour.corpus.pack`) and
``{out}/manifest.json``. Heavy steps (hashing, n-gram matching, tokenising,
packing) are batched ``datasets.map`` calls over ``num_proc`` processes.

Mixing: with ``corpus.train_tokens`` set, each source gets
``weight / sum(weights) x train_tokens`` tokens: a source with fewer tokens
repeats (whole epochs plus a seeded random subset), capped at its
``max_epochs``; a larger source is subsampled. Without it every source
appears once. Documents of all sources are shuffled together (seeded) before
packing.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import re
import unicodedata
from pathlib import Path

import numpy as np

from clmdetour.corpus.decontaminate import Decontaminator, decide_drops
from clmdetour.corpus.pack import pack_batch, packed_features, packing_efficiency, token_dtype
from clmdetour.corpus.sources import SourceError, load_source
from clmdetour.errors import ExpectedError, InputError
from clmdetour.io import TokenHasher, atomic_output_dir, atomic_write_json, sha256_json

log = logging.getLogger(__name__)
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


class DecontaminationError(ExpectedError, ValueError):
    """A source lost more than ``corpus.max_drop_fraction`` of its documents."""


#: Characters of a run without spaces above which a short document is counted as a blob (``overlong_word``):
#: French's longest dictionary words have about 25 letters, and URLs rarely exceed 1,000 characters.
MAX_WORD_CHARS = 1000


def clean_text(text: str | None, form: str = "NFC") -> str:
    """Unicode-normalise, collapse runs of spaces and blank lines, strip."""
    if not text:
        return ""
    text = unicodedata.normalize(form, text)
    text = _SPACES.sub(" ", text)
    text = _BLANK_LINES.sub("\n", text)
    return text.strip()


def _doc_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _in_valid(h: str, fraction: float) -> bool:
    return int(h[:8], 16) / 0xFFFFFFFF < fraction


def held_apart(h: str, fraction: float) -> bool:
    """Whether a document (by its text hash) is reserved for building the base model.

    Uses hash digits 8-15, independent of the validation split (digits 0-7).
    """
    return fraction > 0 and int(h[8:16], 16) / 0xFFFFFFFF < fraction


def _keep_document(text: str, cfg: dict) -> bool:
    """Whether a cleaned document is long enough to keep (``corpus.min_chars`` and ``corpus.min_words``)."""
    return len(text) >= cfg["min_chars"] and len(text.split()) >= cfg["min_words"]


def _decontaminator(cfg: dict, eval_texts: dict[str, list[str]] | None) -> Decontaminator:
    dcfg = cfg["decontamination"]
    return Decontaminator(eval_texts or {}, dcfg["ngram_words"], dcfg["short_text_min_words"],
                          dcfg["short_text_max_words"])


def decontaminate(ds, decon: Decontaminator, cfg: dict, name: str, num_proc: int = 1):
    """Drop the documents of one source that overlap an evaluation text.

    Args:
        ds: a ``datasets.Dataset`` with a ``text`` column (cleaned documents).
        decon: the index of the evaluation tasks' dev/test texts (n-grams of
            ``corpus.decontamination.ngram_words`` words, and whole short texts).
        cfg: the validated ``corpus`` section (``batch_size``, ``max_drop_fraction``,
            ``decontamination.boilerplate_max_documents``).
        name: what ``ds`` is, for the error message (``corpus source 'x'``).
        num_proc: worker processes of the matching ``datasets.map``.

    Returns:
        ``(kept, dropped, dropped_per_task, boilerplate_keys)``: the dataset
        without the dropped documents, their number (documents), ``{task:
        documents}`` (a document overlapping two tasks counts for both) and how
        many matched keys were ignored as boilerplate.

    Raises:
        DecontaminationError: more than ``corpus.max_drop_fraction`` of the documents dropped.
    """
    import datasets

    if not decon.keys or not len(ds):
        return ds, 0, {}, 0
    # explicit features: a batch with no match at all would otherwise be typed list<null>
    match_features = datasets.Features({"matches": datasets.Sequence(datasets.Value("string"))})
    matched = ds.map(lambda b: {"matches": [decon.matches(t) for t in b["text"]]}, batched=True,
                     batch_size=cfg["batch_size"], num_proc=min(num_proc, max(1, len(ds) // 1000) or 1),
                     remove_columns=ds.column_names, features=match_features)["matches"]
    drop, tasks, boiler = decide_drops(matched, decon, cfg["decontamination"]["boilerplate_max_documents"])
    per_task: dict[str, int] = {}
    for d, ts in zip(drop, tasks):
        for t in ts if d else ():
            per_task[t] = per_task.get(t, 0) + 1
    n_drop = sum(drop)
    if n_drop / len(ds) > cfg["max_drop_fraction"]:
        raise DecontaminationError(
            f"{name}: decontamination dropped {n_drop} of {len(ds)} documents "
            f"({n_drop / len(ds):.1%} > corpus.max_drop_fraction={cfg['max_drop_fraction']}); per task: {per_task}")
    return ds.select([i for i, d in enumerate(drop) if not d]), n_drop, per_task, len(boiler)


def held_apart_texts(cfg: dict, root: str = ".", hub_dirs: dict[str, str] | None = None,
                     eval_texts: dict[str, list[str]] | None = None) -> tuple[list[str], dict]:
    """Cleaned texts of the documents reserved by ``corpus.held_apart_fraction``, in source order.

    The same documents that :func:`prepare_corpus` counts as
    ``held_apart_for_base_model``, decontaminated against ``eval_texts`` like
    every other text a model is trained on (docs/fidelity.md).

    Args:
        cfg: the validated ``corpus`` section.
        root: folder that relative source paths are resolved against.
        hub_dirs: ``{source name: fetched folder}`` for ``hub`` sources.
        eval_texts: ``{task: dev+test texts}`` (``corpus.decontaminate_against``).

    Returns:
        ``(texts, report)``: the kept texts, and per source ``{"documents",
        "decontaminated", "decontaminated_per_task"}`` (documents).

    Raises:
        SourceError: as ``load_source``.
        DecontaminationError: as :func:`decontaminate`.
    """
    import datasets

    decon = _decontaminator(cfg, eval_texts)
    out, report = [], {}
    for source in cfg["sources"]:
        ds = load_source(source, root, None, (hub_dirs or {}).get(source["name"]))
        texts = [clean_text(t, cfg["unicode_normalization"]) for t in ds["text"]]
        texts = [t for t in texts if _keep_document(t, cfg) and held_apart(_doc_hash(t), cfg["held_apart_fraction"])]
        kept, n_drop, per_task, _ = decontaminate(datasets.Dataset.from_dict({"text": texts}), decon, cfg,
                                                  f"held-apart documents of corpus source {source['name']!r}")
        report[source["name"]] = {"documents": len(texts), "decontaminated": n_drop, "decontaminated_per_task": per_task}
        out.extend(kept["text"])
    return out, report


def _subsample_to_tokens(rng: np.random.Generator, lengths: np.ndarray, tokens: float) -> list[int]:
    """Documents drawn without replacement, in a seeded random order, until they hold ``tokens`` tokens.

    The sample is the shortest prefix of a random permutation whose lengths sum
    to at least ``tokens`` (so it overshoots by less than one document), returned
    sorted. Counting documents instead undershoots badly when lengths are skewed:
    a quarter of real-small's scientific articles held 77 % of a quarter of
    their tokens, and phase 1 read 1.24 passes.

    Args:
        rng: the corpus's seeded generator.
        lengths: tokens per document.
        tokens: tokens wanted (>= 0).

    Returns:
        Sorted document indices (all of them when ``tokens`` exceeds the total).
    """
    if tokens <= 0 or len(lengths) == 0:
        return []
    perm = rng.permutation(len(lengths))
    k = int(np.searchsorted(np.cumsum(lengths[perm]), tokens)) + 1
    return sorted(perm[:k].tolist())


def clean(ds, cfg: dict, num_proc: int):
    """Step *clean*: normalise every document (:func:`clean_text`) and add its ``hash`` and ``n_words``.

    Args:
        ds: a ``datasets.Dataset`` with a ``text`` column.
        cfg: the validated ``corpus`` section (``unicode_normalization``, ``batch_size``).
        num_proc: worker processes (fewer for small sources: one per 1,000 documents).
    """
    form = cfg["unicode_normalization"]

    def clean_batch(batch):
        texts = [clean_text(t, form) for t in batch["text"]]
        words = [t.split() for t in texts]
        return {"text": texts, "hash": [_doc_hash(t) for t in texts], "n_words": [len(w) for w in words],
                "null": [t is None for t in batch["text"]],
                "longest_word": [max(map(len, w), default=0) for w in words]}

    return ds.map(clean_batch, batched=True, batch_size=cfg["batch_size"],
                  num_proc=min(num_proc, max(1, len(ds) // 1000) or 1))


def deduplicate(ds, cfg: dict, seen_hashes: set[str]) -> tuple[list[int], dict]:
    """Step *deduplicate*: the documents kept for training, after the length filter, the held-apart
    draw (:func:`held_apart`) and exact deduplication across sources (``seen_hashes`` is updated).

    Returns:
        ``(kept indices, counts)``, counts ``{"too_short", "null_text", "overlong_word", "held_apart",
        "duplicates", "held_indices"}``: a document the length filter drops is counted as ``null_text``
        (its text field was null), ``overlong_word`` (a run without spaces longer than
        :data:`MAX_WORD_CHARS` characters: a blob, not prose) or ``too_short``.
    """
    keep = [(len(t) >= cfg["min_chars"] and w >= cfg["min_words"]) for t, w in zip(ds["text"], ds["n_words"])]
    keep_idx, held_idx, dup, null, overlong = [], [], 0, 0, 0
    nulls = ds["null"] if "null" in ds.column_names else itertools.repeat(False)  # columns added by clean()
    longest_words = ds["longest_word"] if "longest_word" in ds.column_names else itertools.repeat(0)
    for i, (k, h, is_null, longest) in enumerate(zip(keep, ds["hash"], nulls, longest_words)):
        if not k:  # dropped by the length filter; a null text and a blob of one huge "word" counted as such
            null += bool(is_null)
            overlong += (not is_null) and longest > MAX_WORD_CHARS
            continue
        if held_apart(h, cfg.get("held_apart_fraction", 0)):
            held_idx.append(i)
            continue
        if h in seen_hashes:
            dup += 1
            continue
        seen_hashes.add(h)
        keep_idx.append(i)
    return keep_idx, {"too_short": sum(1 for k in keep if not k) - null - overlong, "null_text": null,
                      "overlong_word": overlong, "held_apart": len(held_idx), "duplicates": dup,
                      "held_indices": held_idx}


def split_by_hash(hashes: list[str], valid_fraction: float) -> tuple[list[int], list[int]]:
    """Step *split*: ``(train indices, valid indices)`` of documents by their hash (:func:`_in_valid`).

    A source none of whose documents falls outside the validation fraction keeps them all for
    training (its valid part is then empty).
    """
    in_valid = [_in_valid(h, valid_fraction) for h in hashes]
    valid_idx = [i for i, v in enumerate(in_valid) if v]
    train_idx = [i for i, v in enumerate(in_valid) if not v]
    if not train_idx:
        train_idx, valid_idx = valid_idx, []
    return train_idx, valid_idx


def tokenise(ds, tokenizer, cfg: dict, num_proc: int):
    """Step *tokenise*: ``text`` -> ``input_ids`` (special tokens added, no truncation) and ``n`` (tokens)."""
    if len(ds) == 0:
        return ds.add_column("input_ids", [])

    def tokenize(batch):
        return {"input_ids": tokenizer(batch["text"], add_special_tokens=True, truncation=False)["input_ids"]}

    procs = min(num_proc, max(1, len(ds) // cfg["batch_size"]))
    out = ds.map(tokenize, batched=True, batch_size=cfg["batch_size"], num_proc=procs, remove_columns=["text"])
    return out.map(lambda b: {"n": [len(x) for x in b["input_ids"]]}, batched=True, batch_size=cfg["batch_size"])


def mix(cfg: dict, tok_train: dict, rng: np.random.Generator) -> tuple[list[tuple[str, object, list[int]]], dict]:
    """Step *mix*: each source's documents in the train stream (module doc, "Mixing").

    Args:
        cfg: the validated ``corpus`` section (``sources`` with weights, ``train_tokens``, ``allow_repeat``).
        tok_train: ``{source: tokenised train Dataset}`` (column ``n``: tokens per document).
        rng: the corpus's seeded generator (consumed in source order).

    Returns:
        ``([(source, dataset, document indices)], {source: epochs})``.

    Raises:
        InputError: a source must repeat and ``corpus.allow_repeat`` is false.
    """
    avail = {n: int(sum(d["n"])) for n, d in tok_train.items()}
    total_w = sum(s["weight"] for s in cfg["sources"])
    parts, epochs_of = [], {}
    for source in cfg["sources"]:
        name = source["name"]
        ds = tok_train[name]
        if cfg["train_tokens"]:
            target = source["weight"] / total_w * cfg["train_tokens"]
            epochs = target / max(avail[name], 1)
            cap = source.get("max_epochs")
            if cap is not None and epochs > cap:
                log.warning("corpus source %s: %.2f epochs needed, capped at max_epochs=%s", name, epochs, cap)
                epochs = cap
            if epochs > 1 and not cfg["allow_repeat"]:
                raise InputError(f"corpus source {name!r}: its share of corpus.train_tokens ({target:,.0f} tokens) "
                                 f"needs {epochs:.2f} epochs of its {avail[name]:,} tokens and corpus.allow_repeat is false")
            if epochs > 1:
                log.warning("corpus source %s: repeated %.2f epochs (%s tokens available, %s wanted)", name, epochs,
                            f"{avail[name]:,}", f"{target:,.0f}")
            whole, frac = math.floor(epochs), epochs - math.floor(epochs)
            idx = list(range(len(ds))) * whole
            idx += _subsample_to_tokens(rng, np.asarray(ds["n"]), frac * avail[name])
        else:
            epochs, idx = 1.0, list(range(len(ds)))
        parts.append((name, ds, idx))
        epochs_of[name] = epochs
    return parts, epochs_of


def pack(ds, cfg: dict, pad_token_id: int, vocab_size: int):
    """Step *pack*: documents -> ``seq_len``-token rows (:func:`clmdetour.corpus.pack.pack_batch`), ids stored
    in the smallest unsigned type of the vocabulary (:func:`clmdetour.corpus.pack.token_dtype`).

    Runs in one process: its rows (and the token hash) must not depend on ``num_proc``, and it is
    only array concatenation (tokenising is the parallel part).
    """
    dtype = token_dtype(vocab_size)
    return ds.map(pack_batch, remove_columns=ds.column_names, batched=True, batch_size=cfg["batch_size"],
                  features=packed_features(cfg["seq_len"], dtype),
                  fn_kwargs={"seq_len": cfg["seq_len"], "pad_token_id": pad_token_id, "dtype": dtype})


def token_hash(packed) -> str:
    """SHA-256 of a packed split's token ids, row by row (:class:`clmdetour.io.TokenHasher`)."""
    h = TokenHasher()
    for row in packed.with_format("numpy").iter(batch_size=1000):
        for ids in row["input_ids"]:
            h.update(ids)
    return h.hexdigest()


def _source_step(source: dict, cfg: dict, decon: Decontaminator, seen_hashes: set[str], manifest: dict,
                 root, demo_corpus, hub_dirs, num_proc: int):
    """Load, clean, deduplicate, decontaminate and split one source; record it in ``manifest``.

    Returns:
        ``(train Dataset, valid Dataset)``, column ``text``.
    """
    name = source["name"]
    ds = load_source(source, root, demo_corpus, (hub_dirs or {}).get(name))
    n_raw = len(ds)
    ds = clean(ds, cfg, num_proc)
    keep_idx, counts = deduplicate(ds, cfg, seen_hashes)
    # The held-apart documents train the base model (held_apart_texts): counted with the same rule.
    _, held_decon, held_per_task, _ = decontaminate(ds.select(counts["held_indices"]), decon, cfg,
                                                    f"held-apart documents of corpus source {name!r}", num_proc)
    ds, n_decon, drops_task, n_boiler = decontaminate(ds.select(keep_idx), decon, cfg, f"corpus source {name!r}", num_proc)
    record = manifest["decontamination"]
    record["boilerplate_keys_ignored"] += n_boiler
    for t, c in drops_task.items():
        record["dropped_per_task"][t] = record["dropped_per_task"].get(t, 0) + c
    if len(ds) == 0:
        raise SourceError(f"corpus source {name!r}: no document left after cleaning "
                          f"({n_raw} read, {counts['too_short']} too short, {counts['null_text']} null, {counts['overlong_word']} "
                          f"one over-long word, {counts['held_apart']} held apart for the "
                          f"base model, {counts['duplicates']} duplicates, {n_decon} decontaminated)")
    train_idx, valid_idx = split_by_hash(ds["hash"], cfg["valid_fraction"])
    manifest["sources"][name] = {
        "format": source["format"], "hub_id": source.get("hub_id"), "path": source.get("path"),
        "licence": source["licence"], "weight": source["weight"], "documents_read": n_raw,
        "dropped_too_short": counts["too_short"], "dropped_null_text": counts["null_text"],
        "dropped_overlong_word": counts["overlong_word"], "held_apart_for_base_model": counts["held_apart"],
        "duplicates_removed": counts["duplicates"], "decontaminated": n_decon,
        "decontaminated_per_task": drops_task, "documents_train": len(train_idx), "documents_valid": len(valid_idx),
        "held_apart_decontaminated": held_decon, "held_apart_decontaminated_per_task": held_per_task,
    }
    return ds.select(train_idx).select_columns(["text"]), ds.select(valid_idx).select_columns(["text"])


def _mixed_train_documents(cfg: dict, tok_train: dict, tok_valid: dict, manifest: dict):
    """The training documents of every source after :func:`mix`, shuffled with ``corpus.seed``; each
    source's token counts and epochs are written into ``manifest["sources"]``.

    Raises:
        InputError: nothing left to train on.
    """
    import datasets

    rng = np.random.default_rng(cfg["seed"])
    parts, epochs_of = mix(cfg, tok_train, rng)
    for name, ds, idx in parts:
        n = np.asarray(ds["n"], dtype=np.int64)
        manifest["sources"][name].update(
            tokens_available=int(n.sum()), epochs=round(epochs_of[name], 4),
            tokens_train=int(n[idx].sum()) if idx else 0,
            tokens_valid=int(sum(tok_valid[name]["n"])) if len(tok_valid[name]) else 0)
    all_train = datasets.concatenate_datasets([d.select(idx) for _, d, idx in parts if idx])
    if len(all_train) == 0:
        raise InputError("corpus: nothing left to train on")
    return all_train.select(rng.permutation(len(all_train))).flatten_indices()


def _valid_documents(cfg: dict, tok_valid: dict, all_train):
    """``(documents, held_out)``: every source's held-out documents, or, under
    ``corpus.allow_train_as_valid`` when none fell in the validation split, the first 8 training ones.

    Raises:
        InputError: no held-out document and ``allow_train_as_valid`` is false.
    """
    import datasets

    valid_parts = [d for d in tok_valid.values() if len(d)]
    if not valid_parts and not cfg["allow_train_as_valid"]:
        raise InputError(
            f"corpus: no document fell in the validation split ({len(all_train):,} training documents left after "
            f"deduplication and decontamination, corpus.valid_fraction {cfg['valid_fraction']}), so the held-out "
            "loss would be measured on training text; add documents, raise corpus.valid_fraction, or set "
            "corpus.allow_train_as_valid: true (the manifest then says the validation text is training text)")
    if not valid_parts:
        log.warning("corpus: no document fell in the validation split; corpus.allow_train_as_valid: using the "
                    "first training documents, so the held-out loss is a training loss")
        return all_train.select(range(min(len(all_train), 8))), False
    return datasets.concatenate_datasets(valid_parts), True


def prepare_corpus(cfg: dict, tokenizer_dir: str, out_dir: str, eval_texts: dict[str, list[str]] | None = None,
                   root: str = ".", demo_corpus: str | None = None, hub_dirs: dict[str, str] | None = None,
                   num_proc: int | None = None) -> dict:
    """Build the packed pretraining corpus and its manifest, as a sequence of named steps.

    Per source: load (:func:`clmdetour.corpus.sources.load_source`), :func:`clean`,
    :func:`deduplicate`, :func:`decontaminate`, :func:`split_by_hash`; then :func:`tokenise`,
    :func:`mix` (each source's share of ``train_tokens``), a seeded shuffle, :func:`pack`,
    :func:`token_hash`, and the atomic write.

    Args:
        cfg: the validated ``corpus`` config section.
        tokenizer_dir: folder with the base model's tokenizer.
        out_dir: output folder (replaced atomically).
        eval_texts: ``{task: dev+test texts}`` for decontamination.
        root: folder that relative source paths are resolved against.
        demo_corpus: generated demo corpus (sources of format ``demo``).
        hub_dirs: ``{source name: fetched folder}`` for ``hub`` sources.
        num_proc: worker processes (default ``cfg["num_proc"]``).

    Returns:
        The manifest dict.

    Raises:
        SourceError: unreadable, non-UTF-8 or empty source.
        DecontaminationError: a source loses more than ``max_drop_fraction`` of its documents.
        InputError: nothing left to train on, or a source must repeat and ``allow_repeat`` is false.
    """
    import datasets
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    from clmdetour.modeling.folders import check_model_folder

    num_proc = num_proc or cfg["num_proc"]
    check_model_folder(tokenizer_dir)  # one line naming the folder, not transformers' Hub hint
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    decon = _decontaminator(cfg, eval_texts)
    manifest: dict = {"seq_len": cfg["seq_len"], "tokenizer": str(tokenizer_dir), "sources": {},
                      "decontamination": {"tasks": sorted((eval_texts or {}).keys()), "evaluation_keys": len(decon.keys),
                                          "dropped_per_task": {}, "boilerplate_keys_ignored": 0},
                      "config_hash": sha256_json(cfg)}
    seen_hashes: set[str] = set()
    tok_train, tok_valid = {}, {}
    for source in cfg["sources"]:
        train, valid = _source_step(source, cfg, decon, seen_hashes, manifest, root, demo_corpus, hub_dirs, num_proc)
        tok_train[source["name"]] = train
        tok_valid[source["name"]] = valid
    tok_train = {n: tokenise(d, tokenizer, cfg, num_proc) for n, d in tok_train.items()}
    tok_valid = {n: tokenise(d, tokenizer, cfg, num_proc) for n, d in tok_valid.items()}
    all_train = _mixed_train_documents(cfg, tok_train, tok_valid, manifest)
    all_valid, held_out = _valid_documents(cfg, tok_valid, all_train)
    train_packed = pack(all_train, cfg, tokenizer.pad_token_id, len(tokenizer))
    valid_packed = pack(all_valid, cfg, tokenizer.pad_token_id, len(tokenizer))
    if len(valid_packed) > cfg["max_valid_sequences"]:
        valid_packed = valid_packed.select(range(cfg["max_valid_sequences"]))
    manifest.update({
        "train": {"sequences": len(train_packed), "tokens": int(sum(train_packed["n_tokens"])), "documents": len(all_train),
                  "packing_efficiency": round(packing_efficiency(train_packed["n_tokens"], cfg["seq_len"]), 6)},
        "valid": {"sequences": len(valid_packed), "tokens": int(sum(valid_packed["n_tokens"])), "documents": len(all_valid),
                  "held_out": held_out},
        "storage": {"token_dtype": token_dtype(len(tokenizer)).name,
                    "attention_mask": "not stored: the first n_tokens positions of a row (clmdetour.corpus.pack)"},
        "hashes": {"train_token_ids": token_hash(train_packed), "valid_token_ids": token_hash(valid_packed),
                   "tokenizer": sha256_json(tokenizer.backend_tokenizer.to_str())},
    })
    with atomic_output_dir(out_dir) as tmp:
        train_packed.save_to_disk(str(Path(tmp) / "train"))
        valid_packed.save_to_disk(str(Path(tmp) / "valid"))
        atomic_write_json(Path(tmp) / "manifest.json", manifest)
    return manifest
