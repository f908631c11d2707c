"""The corpus merge (job ``prepare_corpus``): shards -> the packed corpus and its manifest (issue 40).

From every shard's token job (:func:`clmdetour.corpus.shards.shard_tokens`), in canonical order, the
merge does in array code (numpy, Arrow), never a Python loop per token or a whole text column:

1. exact deduplication across shards and sources from the 32-byte document hashes (the first
   occurrence in canonical order is kept, as one job reading every source would);
2. the decontamination drops of each source (:func:`clmdetour.corpus.decontaminate.decide_drops`:
   the boilerplate rule counts documents over the whole source, so it is decided here, from the
   shards' matches; only matched documents are read);
3. the held-out split by hash, the weighted mix (:func:`clmdetour.corpus.steps.mix`), the seeded
   shuffle, packing into ``seq_len`` rows a batch of ``corpus.batch_size`` documents at a time
   (:func:`clmdetour.corpus.pack.pack_batch`, each document's ids read with one ``pread`` from its
   shard's ``ids.bin``), the token hashes and the manifest, per source and per shard.

Its memory: about 60 bytes per document (hash, counts, offsets) plus one batch of rows; the
documents' text and tokens are never all in memory (docs/performance.md).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from clmdetour.corpus.decontaminate import Decontaminator, decide_drops
from clmdetour.corpus.pack import pack_batch, packed_features, packing_efficiency, token_dtype
from clmdetour.corpus.sources import SourceError
from clmdetour.corpus.steps import DecontaminationError, decontaminator, mix
from clmdetour.errors import InputError
from clmdetour.io import TokenHasher, atomic_output_dir, atomic_write_json, sha256_json

log = logging.getLogger(__name__)

#: Counts of a shard's text job summed per source (``counts.json`` key -> manifest key).
SOURCE_COUNTS = {"documents_read": "documents_read", "too_short": "dropped_too_short",
                 "null_text": "dropped_null_text", "overlong_word": "dropped_overlong_word",
                 "held_apart": "held_apart_for_base_model"}


class ShardDocs:
    """Every document of every shard as arrays, in canonical order (shard order, then row).

    Attributes:
        hash: ``[D]`` ``S32`` SHA-256 digests of the cleaned texts.
        n_tokens: ``[D]`` int64 tokens (0 for a held-apart document).
        held: ``[D]`` bool, held apart for the base model (not tokenised).
        shard: ``[D]`` int32 index of the document's shard.
        offset: ``[D]`` int64 position (tokens) of its first id in the shard's ``ids.bin``.
        matches: ``{document: [evaluation keys]}`` for the documents with a decontamination match.
        counts: each shard's ``counts.json``.
    """

    def __init__(self, token_dirs: list[str | Path]):
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        hashes, n, offsets, held, shard, self.matches, self.counts = [], [], [], [], [], {}, []
        base = 0
        for i, folder in enumerate(token_dirs):
            table = pq.read_table(Path(folder) / "docs.parquet")
            self.counts.append(json.loads((Path(folder) / "counts.json").read_text(encoding="utf-8")))
            digests = table.column("hash").combine_chunks()
            hashes.append(np.frombuffer(digests.buffers()[1], dtype="S32", count=len(digests), offset=32 * digests.offset)
                          if len(digests) else np.zeros(0, dtype="S32"))
            n.append(table.column("n_tokens").to_numpy().astype(np.int64))
            offsets.append(np.cumsum(n[-1]) - n[-1])  # each document's first id in its shard's ids.bin
            held.append(table.column("held").to_numpy(zero_copy_only=False).astype(bool))
            shard.append(np.full(len(digests), i, dtype=np.int32))
            lengths = pc.list_value_length(table.column("matches")).to_numpy(zero_copy_only=False)
            rows = np.flatnonzero(lengths > 0)
            for r, m in zip(rows, table.column("matches").take(rows).to_pylist()):
                self.matches[base + int(r)] = m
            base += len(digests)
        self.hash = np.concatenate(hashes) if hashes else np.zeros(0, dtype="S32")
        self.n_tokens = np.concatenate(n) if n else np.zeros(0, dtype=np.int64)
        self.held = np.concatenate(held) if held else np.zeros(0, dtype=bool)
        self.shard = np.concatenate(shard) if shard else np.zeros(0, dtype=np.int32)
        self.offset = np.concatenate(offsets) if offsets else np.zeros(0, dtype=np.int64)

    def first_occurrences(self) -> np.ndarray:
        """``[D]`` bool: not held apart and the first of its hash in canonical order (exact deduplication)."""
        keep = np.zeros(len(self.hash), dtype=bool)
        candidates = np.flatnonzero(~self.held)
        _, first = np.unique(self.hash[candidates], return_index=True)
        keep[candidates[first]] = True
        return keep


class TokenReader:
    """Each document's ids, read from its shard's ``ids.bin`` with one ``os.pread`` (no file held in memory)."""

    def __init__(self, token_dirs: list[str | Path], docs: ShardDocs, dtype: np.dtype):
        self.fds = [os.open(Path(d) / "ids.bin", os.O_RDONLY) for d in token_dirs]
        self.docs, self.dtype = docs, np.dtype(dtype).newbyteorder("<")

    def ids(self, doc: int) -> np.ndarray:
        """``[n_tokens]`` ids of document ``doc`` (global index)."""
        size = self.dtype.itemsize
        buf = os.pread(self.fds[self.docs.shard[doc]], int(self.docs.n_tokens[doc]) * size,
                       int(self.docs.offset[doc]) * size)
        return np.frombuffer(buf, dtype=self.dtype)

    def close(self) -> None:
        """Close the shard files."""
        for fd in self.fds:
            os.close(fd)


def valid_mask(hashes: np.ndarray, fraction: float) -> np.ndarray:
    """``[D]`` bool: documents in the validation split, from the first 4 bytes of their digests
    (the same rule as :func:`clmdetour.corpus.steps.in_valid` on hex digits 0-7)."""
    if not len(hashes):
        return np.zeros(0, dtype=bool)
    first = np.frombuffer(np.ascontiguousarray(hashes).tobytes(), dtype=">u4").reshape(len(hashes), 8)[:, 0]
    return first.astype(np.float64) / 0xFFFFFFFF < fraction


def _drops(docs: ShardDocs, rows: np.ndarray, decon: Decontaminator, boilerplate_max: int):
    """``(dropped rows, {task: documents}, boilerplate keys)`` among ``rows`` (documents of one source);
    only the documents with a match are visited."""
    mask = np.zeros(len(docs.hash), dtype=bool)
    mask[rows] = True
    matched = [r for r in docs.matches if mask[r]]
    drop, tasks, boiler = decide_drops([docs.matches[r] for r in matched], decon, boilerplate_max)
    per_task: dict[str, int] = {}
    dropped = []
    for r, d, ts in zip(matched, drop, tasks):
        if d:
            dropped.append(r)
            for t in ts:
                per_task[t] = per_task.get(t, 0) + 1
    return np.asarray(dropped, dtype=np.int64), per_task, boiler


def _empty_source_error(name: str, shard_counts: list[dict]) -> SourceError:
    """The error of a source none of whose shards read a document: each file's reason, once."""
    reasons = list(dict.fromkeys(c["empty"] for c in shard_counts if c.get("empty")))
    return SourceError(f"corpus source {name!r} (config corpus.sources): {'; '.join(reasons[:3])}"
                       f"{' ...' if len(reasons) > 3 else ''}; give the source's documents or remove the source")


