"""The corpus step as the corpus grows (issue 40): rate, memory per job, bytes under $HOME, bytes per token.

Builds corpora of two sizes from the real French files (``../shared/data/pretrain``): copies of the
three files, each document of copy ``k`` prefixed with ``[copy k]`` so deduplication keeps it, grown to
the size asked. For each size it runs the pipeline's corpus jobs as Snakemake would on ``--cores``
cores: every shard's text job then its token job (``workflow/scripts/corpus_shard_*.py``'s
functions, each job a fresh process with ``HOME`` an empty folder, inside the job's scratch,
``corpus.num_proc: 1``, the paper's sequence length 8,192, an 8,192-token BPE tokenizer), ``--cores``
shard chains side by side, then the merge; and one core's raw rate of the same tokenizer
(``tokenizer(batch)`` over the same texts, one thread) in another process. It prints, per size:

- preparation rate (MB of text per second of the corpus jobs' wall time, merge included) and its
  ratio to the raw tokenizer rate of one core (the ceiling with 2 cores is 2.0; issue 40's goal 1.6);
- the merge's share of the wall time (goal: at most 10 % at 160 MB);
- peak RSS of each kind of job (largest text job, token job, the merge: the job process's ``VmHWM``, and
  its workers' ``getrusage``; not the job's ``ru_maxrss``, which Linux carries over ``execve`` from
  the forked parent), and the growth of the largest from the smaller to the larger size (goal: at
  most 15 %);
- bytes written under ``$HOME`` (goal: under 5 MB) and left in the run's scratch after success;
- stored bytes per token of the output (goal: at most 3);
- a projection of the wall time for the paper's 10B tokens (about 40 GB of text) on one 32-core node
  and on 16 shard jobs side by side, from the measured per-core shard rate (MB per CPU-second of
  the shard jobs) and the merge's rate (serial: it does not scale with cores).

Usage: ``python benchmarks/corpus_scale.py [--sizes-mb 40 160] [--cores 2] [--shard-mb 32]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.common import bench_tokenizer, pretrain_files

PAPER_TEXT_GB = 40.0  # about 10B tokens of French text (issue 40)


def grow_corpus(out: Path, size_mb: float) -> tuple[list[Path], float]:
    """Copies of the real files, documents prefixed ``[copy k]``, until ``size_mb`` MB of text; returns the
    files and their text size (MB = 1e6 bytes of UTF-8 ``text``)."""
    out.mkdir(parents=True, exist_ok=True)
    sources = {p.stem: [json.loads(line)["text"] for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
               for p in pretrain_files()}
    handles = {name: (out / f"{name}.jsonl").open("w", encoding="utf-8") for name in sources}
    total, k = 0, 0
    while total < size_mb * 1e6:
        for name, texts in sources.items():
            for t in texts:
                text = f"[copy {k}] {t}"
                handles[name].write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                total += len(text.encode("utf-8"))
        k += 1
    for h in handles.values():
        h.close()
    return sorted(out.glob("*.jsonl")), total / 1e6


SHARD_JOB = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from benchmarks.corpus import corpus_section
from clmdetour.corpus.scratch import job_scratch
from clmdetour.corpus.shards import plan_shards, shard_text, shard_tokens
from pathlib import Path
t0 = time.perf_counter()
cfg = corpus_section([Path(p) for p in {files!r}], 8192, 1)
cfg["shard_mb"] = {shard_mb!r}
shard = plan_shards(cfg)[{index}]
source = next(s for s in cfg["sources"] if s["name"] == shard["source"])
if {kind!r} == "text":
    with job_scratch({scratch!r}, "corpus_shard_text-" + shard["id"]):
        shard_text(cfg, source, shard, {out!r} + "/" + shard["id"] + "/text")
else:
    shard_tokens({out!r} + "/" + shard["id"] + "/text", {tok!r}, {out!r} + "/" + shard["id"] + "/tokens", cfg["batch_size"])
hwm = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps({{"seconds": time.perf_counter() - t0,
                  "rss_mb": max(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024}}))
"""

