"""GPU benchmark of the paper run's GPU half, one row per process: pretraining, the fine-tuning grid, a
Snakemake run on the GPU and a resumed phase (``bash benchmarks/gpu.sh``; at most 8 minutes on one H100/H200).

Rows (they run in the order of :data:`ROWS`, the most needed first; a row is skipped, and said so, when the time budget ``--budget-s`` left
is under its expected cost):

1. phase-1 CLM, FlexAttention + ``torch.compile``, the planner's micro-batch (``micro_batch_sequences:
   auto`` under ``--memory-limit-gib``, enforced on a larger card);
2. decay MLM, the same; then, in the same process, the phase is planned again: the planner must give the
   micro-batch it gave in the fresh process (:func:`clmdetour.training.memory.step_footprint_bytes`);
3. ``transformers.Trainer`` MLM, sdpa, micro-batch 4 (the reference of every pretraining ratio);
4. the Snakemake run on one GPU and the ``kill -9`` resume (:mod:`benchmarks.gpu_pipeline`);
5. fine-tuning grid jobs (:mod:`benchmarks.gpu_finetune`): NER over 8,192-token windows, multilabel at
   8,192 and multiclass at 512, each on the project's path and on ``transformers.Trainer``; then NER with
   FlexAttention uncompiled and compiled over bucketed lengths (the figures behind fine-tuning's choice);
6. phase-1 CLM with sdpa, not compiled (the path before FlexAttention).

Each row runs alone in a fresh Python process (``gpu.py --row NAME``), as the pipeline's jobs do, and
reports steady-state tokens/s (after ``--skip`` steps; the first step, which compiles, apart as
``first_step_s``), MFU = tokens/s x FLOPs per token (:func:`clmdetour.training.flops.model_flops_per_token`)
/ peak bf16 FLOP/s of the device, peak reserved GiB, graphs compiled and the ratio to its Trainer row.
The table is rewritten after every row (``benchmarks/results/gpu.json`` and ``gpu.md``, also copied to
``$OUT`` when set), so a run cut short keeps what it measured. ``--profile`` also writes the top kernels
of one compiled CLM step to ``gpu-profile.txt``.

``--dry`` shrinks everything (2 layers, sequence 256) and runs on the CPU to check the script: FlexAttention
has no CPU backward, so its rows train with sdpa there, and every GPU figure prints "not measured (CPU)".
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import gpu_plan

BASE_150M = {"vocab_size": 32768, "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
                 "intermediate_size": 1152, "global_attn_every_n_layers": 3, "local_attention": 128,
                 "max_position_embeddings": 8192}
DRY = {"vocab_size": 32768, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 96,
           "global_attn_every_n_layers": 3, "local_attention": 32, "max_position_embeddings": 256}


def synthetic_corpus(out: Path, vocab_size: int, seq_len: int, n_rows: int, cls_id: int, sep_id: int, pad_id: int,
                     seed: int = 0) -> Path:
    """Packed rows of random-token documents (200-3,000 tokens, ``[CLS] ... [SEP]``) in the corpus contract."""
    import datasets
    import numpy as np

    from clmdetour.corpus.pack import pack_batch, packed_features, token_dtype

    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < (n_rows + 2) * seq_len:
        n = int(rng.integers(200, 3000))
        docs.append([cls_id] + rng.integers(5, vocab_size, n - 2).tolist() + [sep_id])
        total += n
    rows = pack_batch({"input_ids": docs}, seq_len, pad_id, token_dtype(vocab_size))
    ds = datasets.Dataset.from_dict({"input_ids": rows["input_ids"][: n_rows + 2],
                                     "n_tokens": rows["n_tokens"][: n_rows + 2]},
                                    features=packed_features(seq_len, token_dtype(vocab_size)))
    ds.select(range(n_rows)).save_to_disk(str(out / "train"))
    ds.select(range(n_rows, n_rows + 2)).save_to_disk(str(out / "valid"))
    return out


NOT_MEASURED = "not measured (CPU)"


def run_row(model_dir: Path, corpus: Path, section: dict, scratch: Path, skip: int) -> dict:
    """One ``run_phase`` run: steady tokens/s, the first step's time, the planned micro-batch and peak memory."""
    import json

    from benchmarks.throughput import leave_distributed, steady_rate
    from clmdetour.training.phase import run_phase

    run_dir = Path(tempfile.mkdtemp(dir=scratch))
    section = {k: v for k, v in section.items() if k != "quality_floor"}  # a speed row: no floor on a random model
    try:
        run_phase(input_model=str(model_dir), corpus_dir=str(corpus), output_dir=str(run_dir / "out"),
                  section=section, variant="bench", checkpoint_root=str(run_dir / "ckpt"))
        lines = [json.loads(x) for x in (run_dir / "out" / "train_log.jsonl").read_text().splitlines() if x.strip()]
        run = json.loads((run_dir / "out" / "run.json").read_text())
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        leave_distributed()
    return {"tokens_per_s": steady_rate([x["tokens"] for x in lines], [x["elapsed_s"] for x in lines], skip),
            "first_step_s": lines[0].get("first_step_s"), "micro_batch_sequences": run["micro_batch_sequences"],
            "memory_plan": run.get("memory"), "peak_memory_gib": run.get("peak_memory_gib"),
            "attention": run["attention"]["implementation"], "attention_reason": run["attention"].get("reason"),
            "compiled": run.get("compile", {}).get("enabled")}


