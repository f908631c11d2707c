"""Benchmark 4: fine-tuning throughput, length-grouped dynamic padding vs padding random batches.

Task data are the real QUAERO (``emea``, ``medline``) and FRACCO (``fracco-30``)
folders in ``../shared/data``, built by the project's task code
(:func:`clmdetour.tasks.prepare.build_task` with the paper config's entries,
``path`` pointed at the local copy) and tokenised by the fine-tuning code
(the task type's ``encode``, NER windows and all).

Ours: :func:`clmdetour.finetune.data.make_dataloader` (megabatch length
grouping + :class:`~clmdetour.finetune.data.PaddingCollator`, padding to the
batch's longest example). Reference: a ``DataLoader`` over randomly ordered
examples with ``transformers.DataCollatorWithPadding`` (NER:
``DataCollatorForTokenClassification``, the same with labels padded to -100;
multilabel targets cast to float for ``BCEWithLogitsLoss``). Both feed the
same training step (forward, loss of the transformers head, backward, AdamW)
from the same initial weights, over the same examples (one pass, the task's
batch size), so the ratio isolates batching. Throughput = real (non-padding)
tokens / s; ratio = reference time / our time. ModernBERT's unpadding runs
only with flash-attention-2 (GPU), so it is not measured here.

"Same metrics": the task's metric (:meth:`clmdetour.tasktypes.TaskType.rescore`) on a
dev sample, predicted with length-grouped batches and with randomly ordered
padded batches by the same weights, must agree.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    DATA_DIR,
    REPO,
    BenchmarkSkipped,
    Row,
    bench_tokenizer,
    median_range,
    modernbert_config,
    paired_ratio,
    save_model,
)

GOAL = 1.5
TASKS = {"emea": "quaero/corpus", "medline": "quaero/corpus", "fracco-30": "fracco/brat_raw"}


def load_real_task(name: str, out: Path):
    """Build task ``name`` from the paper config entry on the local copy of its source; returns ``TaskData``.

    Raises:
        BenchmarkSkipped: the local source folder is absent.
    """
    from clmdetour.config import load_yaml
    from clmdetour.tasks.contract import load_task_data, write_task
    from clmdetour.tasks.prepare import build_task

    src = DATA_DIR / TASKS[name]
    if not src.exists():
        raise BenchmarkSkipped(f"real data of task {name} not found at {src}")
    spec = dict(load_yaml(REPO / "config" / "config.yaml")["tasks"][name], path=str(src))
    rows, labels_json, manifest = build_task(name, spec)
    write_task(out / name, rows, labels_json, manifest)
    return load_task_data(out / name, name), spec


def reference_collator(tokenizer, task_type: str):
    """transformers' padding collator for the task type (see module doc), chosen by what the registered
    type declares: a type whose Hub task is ``token-classification`` gets
    ``DataCollatorForTokenClassification`` (labels padded with -100), any other
    ``DataCollatorWithPadding``, with the targets cast to float for a multi-label head
    (``problem_type`` ``multi_label_classification``: ``BCEWithLogitsLoss``).

    Raises:
        clmdetour.errors.InputError: ``task_type`` is not a registered task type.
    """
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

    from clmdetour.tasktypes import get_task_type

    ttype = get_task_type(task_type)
    if ttype.hub_task == "token-classification":
        return DataCollatorForTokenClassification(tokenizer, padding=True, label_pad_token_id=-100, return_tensors="pt")
    inner = DataCollatorWithPadding(tokenizer, padding=True, return_tensors="pt")
    float_targets = getattr(ttype, "problem_type", None) == "multi_label_classification"

    def collate(examples):
        batch = inner([dict(e) for e in examples])
        if float_targets:
            batch["labels"] = batch["labels"].float()
        return batch

    return collate


def train_pass(model, loader, lr: float = 5e-5) -> tuple[float, int, int]:
    """One pass of training steps; returns (seconds, real tokens, padded positions)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    real = padded = 0
    t0 = time.perf_counter()
    for batch in loader:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        real += int(batch["attention_mask"].sum())
        padded += batch["attention_mask"].numel()
    return time.perf_counter() - t0, real, padded


def random_order_logits(model, examples, collate, batch_size: int, seed: int):
    """Logits per example (input order) from randomly ordered padded batches (the reference way)."""
    import numpy as np
    import torch

    order = np.random.default_rng(seed).permutation(len(examples))
    out = [None] * len(examples)
    model.eval()
    with torch.no_grad():
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            batch = collate([{"input_ids": examples[j]["input_ids"], "labels": examples[j]["labels"]} for j in idx])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float().numpy()
            for k, j in enumerate(idx):
                out[j] = logits[k, :len(examples[j]["input_ids"])] if logits.ndim == 3 else logits[k]
    return out


