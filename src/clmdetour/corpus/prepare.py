"""Corpus preparation in one process: every shard's jobs, then the merge (issue 40).

The pipeline runs the corpus step as Snakemake jobs, one pair per shard
(:mod:`clmdetour.corpus.shards`: ``corpus_shard_text``, ``corpus_shard_tokens``) and the merge
(:mod:`clmdetour.corpus.merge`: ``prepare_corpus``). :func:`prepare_corpus` runs the same functions
one after the other, for a built base model's own corpus, the benchmarks and the tests, so both
ways give the same corpus.

``prepare_corpus`` writes ``{out}/train``, ``{out}/valid`` (``datasets`` on disk, columns
``input_ids``: ``seq_len`` ids in the vocabulary's smallest unsigned type, and ``n_tokens``: the real
tokens at the start of the row, :mod:`clmdetour.corpus.pack`) and ``{out}/manifest.json``.
The per-document rules (cleaning, hashing, deduplication, mixing) are in :mod:`clmdetour.corpus.steps`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from clmdetour.corpus.scratch import job_scratch


def _text_shards(cfg: dict, work: Path, eval_texts, root, demo_corpus, hub_dirs, num_proc: int):
    """Run every shard's text job into ``work/{shard}/text``; return ``(shards, text folders)``."""
    from clmdetour.corpus.shards import plan_shards, shard_text

    shards = plan_shards(cfg, root)
    sources = {s["name"]: s for s in cfg["sources"]}
    folders = []
    for shard in shards:
        source = sources[shard["source"]]
        folder = work / shard["id"] / "text"
        shard_text(cfg, source, shard, folder, eval_texts, demo_corpus,
                   (hub_dirs or {}).get(source["name"]), num_proc)
        folders.append(folder)
    return shards, folders


def prepare_corpus(cfg: dict, tokenizer_dir: str, out_dir: str, eval_texts: dict[str, list[str]] | None = None,
                   root: str = ".", demo_corpus: str | None = None, hub_dirs: dict[str, str] | None = None,
                   num_proc: int | None = None) -> dict:
    """Build the packed pretraining corpus and its manifest: every shard's text and token jobs, then the merge.

    Args:
        cfg: the validated ``corpus`` config section.
        tokenizer_dir: folder with the base model's tokenizer.
        out_dir: output folder (replaced atomically).
        eval_texts: ``{task: dev+test texts}`` for decontamination.
        root: folder that relative source paths are resolved against.
        demo_corpus: generated demo corpus (sources of format ``demo``).
        hub_dirs: ``{source name: fetched folder}`` for ``hub`` sources.
        num_proc: worker processes of each shard's ``datasets.map`` (default ``cfg["num_proc"]``).

    Returns:
        The manifest dict.

    Raises:
        SourceError: unreadable, non-UTF-8 or empty source (naming the file and line).
        DecontaminationError: a source loses more than ``max_drop_fraction`` of its documents.
        InputError: nothing left to train on, or a source must repeat and ``allow_repeat`` is false.
    """
    import datasets

    from clmdetour.corpus.merge import merge_corpus
    from clmdetour.corpus.shards import shard_tokens
    from clmdetour.modeling.folders import check_model_folder

    datasets.disable_progress_bars()
    check_model_folder(tokenizer_dir)  # one line naming the folder, not transformers' Hub hint
    Path(out_dir).parent.mkdir(parents=True, exist_ok=True)
    # datasets' cache of the shards' loads in the work folder, removed with it (never under $HOME)
    with tempfile.TemporaryDirectory(dir=Path(out_dir).parent, prefix=".corpus-shards-") as work, \
            job_scratch(work, "datasets-cache"):
        work = Path(work)
        shards, text_dirs = _text_shards(cfg, work, eval_texts, root, demo_corpus, hub_dirs, num_proc or cfg["num_proc"])
        token_dirs = [folder.parent / "tokens" for folder in text_dirs]
        for text_dir, token_dir in zip(text_dirs, token_dirs):
            shard_tokens(text_dir, tokenizer_dir, token_dir, cfg["batch_size"])
        return merge_corpus(cfg, shards, token_dirs, tokenizer_dir, out_dir, eval_texts, scratch=work)


def held_apart_texts(cfg: dict, root: str = ".", hub_dirs: dict[str, str] | None = None,
                     eval_texts: dict[str, list[str]] | None = None, demo_corpus: str | None = None) -> tuple[list[str], dict]:
    """Cleaned texts of the documents reserved by ``corpus.held_apart_fraction``, in canonical order.

    The same documents that :func:`prepare_corpus` counts as ``held_apart_for_base_model``,
    decontaminated against ``eval_texts`` like every other text a model is trained on
    (docs/fidelity.md): every shard's text job, then :func:`clmdetour.corpus.merge.merge_held_apart`.

    Returns:
        ``(texts, report)``: the kept texts, and per source ``{"documents", "decontaminated",
        "decontaminated_per_task"}`` (documents).

    Raises:
        SourceError: as ``load_source``.
        DecontaminationError: a source's held-apart documents lose more than ``max_drop_fraction``.
    """
    from clmdetour.corpus.merge import merge_held_apart

    with tempfile.TemporaryDirectory(prefix="held-apart-") as work, job_scratch(work, "datasets-cache"):
        shards, text_dirs = _text_shards(cfg, Path(work), eval_texts, root, demo_corpus, hub_dirs, cfg["num_proc"])
        return merge_held_apart(cfg, shards, text_dirs, eval_texts)