def profile_step(model_dir: Path, seq_len: int, micro_batch: int, on_gpu: bool, out: Path, rows: int = 30) -> Path:
    """Write the top kernels of one steady-state compiled CLM step (forward + backward) to ``out``.

    Three warm-up steps first (compilation, autotuning), then one step under ``torch.profiler``;
    the table is sorted by device time on CUDA (host time on CPU).
    """
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import ModernBertForMaskedLM

    from clmdetour.modeling.causal import encoder_of, forward_encoder, set_attention
    from clmdetour.modeling.loss import chunked_lm_loss

    device = "cuda" if on_gpu else "cpu"
    model = ModernBertForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32).to(device)
    set_attention(model, "flex_attention" if on_gpu else "sdpa")
    encoder_of(model).compile()
    ids = torch.randint(5, model.config.vocab_size, (micro_batch, seq_len), device=device)
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if on_gpu else (lambda: torch.autocast("cpu", enabled=False))

    def step():
        with ctx():
            hidden = forward_encoder(model, ids, causal=True).last_hidden_state
            loss = chunked_lm_loss(hidden, ids, lambda h: model.decoder(model.head(h)), 2048)
        loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        step()
        if on_gpu:
            torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total" if on_gpu else "cpu_time_total", row_limit=rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# one compiled CLM step, micro-batch {micro_batch} x {seq_len} tokens, "
                   f"{'FlexAttention, bf16' if on_gpu else 'sdpa, fp32 (CPU dry run)'}\n{table}\n", encoding="utf-8")
    return out


def replan_micro_batch(model_dir: Path, section: dict, on_gpu: bool) -> int:
    """Plan ``section``'s micro-batch again in this process, on a freshly loaded model (the same-process check)."""
    import torch
    from transformers import ModernBertForMaskedLM

    from clmdetour.modeling.causal import set_attention
    from clmdetour.settings import PhaseSettings
    from clmdetour.training.memory import plan_memory
    from clmdetour.training.phase import batch_arithmetic

    settings = PhaseSettings.from_dict(section, "benchmark phase section")
    model = ModernBertForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.to(torch.device("cuda") if on_gpu else torch.device("cpu"))
    set_attention(model, section["attn_implementation"])
    plan, _ = plan_memory(model, settings, batch_arithmetic(settings, 1), on_gpu, model.config.sep_token_id, "bench")
    return plan.micro_batch_sequences


#: name -> expected seconds on one H100/H200 (compilation included), in the plan's order
#: (:data:`benchmarks.gpu_plan.PRIORITY`); the sources are in :data:`benchmarks.gpu_plan.EXPECTED_S`.
ROWS = {n: gpu_plan.expected_s(n) for n in gpu_plan.PRIORITY}

#: Pretraining rows' sizes on the GPU: optimizer steps, steps left out of the rate (the first compiles), the
#: per-device batch of the planned (FlexAttention) rows and the micro-batch of the sdpa and Trainer rows.
#: Five steps, two skipped: three timed intervals are enough for the spread (steady steps vary < 2 %).
GPU_STEPS, GPU_SKIP, PLANNED_BATCH, FIXED_BATCH = 5, 2, 24, 4
#: The same at ``--dry`` sizes (CPU).
DRY_STEPS, DRY_SKIP, DRY_PLANNED_BATCH, DRY_FIXED_BATCH = 4, 2, 4, 2