def _no_field_error(name: str, source: dict, shard_counts: list[dict]) -> SourceError | None:
    """The error of a JSON-lines source none of whose lines has its text field (None when some have it)."""
    read = sum(c["documents_read"] for c in shard_counts)
    if not read or sum(c.get("missing_field", 0) for c in shard_counts) < read:
        return None
    field = source.get("text_field", "text")
    return SourceError(f"corpus source {name!r} (config corpus.sources): no line of {source.get('path')} has the "
                       f"field {field!r} (corpus.sources text_field)")


def _source_documents(cfg: dict, docs: ShardDocs, keep: np.ndarray, decon: Decontaminator, shards: list[dict],
                      manifest: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per source: deduplicated, decontaminated documents split into ``(train, valid)`` global indices;
    its counts written into ``manifest["sources"]`` and ``manifest["shards"]``.

    Raises:
        SourceError: a source with no document (all files empty) or none left after cleaning.
        DecontaminationError: a source loses more than ``corpus.max_drop_fraction`` of its documents.
    """
    bmax = cfg["decontamination"]["boilerplate_max_documents"]
    across = np.bincount(docs.shard[~docs.held & ~keep], minlength=len(shards))
    record, out = manifest["decontamination"], {}
    for source in cfg["sources"]:
        name = source["name"]
        ids = [i for i, s in enumerate(shards) if s["source"] == name]
        counts = [docs.counts[i] for i in ids]
        totals = {key: sum(c[k] for c in counts) for k, key in SOURCE_COUNTS.items()}
        if totals["documents_read"] == 0 and any(c.get("empty") for c in counts):
            raise _empty_source_error(name, counts)
        no_field = _no_field_error(name, source, counts)
        if no_field is not None:
            raise no_field
        in_source = np.isin(docs.shard, ids)
        kept = np.flatnonzero(keep & in_source)
        dropped, per_task, boiler = _drops(docs, kept, decon, bmax)
        if len(kept) and len(dropped) / len(kept) > cfg["max_drop_fraction"]:
            raise DecontaminationError(
                f"corpus source {name!r}: decontamination dropped {len(dropped)} of {len(kept)} documents "
                f"({len(dropped) / len(kept):.1%} > corpus.max_drop_fraction={cfg['max_drop_fraction']}); per task: {per_task}")
        held_dropped, held_per_task, _ = _drops(docs, np.flatnonzero(docs.held & in_source), decon, bmax)
        record["boilerplate_keys_ignored"] += len(boiler)
        for t, c in per_task.items():
            record["dropped_per_task"][t] = record["dropped_per_task"].get(t, 0) + c
        duplicates = sum(c["duplicates_within_shard"] for c in counts) + int(across[ids].sum())
        final = np.setdiff1d(kept, dropped, assume_unique=True)
        dropped_per_shard = np.bincount(docs.shard[dropped], minlength=len(shards))
        if len(final) == 0:
            raise SourceError(f"corpus source {name!r}: no document left after cleaning ({totals['documents_read']} read, "
                              f"{totals['dropped_too_short']} too short, {totals['dropped_null_text']} null, "
                              f"{totals['dropped_overlong_word']} one over-long word, {totals['held_apart_for_base_model']} "
                              f"held apart for the base model, {duplicates} duplicates, {len(dropped)} decontaminated)")
        in_valid = valid_mask(docs.hash[final], cfg["valid_fraction"])
        train, valid = final[~in_valid], final[in_valid]
        if not len(train):
            train, valid = valid, valid[:0]
        manifest["sources"][name] = {
            "format": source["format"], "hub_id": source.get("hub_id"), "path": source.get("path"),
            "licence": source["licence"], "weight": source["weight"], **totals, "duplicates_removed": duplicates,
            "decontaminated": len(dropped), "decontaminated_per_task": per_task, "documents_train": len(train),
            "documents_valid": len(valid), "held_apart_decontaminated": len(held_dropped),
            "held_apart_decontaminated_per_task": held_per_task, "shards": len(ids)}
        for i in ids:
            c = docs.counts[i]
            manifest["shards"][shards[i]["id"]] = {
                "source": name, **{key: c[k] for k, key in SOURCE_COUNTS.items()},
                "duplicates_within_shard": c["duplicates_within_shard"], "duplicates_across_shards": int(across[i]),
                "decontaminated": int(dropped_per_shard[i]),
                "tokens": c["tokens"], "piece": {k: shards[i].get(k) for k in ("file", "start", "end", "group", "groups")
                                                 if shards[i].get(k) is not None}}
        out[name] = (train, valid)
    return out


def _train_order(cfg: dict, docs: ShardDocs, split: dict, manifest: dict) -> np.ndarray:
    """The training documents of every source after :func:`clmdetour.corpus.steps.mix`, shuffled with
    ``corpus.seed`` (global indices); token counts and epochs written per source.

    Raises:
        InputError: nothing left to train on, or as ``mix``.
    """
    rng = np.random.default_rng(cfg["seed"])
    parts, epochs_of = mix(cfg, {name: docs.n_tokens[train] for name, (train, _) in split.items()}, rng)
    chosen = []
    for name, idx in parts:
        train, valid = split[name]
        n = docs.n_tokens[train]
        manifest["sources"][name].update(tokens_available=int(n.sum()), epochs=round(epochs_of[name], 4),
                                         tokens_train=int(n[idx].sum()) if len(idx) else 0,
                                         tokens_valid=int(docs.n_tokens[valid].sum()))
        note_overshoot(manifest, name, cfg, int(n[idx].sum()) if len(idx) else 0, int(n[idx].max()) if len(idx) else 0)
        if len(idx):
            chosen.append(train[np.asarray(idx, dtype=np.int64)])
    all_train = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
    if len(all_train) == 0:
        raise InputError("corpus: nothing left to train on")
    return all_train[rng.permutation(len(all_train))]


def note_overshoot(manifest: dict, name: str, cfg: dict, drawn: int, longest: int) -> None:
    """Record a source's share of ``corpus.train_tokens`` and, when the tokens drawn exceed it more than
    :data:`clmdetour.corpus.steps.OVERSHOOT_FACTOR` x (one document longer than the share), a line in the
    manifest's ``warnings`` (printed again at the end of the run: the Snakefile's ``onsuccess``)."""
    from clmdetour.corpus.steps import OVERSHOOT_FACTOR

    if not cfg.get("train_tokens"):
        return
    total_w = sum(s["weight"] for s in cfg["sources"])
    weight = next(s["weight"] for s in cfg["sources"] if s["name"] == name)
    share = weight / total_w * cfg["train_tokens"]
    ratio = drawn / share if share > 0 else 0.0
    manifest["sources"][name].update(tokens_share=round(share), drawn_over_share=round(ratio, 3))
    if ratio > OVERSHOOT_FACTOR:
        manifest.setdefault("warnings", []).append(
            f"corpus source {name}: {drawn:,} tokens drawn for its share of corpus.train_tokens ({share:,.0f} tokens), "
            f"{ratio:.1f}x; its longest drawn document holds {longest:,} tokens: split or drop such documents, or "
            "raise corpus.train_tokens")


def _valid_order(cfg: dict, split: dict, all_train: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(documents, held_out)``: every source's held-out documents, or, under ``corpus.allow_train_as_valid``
    when none fell in the validation split, the first 8 training ones.

    Raises:
        InputError: no held-out document and ``allow_train_as_valid`` is false.
    """
    valid = np.concatenate([v for _, v in split.values()])
    if len(valid):
        return valid, True
    if not cfg["allow_train_as_valid"]:
        raise InputError(
            f"corpus: no document fell in the validation split ({len(all_train):,} training documents left after "
            f"deduplication and decontamination, corpus.valid_fraction {cfg['valid_fraction']}), so the held-out "
            "loss would be measured on training text; add documents, raise corpus.valid_fraction, or set "
            "corpus.allow_train_as_valid: true (the manifest then says the validation text is training text)")
    log.warning("corpus: no document fell in the validation split; corpus.allow_train_as_valid: using the "
                "first training documents, so the held-out loss is a training loss")
    return all_train[:8], False