MERGE_JOB = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from benchmarks.corpus import corpus_section
from clmdetour.corpus.merge import merge_corpus
from clmdetour.corpus.scratch import job_scratch
from clmdetour.corpus.shards import plan_shards
from pathlib import Path
t0 = time.perf_counter()
cfg = corpus_section([Path(p) for p in {files!r}], 8192, 1)
cfg["shard_mb"] = {shard_mb!r}
shards = plan_shards(cfg)
with job_scratch({scratch!r}, "prepare_corpus") as scratch:
    m = merge_corpus(cfg, shards, [{out!r} + "/" + s["id"] + "/tokens" for s in shards], {tok!r}, {corpus!r},
                     scratch=scratch)
hwm = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
print(json.dumps({{"seconds": time.perf_counter() - t0, "rss_mb": hwm / 1024,
                  "shards": len(shards), "tokens": m["train"]["tokens"] + m["valid"]["tokens"],
                  "positions": 8192 * (m["train"]["sequences"] + m["valid"]["sequences"])}}))
"""

RAW = r"""
import json, sys, time
from pathlib import Path
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained({tok!r})
texts = [json.loads(l)["text"] for p in {files!r} for l in Path(p).read_text(encoding="utf-8").splitlines() if l.strip()]
t0 = time.perf_counter()
for i in range(0, len(texts), 1000):
    tok(texts[i:i + 1000])