def build_model(root: Path, dry: bool, corpus_rows: int, seq_len: int):
    """The tokenizer, the 150M (or ``DRY``) config and its random-init folder, and a packed corpus."""
    import torch
    from transformers import ModernBertForMaskedLM

    from benchmarks.common import modernbert_config
    from clmdetour.tokenizer import save_tokenizer, train_tokenizer

    # the tokenizer only supplies special ids to the collators: a tiny one suffices
    texts = [f"Patient de {i} ans, traitement {i % 7} mg, suivi clinique." for i in range(200)]
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1)
    save_tokenizer(tokenizer, root / "tok")
    cfg = modernbert_config(tokenizer, **(DRY if dry else BASE_150M))
    torch.manual_seed(0)
    ModernBertForMaskedLM(cfg).save_pretrained(str(root / "model"), safe_serialization=True)
    tokenizer.save_pretrained(str(root / "model"))
    corpus = synthetic_corpus(root / "corpus", len(tokenizer), seq_len, corpus_rows, tokenizer.cls_token_id,
                              tokenizer.sep_token_id, tokenizer.pad_token_id)
    return cfg, corpus


def pretrain_spec(name: str, dry: bool, memory_limit_gib: float = 72.0) -> dict:
    """Pretraining row ``name``'s sizes, built without a model: the phase section it trains with, steps and the
    steps skipped, the per-device batch and the micro-batch the planner's estimate gives under
    ``memory_limit_gib`` (:func:`clmdetour.runtime.memory.estimate_step_bytes`; on the GPU a probe step checks it).

    Returns:
        ``{"phase", "kind", "section", "seq_len", "steps", "skip", "batch", "micro_batch_estimate",
        "estimate_gib", "corpus_rows"}`` (tokens, sequences, GiB).
    """
    from benchmarks.throughput import paper_section
    from clmdetour.runtime.memory import GIB, estimate_step_bytes, plan_micro_batch

    kind = name.split("/", 1)[1]
    seq_len = 256 if dry else 8192
    steps, skip, fixed, planned = ((DRY_STEPS, DRY_SKIP, DRY_FIXED_BATCH, DRY_PLANNED_BATCH) if dry
                                   else (GPU_STEPS, GPU_SKIP, FIXED_BATCH, PLANNED_BATCH))
    flex = "sdpa" if dry else "flex_attention"  # no CPU backward for FlexAttention
    phase, attn, compiled, gb, micro = {
        "clm-flex": ("phase1", flex, True, planned, "auto"), "decay-flex": ("decay", flex, True, planned, "auto"),
        "clm-sdpa": ("phase1", "sdpa", False, fixed, fixed), "trainer-mlm": ("decay", "sdpa", False, fixed, fixed)}[kind]
    section = paper_section(phase, seq_len=seq_len, global_batch_sequences=gb, micro_batch_sequences=micro,
                            tokens=steps * gb * seq_len, warmup_tokens=gb * seq_len, log_interval_steps=1,
                            valid_sequences=1, progress_bar=False, checkpoint_interval="100000ba", keep_checkpoints=1,
                            attn_implementation=attn, load_optimizer_state=False, compile=compiled,
                            memory_limit_gib=memory_limit_gib)
    sizes = DRY if dry else BASE_150M
    params = model_parameters(sizes)

    def bytes_of(mb: int) -> float:
        return estimate_step_bytes(parameters=params, hidden_size=sizes["hidden_size"],
                                   intermediate_size=sizes["intermediate_size"], num_layers=sizes["num_hidden_layers"],
                                   vocab_size=sizes["vocab_size"], seq_len=seq_len, micro_batch=mb,
                                   chunk_tokens=int(section["loss_chunk_tokens"]),
                                   activation_bytes=4 if dry else 2)

    mb = micro if isinstance(micro, int) else plan_micro_batch(gb, memory_limit_gib * GIB, bytes_of)[0]
    return {"phase": phase, "kind": kind, "section": section, "seq_len": seq_len, "steps": steps, "skip": skip,
            "batch": gb, "micro_batch_estimate": mb, "estimate_gib": round(bytes_of(mb) / GIB, 2),
            "corpus_rows": steps * gb}


def model_parameters(sizes: dict) -> int:
    """Parameters of a ModernBERT MLM of ``sizes``, counted on the meta device (nothing allocated)."""
    import torch
    from transformers import ModernBertForMaskedLM

    from benchmarks.common import modernbert_config

    with torch.device("meta"):
        cfg = modernbert_config(**dict(sizes, pad_token_id=0, cls_token_id=1, sep_token_id=2, bos_token_id=1,
                                       eos_token_id=2))  # special ids within the vocabulary (the default pad is not)
        return sum(p.numel() for p in ModernBertForMaskedLM(cfg).parameters())