def run(workdir: Path, quick: bool = False, log=print) -> list[Row]:
    """One Row per task: ratio of real-token throughput, grouped vs random, plus the metric check."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    from clmdetour.finetune.data import PaddingCollator, make_dataloader
    from clmdetour.finetune.loop import predict_logits
    from clmdetour.finetune.model import load_classifier

    tokenizer = bench_tokenizer(workdir)
    root = Path(tempfile.mkdtemp(dir=workdir, prefix="finetune-"))
    repeats = 1 if quick else 3
    n_train = {"emea": 96, "medline": 160, "fracco-30": 32} if quick else {"emea": 192, "medline": 320, "fracco-30": 48}
    n_dev = 32 if quick else 64
    rows = []
    try:
        cfg = modernbert_config(tokenizer, hidden_size=128, num_hidden_layers=3, num_attention_heads=2,
                                intermediate_size=192, local_attention=128, max_position_embeddings=8192)
        model_dir = save_model(cfg, tokenizer, root / "base")
        for name in TASKS:
            task, spec = load_real_task(name, root / "tasks")
            max_length = min(int(spec["max_length"]), 8192)
            rng = np.random.default_rng(0)
            enc = {}
            for split, n in (("train", n_train[name]), ("dev", n_dev)):
                pick = sorted(rng.permutation(len(task.splits[split]))[:n].tolist())
                enc[split] = task.task_type.encode([task.splits[split][i] for i in pick], task.labels, tokenizer,
                                                   max_length, None, task.name)
            examples = enc["train"].examples
            bs = int(spec["finetune"]["batch_size"])
            torch.manual_seed(0)
            model0 = load_classifier(model_dir, task.task_type, task.labels, attn_implementation="sdpa")
            init = copy.deepcopy(model0.state_dict())
            ours_c = PaddingCollator(tokenizer.pad_token_id, task.task_type)
            ref_c = reference_collator(tokenizer, task.task_type.name)
            t_ours, t_ref, info = [], [], {}
            for r in range(repeats):
                model0.load_state_dict(init)
                s, real, padded = train_pass(model0, make_dataloader(examples, bs, shuffle=True, seed=r, collator=ours_c))
                t_ours.append(real / s)
                info["ours_padding_fraction"] = 1 - real / padded
                model0.load_state_dict(init)
                g = torch.Generator().manual_seed(r)
                loader = DataLoader([{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples],
                                    batch_size=bs, shuffle=True, generator=g, collate_fn=ref_c)
                s2, real2, padded2 = train_pass(model0, loader)
                t_ref.append(real2 / s2)
                info["reference_padding_fraction"] = 1 - real2 / padded2
                log(f"  {name} repeat {r + 1}/{repeats}: grouped {t_ours[-1]:.0f} tok/s, random {t_ref[-1]:.0f} tok/s "
                    f"(padding {info['ours_padding_fraction']:.1%} vs {info['reference_padding_fraction']:.1%})")
            # same metrics: same weights, dev sample predicted both ways
            dev = enc["dev"]
            a = predict_logits(model0, dev.examples, ours_c, 2 * bs)
            b = random_order_logits(model0, dev.examples, ref_c, 2 * bs, seed=0)
            m_ours, m_ref = (task.task_type.score(task.labels, task.metric, dev, x) for x in (a, b))
            diff = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
            same = abs(m_ours[task.metric] - m_ref[task.metric]) < 1e-9
            ratio, rr = paired_ratio(t_ours, t_ref)
            o, orange = median_range(t_ours)
            f, frange = median_range(t_ref)
            rows.append(Row(
                benchmark="4 fine-tuning throughput", metric=f"{name} ({task.task_type.name}) train step", unit="real tokens/s",
                ours=o, reference=f, ratio=ratio, ratio_meaning="length-grouped / random-order padded (higher is better)",
                goal=f">= {GOAL}, same metric", goal_met=ratio >= GOAL and same, repeats=repeats, ratio_range=rr,
                ours_range=orange, reference_range=frange,
                notes=f"dev {task.metric}: {m_ours[task.metric]:.4f} grouped vs {m_ref[task.metric]:.4f} random "
                      f"(max |logit diff| {diff:.1e})",
                details=dict(info, train_examples=len(examples), dev_examples=len(dev.examples), batch_size=bs,
                             max_length=max_length, mean_tokens=float(np.mean([len(e["input_ids"]) for e in examples])),
                             max_tokens=max(len(e["input_ids"]) for e in examples), same_metric=same,
                             dev_metric_ours=m_ours[task.metric], dev_metric_reference=m_ref[task.metric],
                             max_abs_logit_diff=diff, model={"hidden_size": 128, "layers": 3}, device="cpu")))
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)