def _write_split(order: np.ndarray, reader: TokenReader, cfg: dict, pad_token_id: int, folder: Path, cache: Path,
                 max_rows: int | None = None) -> dict:
    """Pack documents ``order`` into rows (a batch of ``corpus.batch_size`` documents at a time, as
    :func:`clmdetour.corpus.pack.pack_batch`) and save them with ``datasets`` (``save_to_disk``) in ``folder``.

    Rows are written a batch at a time (``datasets``' ``ArrowWriter`` into ``cache``, then
    ``save_to_disk``): memory holds one batch of rows.

    Returns:
        ``{"sequences", "tokens", "n_tokens": [R] int32, "hash"}`` of the rows written.
    """
    import datasets
    import pyarrow as pa
    from datasets.arrow_writer import ArrowWriter

    seq_len, dtype = cfg["seq_len"], reader.dtype
    hasher, counts = TokenHasher(), []
    features = packed_features(seq_len, np.dtype(dtype.name))
    path = cache / f"{folder.name}.arrow"
    with ArrowWriter(features=features, path=str(path)) as writer:
        for b in range(0, len(order), cfg["batch_size"]):
            packed = pack_batch({"input_ids": [reader.ids(d) for d in order[b:b + cfg["batch_size"]]]}, seq_len,
                                pad_token_id, dtype)
            ids, n = packed["input_ids"], packed["n_tokens"]
            if max_rows is not None:
                ids, n = ids[:max_rows - len(counts)], n[:max_rows - len(counts)]
            for row in ids:
                hasher.update(row)
            counts.extend(n.tolist())
            flat = pa.array(np.ascontiguousarray(ids).reshape(-1).astype(np.dtype(dtype.name)))
            writer.write_table(pa.table({"input_ids": pa.FixedSizeListArray.from_arrays(flat, seq_len),
                                         "n_tokens": pa.array(n, pa.int32())}))
            if max_rows is not None and len(counts) >= max_rows:
                break
        writer.finalize()
    datasets.Dataset.from_file(str(path)).save_to_disk(str(folder))
    path.unlink()
    n_tokens = np.asarray(counts, dtype=np.int32)
    return {"sequences": len(n_tokens), "tokens": int(n_tokens.sum()), "n_tokens": n_tokens, "hash": hasher.hexdigest()}