def pretrain_row(name: str, a: argparse.Namespace) -> dict:
    """One pretraining row (``pretrain/clm-flex``, ``decay-flex``, ``clm-sdpa`` or ``trainer-mlm``), measured here;
    its scratch (model, corpus, checkpoints with the live ``train_log.jsonl``) under ``a.row_dir``, where the
    driver reads a stopped row's steps."""
    import torch

    from benchmarks.throughput import leave_distributed, measure_reference
    from clmdetour.training.flops import model_flops_per_token, peak_flops

    on_gpu = torch.cuda.is_available() and not a.dry
    spec = pretrain_spec(name, a.dry, a.memory_limit_gib)
    section, seq_len, skip, kind = spec["section"], spec["seq_len"], spec["skip"], spec["kind"]
    root = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-", dir=a.row_dir))
    try:
        cfg, corpus = build_model(root, a.dry, spec["corpus_rows"], seq_len)
        if kind == "trainer-mlm":
            leave_distributed()
            rate = measure_reference(root / "model", corpus, section, root, skip)
            row = {"tokens_per_s": rate, "micro_batch_sequences": spec["batch"], "attention": "sdpa", "compiled": False,
                   "peak_memory_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 3) if on_gpu else None}
        else:
            row = run_row(root / "model", corpus, section, root, skip)
            if kind == "decay-flex":
                again = replan_micro_batch(root / "model", section, on_gpu)
                row["same_process_replan"] = {"micro_batch_sequences": again,
                                              "same_as_fresh": again == row["micro_batch_sequences"]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    peak = peak_flops() if on_gpu else None
    fpt = model_flops_per_token(cfg, seq_len, 1.0 if spec["phase"] == "phase1" else section["masking_rate"])
    row.update(flops_per_token=fpt, mfu=row["tokens_per_s"] * fpt / peak if peak else None, seq_len=seq_len,
               steps=spec["steps"], warmup_steps_skipped=skip, micro_batch_estimate=spec["micro_batch_estimate"])
    return row


def one_row(name: str, a: argparse.Namespace) -> dict:
    """Measure row ``name`` in this process (``gpu.py --row NAME``); its scratch under ``a.row_dir``."""
    import torch

    if name.startswith("pretrain/"):
        return pretrain_row(name, a)
    if name == "pipeline":
        import json

        from benchmarks import gpu_pipeline

        # the pipeline writes its JSON after each part (a stopped row keeps the parts it finished); its own
        # budget ends it before the row's deadline: a part started at the budget's end may run GRACE_S more
        out = a.row_dir / "partial.json"
        budget = max(10, int(a.row_budget_s - gpu_pipeline.GRACE_S - 10))
        gpu_pipeline.main(["--out", str(out), "--budget-s", str(budget)] + (["--dry"] if a.dry else []))
        return json.loads(out.read_text(encoding="utf-8"))
    from benchmarks.gpu_finetune import finetune_row
    from clmdetour.training.flops import model_flops_per_token, peak_flops

    _, shape, path = name.split("/")
    sizes = finetune_sizes(a.dry)
    row = finetune_row(shape, path, a.dry, sizes, scratch=a.row_dir, limit_gib=a.memory_limit_gib)
    on_gpu = torch.cuda.is_available() and not a.dry
    from benchmarks.common import modernbert_config

    fpt = model_flops_per_token(modernbert_config(vocab_size=400, **sizes), row["max_length"], 0.0)
    peak = peak_flops() if on_gpu else None
    row.update(flops_per_token=fpt, mfu=row["tokens_per_s"] * fpt / peak if peak else None)
    return row


def finetune_sizes(dry: bool) -> dict:
    """The encoder sizes of the fine-tuning rows (the 150M base, or ``DRY``), without vocabulary and positions."""
    return {k: v for k, v in (DRY if dry else BASE_150M).items() if k not in ("vocab_size", "max_position_embeddings")}


def read_partial(row_dir: Path, skip: int) -> dict | None:
    """What a stopped row measured before its deadline: its ``partial.json`` (fine-tuning rows and the
    pipeline write it as they go), else the steps of a pretraining row's live ``train_log.jsonl`` (steps,
    first step, peak memory, and tokens/s once ``skip + 2`` steps are logged); None when nothing was written."""
    import json

    from benchmarks.throughput import steady_rate

    partial = row_dir / "partial.json"
    if partial.is_file():
        try:
            return json.loads(partial.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
    lines = []
    for log in sorted(row_dir.rglob("train_log.jsonl")):
        for x in log.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                lines.append(json.loads(x))
            except ValueError:  # a line cut by the kill
                continue
    if not lines:
        return None
    peaks = [x["peak_memory_gib"] for x in lines if x.get("peak_memory_gib") is not None]
    out = {"steps": len(lines), "first_step_s": lines[0].get("first_step_s"), "peak_memory_gib": max(peaks, default=None)}
    if len(lines) >= skip + 2:
        out["tokens_per_s"] = steady_rate([x["tokens"] for x in lines], [x["elapsed_s"] for x in lines], skip)
    return out


def row_command(name: str, row_dir: Path, deadline_s: float, a: argparse.Namespace) -> list[str]:
    """The command line of row ``name`` in its own process (``gpu.py --row NAME``), its scratch ``row_dir``."""
    return [sys.executable, str(Path(__file__).resolve()), "--row", name, "--row-out", str(row_dir / "row.json"),
            "--row-budget-s", str(int(deadline_s))] + a.passthrough


def run_rows(a: argparse.Namespace, names: list[str], write, command=row_command) -> list[dict]:
    """Run each row in a fresh process within the time budget; ``write(rows)`` after every row; ``command``
    gives each row's command line (:func:`row_command`).

    A row starts only when its whole expected time (:func:`benchmarks.gpu_plan.fits`) fits what is left of
    ``a.budget_s``; else it is listed as skipped. It runs in its own session with a marker in its environment
    and is stopped at its deadline (:func:`benchmarks.gpu_plan.row_deadline_s`): then it and every process it
    started, in whatever group, are ended (:func:`benchmarks.proctree.stop_marked`) and what it wrote so far is
    kept, marked ``stopped`` (:func:`read_partial`). After a row that ended by itself the same sweep removes
    any process it left behind.
    """
    import json
    import subprocess
    import time

    from benchmarks import proctree

    t0, rows = time.monotonic(), []
    for name in names:
        left = a.budget_s - (time.monotonic() - t0)
        if not gpu_plan.fits(name, left):
            rows.append({"metric": name, "skipped": f"time budget: {left:.0f} s left, "
                                                    f"{gpu_plan.expected_s(name):.0f} s expected"})
            write(rows)
            continue
        deadline = gpu_plan.row_deadline_s(name, left)
        row_dir = Path(tempfile.mkdtemp(prefix="clmdetour-row-"))
        marker = proctree.new_marker()
        cmd = command(name, row_dir, deadline, a)
        env = dict(os.environ, **{proctree.MARKER_KEY: marker})
        start = time.monotonic()
        log = row_dir / "output.log"
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                rc, stopped = proc.wait(timeout=deadline), None
            except subprocess.TimeoutExpired:
                rc, stopped = "stopped", f"deadline of {deadline:.0f} s ({gpu_plan.expected_s(name):.0f} s expected)"
            left_alive = proctree.stop_marked(marker, proc.pid)
            proc.wait()
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        with open(a.log_path, "a", encoding="utf-8") as f:
            f.write(f"\n===== {name} (exit {rc}, {time.monotonic() - start:.0f} s)\n{tail}\n")
        if stopped:
            row = read_partial(row_dir, a.skip) or {}
            row["stopped"] = stopped
        elif (row_dir / "row.json").is_file():
            row = json.loads((row_dir / "row.json").read_text(encoding="utf-8"))
        else:
            row = {"error": f"exit {rc}: {tail[-600:]}"}
        if left_alive:
            row["processes_left"] = left_alive
        row.update(metric=name, process_wall_s=round(time.monotonic() - start, 1), expected_s=gpu_plan.expected_s(name))
        rows.append(row)
        shutil.rmtree(row_dir, ignore_errors=True)
        print(f"{name}: {summary_line(row)}", flush=True)
        write(rows)
    return rows


def add_ratios(rows: list[dict]) -> None:
    """``ratio_vs_transformers_trainer``: pretraining rows against ``pretrain/trainer-mlm`` (tokens/s),
    fine-tuning rows against the Trainer row of their task shape (sequences/s)."""
    by_name = {r["metric"]: r for r in rows if "tokens_per_s" in r}
    ref = by_name.get("pretrain/trainer-mlm")
    for r in rows:
        if "tokens_per_s" not in r:
            continue
        if r["metric"].startswith("pretrain/") and ref and ref["tokens_per_s"]:
            r["ratio_vs_transformers_trainer"] = r["tokens_per_s"] / ref["tokens_per_s"]
        elif r["metric"].startswith("finetune/"):
            shape_ref = by_name.get("finetune/" + r["metric"].split("/")[1] + "/trainer")
            if shape_ref and shape_ref.get("sequences_per_s"):
                r["ratio_vs_transformers_trainer"] = r["sequences_per_s"] / shape_ref["sequences_per_s"]


def summary_line(r: dict) -> str:
    """One row in words (tokens/s, micro-batch, first step, MFU, peak, attention; or why it has no figures)."""
    if isinstance(r.get("skipped"), str):
        return f"skipped ({r['skipped']})"
    if "error" in r:
        return f"ERROR {r['error'][-300:]}"
    stop = f"STOPPED at its {r['stopped']}, partial: {r.get('steps', 0)} steps; " if r.get("stopped") else ""
    if r["metric"] != "pipeline" and "tokens_per_s" not in r:
        return stop + f"first step {r.get('first_step_s')} s, peak {_gib(r.get('peak_memory_gib'))}"
    if r["metric"] == "pipeline":
        parts = [f"{k}: {'PASS' if v.get('passed') else 'FAIL'}" for k, v in r.items() if isinstance(v, dict)]
        return stop + "; ".join(parts) + (f"; parts skipped: {r['skipped']}" if r.get("skipped") else "")
    extra = f", replanned in the same process to {r['same_process_replan']['micro_batch_sequences']}" \
        if "same_process_replan" in r else ""
    return (f"{stop}{r['tokens_per_s']:,.0f} tokens/s, micro-batch {r.get('micro_batch_sequences', r.get('batch_size'))}, "
            f"first step {r.get('first_step_s')} s, MFU {_pct(r.get('mfu'))}, peak {_gib(r.get('peak_memory_gib'))}, "
            f"attention {r.get('attention')}{extra}")


def markdown_table(rows: list[dict]) -> str:
    """The rows as a Markdown table (tokens/s, sequences/s, MFU, peak, first step, graphs, ratio, notes)."""
    lines = [("| row | batch / micro-batch | tokens/s | sequences/s | MFU | peak memory | first step (s) | graphs compiled "
             "| x Trainer | notes |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "tokens_per_s" not in r:
            lines.append(f"| {r['metric']} | | | | | | | | | {summary_line(r)} |")
            continue
        ratio = r.get("ratio_vs_transformers_trainer")
        size = (f"{r['batch_size']} / {r.get('micro_batch_sequences', r['batch_size'])}" if r.get("batch_size")
                else r.get("micro_batch_sequences"))
        notes = [f"attention {r.get('attention')}" + (", compiled" if r.get("compiled") else "")]
        if r.get("stopped"):
            notes.insert(0, f"STOPPED at its {r['stopped']}: partial, {r.get('steps')} steps")
        if "same_process_replan" in r:
            notes.append(f"same-process replan: {r['same_process_replan']['micro_batch_sequences']}")
        if r.get("max_length"):
            notes.append(f"{r['task_type']} at {r['max_length']} tokens, mean input {r['mean_input_tokens']}")
        seqs = r.get("sequences_per_s")
        lines.append(f"| {r['metric']} | {size} | {r['tokens_per_s']:,.0f} | {'' if seqs is None else f'{seqs:,.1f}'} | "
                     f"{_pct(r.get('mfu'))} | {_gib(r.get('peak_memory_gib'))} | {r.get('first_step_s', '')} | "
                     f"{r.get('graphs_compiled', '')} | {'' if ratio is None else f'{ratio:.2f}'} | {'; '.join(notes)} |")
    return "\n".join(lines) + "\n"


def write_results(a: argparse.Namespace, rows: list[dict], device: str, projection: str = "") -> Path:
    """Write ``{stem}.json`` and ``{stem}.md`` atomically (``gpu``, ``gpu-dry`` with ``--dry``, ``-cN`` for plan
    command N); copy them and the rows' log to ``$OUT/bench``."""
    import torch

    from clmdetour.io import atomic_write_json, atomic_write_text

    add_ratios(rows)
    stem = a.stem
    result = {"date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), "dry": a.dry, "device": device,
              "model": DRY if a.dry else BASE_150M, "steps": a.steps, "warmup_steps_skipped": a.skip,
              "memory_limit_gib": a.memory_limit_gib, "budget_s": a.budget_s, "torch": torch.__version__, "rows": rows,
              "command": a.command, "commit": git_commit(), "paper_projection": projection}
    out_dir = a.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / f"{stem}.json", result)
    atomic_write_text(out_dir / f"{stem}.md", f"# GPU benchmark, {device}, torch {torch.__version__}\n\n"
                      + markdown_table(rows) + (f"\n```text\n{projection}\n```\n" if projection else ""))
    if os.environ.get("OUT"):
        dest = Path(os.environ["OUT"]) / "bench"
        dest.mkdir(parents=True, exist_ok=True)
        for name in (f"{stem}.json", f"{stem}.md", f"{stem}.log"):
            if (out_dir / name).is_file():
                shutil.copyfile(out_dir / name, dest / name)
    return out_dir / f"{stem}.json"


def paper_projection(rows: list[dict], dry: bool) -> str:
    """The paper grid's and the pretraining's GPU-hours (``clmdetour.pipeline.cost``) at this run's measured
    rates (rows not measured keep the rates file's, :mod:`clmdetour.pipeline.rates`); on ``--dry`` the stored
    rates only (a CPU figure is no GPU rate)."""
    from clmdetour.config import load_yaml, validate_config
    from clmdetour.pipeline.cost import Rate, format_cost, project_cost
    from clmdetour.pipeline.rates import RATE_ROWS

    by_name = {r["metric"]: r for r in rows if "tokens_per_s" in r}
    rates = {}
    for kind, (name, seq) in RATE_ROWS.items():
        if name in by_name and not dry:
            rates[kind] = Rate(by_name[name]["tokens_per_s"], seq, f"benchmarks/gpu.py row {name}, this run")
    config = validate_config(load_yaml(REPO / "config" / "config.yaml"))
    return format_cost(project_cost(config, rates=rates), config)


def git_commit() -> str:
    """The checkout's commit (short), with ``+changes`` when the tree differs from it; ``?`` without git."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                               text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+changes" if dirty else "")


def merge_results(files: list[Path], out_dir: Path) -> Path:
    """One table from several device commands' JSON (``gpu-c1.json``, ``gpu-c2.json``): rows in plan order,
    a later file's row replacing an earlier one of the same name, ratios across commands, the projection at
    the merged rates; written as ``gpu.json`` and ``gpu.md`` in ``out_dir``.

    Raises:
        ValueError: a file that is no benchmarks/gpu.py result, or files that mix ``--dry`` and GPU runs.
    """
    import json

    from clmdetour.io import atomic_write_json, atomic_write_text

    results = []
    for f in files:
        try:
            r = json.loads(Path(f).read_text(encoding="utf-8"))
        except ValueError as e:
            raise ValueError(f"{f}: not valid JSON ({e})") from e
        if not isinstance(r, dict) or not isinstance(r.get("rows"), list):
            raise ValueError(f"{f}: no 'rows' list (not a benchmarks/gpu.py result)")  # noqa: TRY004 (bad file content)
        results.append(r)
    if len({bool(r.get("dry")) for r in results}) > 1:
        raise ValueError(f"{', '.join(map(str, files))}: --dry and GPU runs mixed")
    by_name = {}
    for r in results:
        for row in r["rows"]:
            row.pop("ratio_vs_transformers_trainer", None)
            by_name[row["metric"]] = row
    order = {n: i for i, n in enumerate(gpu_plan.PRIORITY)}
    rows = sorted(by_name.values(), key=lambda x: order.get(x["metric"], len(order)))
    add_ratios(rows)
    dry = bool(results[0].get("dry"))
    projection = paper_projection(rows, dry)
    merged = dict(results[-1], rows=rows, paper_projection=projection, merged_from=[str(f) for f in files],
                  devices=sorted({str(r.get("device")) for r in results}))
    stem = "gpu-dry" if dry else "gpu"
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / f"{stem}.json", merged)
    atomic_write_text(out_dir / f"{stem}.md", f"# GPU benchmark, {', '.join(merged['devices'])}, merged from "
                      f"{len(files)} command(s)\n\n" + markdown_table(rows) + f"\n```text\n{projection}\n```\n")
    return out_dir / f"{stem}.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (``--row`` runs one row in this process; without it, every row in its own)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry", action="store_true", help="tiny sizes on the CPU (script check)")
    p.add_argument("--plan", action="store_true", help="print the plan (commands, rows, expected seconds) and exit")
    p.add_argument("--command", type=int, default=None, help="run command N of the plan (1 or 2)")
    p.add_argument("--merge", nargs="+", type=Path, default=None,
                   help="merge device commands' JSON into one gpu.json/gpu.md (ratios across commands) and exit")
    p.add_argument("--memory-limit-gib", type=float, default=72.0,
                   help="pretraining.memory_limit_gib of the planned rows (fine-tuning plans under it too)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds for all rows (default: a plan command's, "
                        f"{gpu_plan.COMMAND_LIMIT_S - gpu_plan.KIT_INSTALL_S - gpu_plan.WRAP_UP_S} s)")
    p.add_argument("--only", nargs="+", default=None, help=f"rows to run, of: {' '.join(ROWS)}")
    p.add_argument("--profile", action="store_true", help="also write one compiled CLM step's top kernels")
    p.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)
    p.add_argument("--row-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--row-budget-s", type=float, default=200.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    unknown = [n for n in a.only or [] if n not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}; rows: {' '.join(ROWS)}")
    if a.command is not None and a.only:
        p.error("--command and --only: give one (a command runs its plan's rows)")
    plan = gpu_plan.make_plan()
    if a.command is not None:
        try:
            a.only = list(plan.command(a.command).rows)
        except ValueError as e:
            p.error(str(e))
    if a.budget_s is None:
        a.budget_s = float(gpu_plan.COMMAND_LIMIT_S - gpu_plan.KIT_INSTALL_S - gpu_plan.WRAP_UP_S)
    a.steps, a.skip = (DRY_STEPS, DRY_SKIP) if a.dry else (GPU_STEPS, GPU_SKIP)
    a.passthrough = (["--dry"] if a.dry else []) + ["--memory-limit-gib", str(a.memory_limit_gib)]
    a.stem = ("gpu-dry" if a.dry else "gpu") + (f"-c{a.command}" if a.command is not None else "")
    a.log_path = a.out_dir / f"{a.stem}.log"
    a.row_dir = a.row_out.parent if a.row_out else None
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the rows (each in its own process) and write the table; with ``--row``, measure that row here."""
    a = parse_args(argv)
    if a.plan:
        print(gpu_plan.format_plan(gpu_plan.make_plan()))
        return 0
    if a.merge:
        try:
            print(f"written: {merge_results(a.merge, a.out_dir)}")
        except (OSError, ValueError) as e:
            print(f"gpu.py --merge: {e}", file=sys.stderr)
            return 1
        return 0
    import torch

    if a.row:
        from clmdetour.io import atomic_write_json

        atomic_write_json(a.row_out, one_row(a.row, a))
        return 0
    on_gpu = torch.cuda.is_available() and not a.dry
    if not torch.cuda.is_available() and not a.dry:
        print("no CUDA device: GPU figures not measured (use --dry to check the script on CPU)", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name() if on_gpu else "cpu"
    a.out_dir.mkdir(parents=True, exist_ok=True)
    a.log_path.write_text("", encoding="utf-8")
    names = a.only or list(ROWS)
    print(f"rows, in order ({a.budget_s:.0f} s budget; a row starts only when its expected time fits what is left):",
          flush=True)
    for n in names:
        print(f"  {n:32s} {gpu_plan.expected_s(n):5.0f} s expected ({gpu_plan.PROVES[n]})", flush=True)
    rows = run_rows(a, names, lambda rs: write_results(a, rs, device))
    if a.profile:
        root = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-prof-"))
        try:
            build_model(root, a.dry, 2, 256 if a.dry else 8192)
            micro = next((r["micro_batch_sequences"] for r in rows if r["metric"] == "pretrain/clm-flex"
                          and "micro_batch_sequences" in r), FIXED_BATCH)
            print(f"profile: {profile_step(root / 'model', 256 if a.dry else 8192, micro, on_gpu, a.out_dir / ('gpu-profile-dry.txt' if a.dry else 'gpu-profile.txt'))}")
        finally:
            shutil.rmtree(root, ignore_errors=True)
    try:
        projection = paper_projection(rows, a.dry)
    except Exception as e:  # noqa: BLE001 (the measured rows are written whatever the projection does)
        projection = f"projection failed: {type(e).__name__}: {e}"
    path = write_results(a, rows, device, projection)
    print("\n" + markdown_table(rows))
    print(projection)
    print(f"written: {path}")
    failed = [r["metric"] for r in rows if row_failed(r)]
    stopped = [r["metric"] for r in rows if r.get("stopped")]
    print(f"rows failed: {', '.join(failed) or 'none'}; stopped at their deadline (partial, kept): "
          f"{', '.join(stopped) or 'none'}")
    return 1 if failed else 0


def row_failed(r: dict) -> bool:
    """Whether a row failed (an error, or a pipeline part that ran and did not pass); a row stopped at its
    deadline or skipped for time did not fail."""
    if "error" in r:
        return True
    return r.get("metric") == "pipeline" and any(isinstance(v, dict) and v.get("passed") is False for v in r.values())


def _pct(x: float | None) -> str:
    return NOT_MEASURED if x is None else f"{x:.1%}"


def _gib(x: float | None) -> str:
    return NOT_MEASURED if x is None else f"{x:.1f} GiB"


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