print(json.dumps({{"seconds": time.perf_counter() - t0}}))
"""


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _python(code: str, home: Path, threads: int | None = None) -> dict:
    env = dict(os.environ, HOME=str(home), TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    for key in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        env.pop(key, None)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _shard_chain(index: int, fmt: dict, home: Path) -> list[dict]:
    """One shard's text job, then its token job (two processes, as the pipeline's two rules)."""
    return [_python(SHARD_JOB.format(index=index, kind=kind, **fmt), home) for kind in ("text", "tokens")]


def measure(size_mb: float, workdir: Path, tok_dir: Path, cores: int, shard_mb: float) -> dict:
    """One size: the jobs' rate, memory, $HOME and scratch bytes, stored bytes per token; the raw tokenizer rate."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from benchmarks.corpus import corpus_section
    from clmdetour.corpus.shards import plan_shards

    work = Path(tempfile.mkdtemp(dir=workdir, prefix=f"scale{size_mb:g}-"))
    files, mb = grow_corpus(work / "data", size_mb)
    home = work / "home"
    home.mkdir()
    fmt = {"repo": str(REPO), "files": [str(f) for f in files], "shard_mb": shard_mb, "scratch": str(work / "ckpt"),
           "out": str(work / "ckpt" / "scratch" / "corpus-shards"), "tok": str(tok_dir), "corpus": str(work / "corpus")}
    cfg = corpus_section(files, 8192, 1)
    cfg["shard_mb"] = shard_mb
    n_shards = len(plan_shards(cfg))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=cores) as pool:
        chains = list(pool.map(lambda i: _shard_chain(i, fmt, home), range(n_shards)))
    shards_s = time.perf_counter() - t0
    merge = _python(MERGE_JOB.format(**fmt), home)
    seconds = time.perf_counter() - t0
    raw = _python(RAW.format(tok=str(tok_dir), files=[str(f) for f in files]), work / "home-raw", threads=1)
    stored = _bytes_under(work / "corpus") - (work / "corpus" / "manifest.json").stat().st_size
    text_jobs, token_jobs = [c[0] for c in chains], [c[1] for c in chains]
    out = {"text_mb": mb, "shards": n_shards, "seconds": seconds, "shards_seconds": shards_s,
           "merge_seconds": merge["seconds"], "rate_mb_s": mb / seconds, "raw_rate_mb_s": mb / raw["seconds"],
           "shard_cpu_seconds": sum(j["seconds"] for j in text_jobs + token_jobs),
           "text_seconds": sum(j["seconds"] for j in text_jobs), "tokens_seconds": sum(j["seconds"] for j in token_jobs),
           "rss_text_mb": max(j["rss_mb"] for j in text_jobs), "rss_tokens_mb": max(j["rss_mb"] for j in token_jobs),
           "rss_merge_mb": merge["rss_mb"], "home_bytes": _bytes_under(home),
           "scratch_left_bytes": _bytes_under(work / "ckpt" / "scratch" / "prepare_corpus")
           + sum(_bytes_under(p) for p in (work / "ckpt" / "scratch").glob("corpus_shard_text-*")),
           "stored_bytes_per_token": stored / merge["tokens"], "stored_bytes_per_position": stored / merge["positions"]}
    out["ratio_to_raw"] = out["rate_mb_s"] / out["raw_rate_mb_s"]
    out["merge_share"] = out["merge_seconds"] / seconds
    out["rss_max_mb"] = max(out["rss_text_mb"], out["rss_tokens_mb"], out["rss_merge_mb"])
    subprocess.run(["rm", "-rf", str(work)], check=False)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes-mb", type=float, nargs=2, default=[40.0, 160.0])
    p.add_argument("--cores", type=int, default=2, help="shard chains side by side (Snakemake's --cores)")
    p.add_argument("--shard-mb", type=float, default=32.0, help="corpus.shard_mb of the run")
    p.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="corpus_scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    bench_tokenizer(workdir)
    tok_dir = workdir / "tokenizer-8192"
    rows = [measure(s, workdir, tok_dir, args.cores, args.shard_mb) for s in args.sizes_mb]
    small, large = rows
    print(f"{args.cores} cores, corpus.shard_mb {args.shard_mb:g}, corpus.num_proc 1\n")
    print("| text (MB) | shards | wall (s) | rate (MB/s) | raw tokenizer, 1 core (MB/s) | rate / raw | merge (s, share) "
          "| peak RSS text / tokens / merge job (MB) | under $HOME (bytes) | scratch left (bytes) | stored bytes / token |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['text_mb']:.0f} | {r['shards']} | {r['seconds']:.0f} | {r['rate_mb_s']:.2f} | {r['raw_rate_mb_s']:.2f} | "
              f"{r['ratio_to_raw']:.2f} | {r['merge_seconds']:.1f} ({r['merge_share']:.0%}) | "
              f"{r['rss_text_mb']:.0f} / {r['rss_tokens_mb']:.0f} / {r['rss_merge_mb']:.0f} | {r['home_bytes']:,} | "
              f"{r['scratch_left_bytes']:,} | {r['stored_bytes_per_token']:.2f} |")
    for r in rows:
        print(f"\n{r['text_mb']:.0f} MB: text jobs {r['text_seconds']:.1f} s, token jobs {r['tokens_seconds']:.1f} s "
              f"(sums over {r['shards']} shards, each job's own wall time from its start), merge {r['merge_seconds']:.1f} s")
    growth = large["rss_max_mb"] / small["rss_max_mb"] - 1
    print(f"\npeak RSS of the largest job, {small['text_mb']:.0f} -> {large['text_mb']:.0f} MB: {growth:+.0%} (goal <= +15 %)")
    per_core = large["text_mb"] / large["shard_cpu_seconds"]
    merge_rate = large["text_mb"] / large["merge_seconds"]
    mb = PAPER_TEXT_GB * 1e3
    for label, cores in (("one 32-core node (32 shard jobs of 1 core)", 32), ("16 shard jobs of 1 core", 16)):
        hours = (mb / (per_core * cores) + mb / merge_rate) / 3600
        print(f"projection for {PAPER_TEXT_GB:g} GB of text on {label}: {hours:.1f} h "
              f"(shard jobs at {per_core:.2f} MB per CPU-second, then the merge at {merge_rate:.1f} MB/s, serial)")


if __name__ == "__main__":
    main()