def merge_corpus(cfg: dict, shards: list[dict], token_dirs: list[str | Path], tokenizer_dir: str | Path,
                 out_dir: str | Path, eval_texts: dict[str, list[str]] | None = None, scratch: str | Path | None = None) -> dict:
    """Job ``prepare_corpus``: merge the shards into ``{out}/train``, ``{out}/valid`` and ``{out}/manifest.json``.

    Args:
        cfg: the validated ``corpus`` section.
        shards: :func:`clmdetour.corpus.shards.plan_shards`, in its order.
        token_dirs: each shard's token folder (:func:`clmdetour.corpus.shards.shard_tokens`), same order.
        tokenizer_dir: the base model's tokenizer (pad id, vocabulary size, its hash in the manifest).
        out_dir: output folder (replaced atomically; the manifest is written last).
        eval_texts: ``{task: dev+test texts}``: the decontamination index's keys map matches to tasks.
        scratch: folder for ``datasets``' write cache (default: a temporary folder beside ``out_dir``).

    Returns:
        The manifest dict.

    Raises:
        SourceError: a source with no document, or none left after cleaning.
        DecontaminationError: a source loses more than ``max_drop_fraction`` of its documents.
        InputError: nothing left to train on, no validation text (unless allowed), or a source must
            repeat and ``allow_repeat`` is false.
    """
    from clmdetour.corpus.shards import tokenizer_facts

    facts = tokenizer_facts(tokenizer_dir)
    if facts is None:  # no tokenizer.json or pad token: transformers reads the folder
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        facts = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
                 "json": tokenizer.backend_tokenizer.to_str()}
    decon = decontaminator(cfg, eval_texts)
    manifest: dict = {"seq_len": cfg["seq_len"], "tokenizer": str(tokenizer_dir), "sources": {}, "shards": {},
                      "decontamination": {"tasks": sorted((eval_texts or {}).keys()), "evaluation_keys": len(decon.keys),
                                          "dropped_per_task": {}, "boilerplate_keys_ignored": 0},
                      "config_hash": sha256_json(cfg)}
    docs = ShardDocs(token_dirs)
    split = _source_documents(cfg, docs, docs.first_occurrences(), decon, shards, manifest)
    all_train = _train_order(cfg, docs, split, manifest)
    all_valid, held_out = _valid_order(cfg, split, all_train)
    dtype = token_dtype(facts["vocab_size"])
    reader = TokenReader(token_dirs, docs, dtype)
    Path(out_dir).parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=scratch or Path(out_dir).parent, prefix=".merge-cache-") as cache, \
                atomic_output_dir(out_dir) as tmp:
            train = _write_split(all_train, reader, cfg, facts["pad_token_id"], Path(tmp) / "train", Path(cache))
            valid = _write_split(all_valid, reader, cfg, facts["pad_token_id"], Path(tmp) / "valid", Path(cache),
                                 max_rows=cfg["max_valid_sequences"])
            manifest.update({
                "train": {"sequences": train["sequences"], "tokens": train["tokens"], "documents": len(all_train),
                          "packing_efficiency": round(packing_efficiency(train["n_tokens"], cfg["seq_len"]), 6)},
                "valid": {"sequences": valid["sequences"], "tokens": valid["tokens"], "documents": len(all_valid),
                          "held_out": held_out},
                "storage": {"token_dtype": dtype.name, "shards": len(shards),
                            "attention_mask": "not stored: the first n_tokens positions of a row (clmdetour.corpus.pack)"},
                "hashes": {"train_token_ids": train["hash"], "valid_token_ids": valid["hash"],
                           "tokenizer": sha256_json(facts["json"])},
            })
            atomic_write_json(Path(tmp) / "manifest.json", manifest)
    finally:
        reader.close()
    return manifest


def merge_held_apart(cfg: dict, shards: list[dict], text_dirs: list[str | Path],
                     eval_texts: dict[str, list[str]] | None = None) -> tuple[list[str], dict]:
    """Job ``held_apart_corpus``: the held-apart documents of every shard (text job outputs), in canonical
    order, decontaminated per source (the boilerplate rule over the source's held-apart documents).

    Returns:
        ``(texts, report)``: the kept texts, and per source ``{"documents", "decontaminated",
        "decontaminated_per_task"}`` (documents).

    Raises:
        DecontaminationError: a source's held-apart documents lose more than ``corpus.max_drop_fraction``.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    decon = decontaminator(cfg, eval_texts)
    bmax = cfg["decontamination"]["boilerplate_max_documents"]
    out, report = [], {}
    for source in cfg["sources"]:
        name = source["name"]
        texts, matches = [], []
        for s, folder in zip(shards, text_dirs):
            if s["source"] == name:
                table = pq.read_table(Path(folder) / "docs.parquet", columns=["text", "held", "matches"])
                table = table.filter(pc.field("held"))
                texts += table.column("text").to_pylist()
                matches += table.column("matches").to_pylist()
        drop, tasks, _ = decide_drops(matches, decon, bmax)
        per_task: dict[str, int] = {}
        for d, ts in zip(drop, tasks):
            for t in ts if d else ():
                per_task[t] = per_task.get(t, 0) + 1
        n_drop = sum(drop)
        if texts and n_drop / len(texts) > cfg["max_drop_fraction"]:
            raise DecontaminationError(
                f"held-apart documents of corpus source {name!r}: decontamination dropped {n_drop} of {len(texts)} "
                f"documents ({n_drop / len(texts):.1%} > corpus.max_drop_fraction={cfg['max_drop_fraction']}); "
                f"per task: {per_task}")
        report[name] = {"documents": len(texts), "decontaminated": n_drop, "decontaminated_per_task": per_task}
        out += [t for t, d in zip(texts, drop) if not d]
    return out, report
