"""GPU benchmark rows of the fine-tuning grid: one grid job's training steps, the project's path against
``transformers.Trainer`` on the same model and examples.

A row is one (task shape, path) pair, run alone in its own process by :mod:`benchmarks.gpu`:

* task shapes (:data:`SHAPES`), sized as the paper config's grid jobs (``config/config.yaml``):
  ``ner-8192`` (token classification over 8,192-token windows, as EMEA's long leaflets),
  ``doc-8192`` (multilabel document classification at 8,192 tokens, as FrACCO) and
  ``cls-512`` (multiclass at 512 tokens, as MedDialog); synthetic documents of random words whose
  lengths spread from a quarter of the limit to the limit (the variable lengths a real task has);
* paths (:data:`PATHS`): ``project`` = :func:`clmdetour.finetune.loop.train_one_seed` itself (Composer
  Trainer, length-grouped batches, the attention ``evaluation.attn_implementation: auto`` chooses);
  ``flex`` = the same with FlexAttention forced, not compiled; ``flex-compile`` = FlexAttention with the
  encoder under ``torch.compile`` and every batch padded up to a bucket (a multiple of
  :data:`BUCKET_TOKENS`), so the compiled graphs are few; ``trainer`` = ``transformers.Trainer`` with
  sdpa, bf16 and its padding collator over randomly ordered examples (the reference).

Each row reports sequences/s and real (non-padding) tokens/s between step ends after ``skip`` steps,
the first step's seconds (compilation included), the number of graphs ``torch.compile`` built
(``torch._dynamo`` counters), the attention used with its reason, and peak reserved GiB.
``--dry`` runs the same code on the CPU at tiny sizes (fp32, sdpa, no compilation).
"""

from __future__ import annotations

import time
from pathlib import Path

#: task shape -> (type, max_length tokens, batch size (sequences), training documents, labels). Five batches of
#: documents: with :data:`SKIP` steps left out, three timed intervals (the spread of steady steps is small;
#: :func:`shape_spec` checks the step count at these sizes).
SHAPES = {
    "ner-8192": ("ner", 8192, 16, 80, ["O", "B-CHEM", "I-CHEM", "B-DISO", "I-DISO"]),
    "doc-8192": ("multilabel", 8192, 16, 80, [f"C{i}" for i in range(30)]),
    "cls-512": ("multiclass", 512, 16, 80, [f"S{i}" for i in range(10)]),
}
DRY_SHAPES = {"ner-8192": 256, "doc-8192": 256, "cls-512": 64}  # max_length on the CPU dry run
#: (batch, documents) on the CPU dry run
DRY_SIZES = (4, 16)
#: Steps left out of the rates (the first one pays the one-off costs).
SKIP = 2
PATHS = ("project", "flex", "flex-compile", "trainer")
#: Bucket of the compiled rows: a batch is padded up to a multiple of this many tokens (8,192 / 1,024
#: = at most 8 sequence lengths, so at most 8 graphs per batch size).
BUCKET_TOKENS = {8192: 1024, 512: 128}


def _tagged_words(rng, words: list[str], labels: list[str]) -> dict:
    """NER: the words and IOB2 tags, an entity of 1 to 3 words of a ``B-`` type of ``labels`` starting
    at a word with probability 0.1."""
    tags, j = [], 0
    while j < len(words):
        if rng.random() < 0.1:
            kind = rng.choice([t[2:] for t in labels if t.startswith("B-")])
            span = rng.randint(1, 3)
            tags += [f"B-{kind}"] + [f"I-{kind}"] * (span - 1)
            j += span
        else:
            tags.append("O")
            j += 1
    return {"words": words, "tags": tags[:len(words)]}


def _text_with_label_set(rng, words: list[str], labels: list[str]) -> dict:
    """Multi-label: the text and 1 to 3 distinct labels, sorted."""
    return {"text": " ".join(words), "labels": sorted(rng.sample(labels, rng.randint(1, 3)))}


def _text_with_label(rng, words: list[str], labels: list[str]) -> dict:
    """One label: the text and one of ``labels``."""
    return {"text": " ".join(words), "label": rng.choice(labels)}


#: The columns a synthetic row gets besides ``id``, by the label column of the type's contract
#: (:meth:`clmdetour.tasktypes.base.TaskType.label_columns`): NER's ``tags``, multi-label ``labels``,
#: one-label ``label``.
SYNTHETIC_LABELS = {"tags": _tagged_words, "labels": _text_with_label_set, "label": _text_with_label}


def synthetic_split(task_type: str, labels: list[str], n_docs: int, max_words: int, seed: int) -> list[dict]:
    """Rows in the task contract (``id`` + ``words``/``tags`` for NER, ``text`` + label(s) otherwise,
    :data:`SYNTHETIC_LABELS`), with ``max_words // 4`` to ``max_words`` words each (one to two tokens a word).

    Raises:
        ValueError: the type's label columns have no synthetic rows (similarity, multiple choice).
    """
    import random

    from clmdetour.tasktypes import get_task_type

    columns = [c for c in get_task_type(task_type).label_columns() if c in SYNTHETIC_LABELS]
    if not columns:
        raise ValueError(f"no synthetic rows for task type {task_type!r} (label columns: {SYNTHETIC_LABELS})")
    label_part = SYNTHETIC_LABELS[columns[0]]
    rng = random.Random(seed)
    vocab = [f"{a}{b}{c}" for a in "bcdfglmnprst" for b in "aeiou" for c in "lnrst"]
    rows = []
    for i in range(n_docs):
        words = [rng.choice(vocab) for _ in range(rng.randint(max(1, max_words // 4), max_words))]
        rows.append({"id": f"doc{i}", **label_part(rng, words, labels)})
    return rows


class StepClock:
    """Times of step ends (CUDA synchronised), real tokens and sequences per step, and compiled graphs.

    With ``progress`` (a JSON path), every step rewrites it atomically with :meth:`partial`, so a row stopped by
    its deadline still reports the steps it timed (:mod:`benchmarks.gpu` reads it)."""

    def __init__(self, progress: Path | None = None, skip: int = SKIP):
        import torch

        self.on_gpu = torch.cuda.is_available()
        self.start = time.perf_counter()
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.sequences: list[int] = []
        self.graphs_before = _graphs()
        self.progress, self.skip = progress, skip

    def step(self, attention_mask) -> None:
        """Record one finished step of a batch with this ``attention_mask`` ((batch, L), 1 = real token)."""
        self.step_counts(int(attention_mask.sum()), int(attention_mask.shape[0]))

    def step_counts(self, tokens: int, sequences: int) -> None:
        """Record one finished step of ``sequences`` inputs holding ``tokens`` real tokens (all its micro-batches)."""
        import torch

        if self.on_gpu:
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        self.tokens.append(tokens)
        self.sequences.append(sequences)
        if self.progress is not None:
            from clmdetour.io import atomic_write_json

            atomic_write_json(self.progress, self.partial())

    def partial(self) -> dict:
        """What is timed so far: the steps, the first step (s), peak reserved GiB, and the rates once
        ``skip + 2`` steps are timed."""
        import torch

        out = {"steps": len(self.times), "first_step_s": round(self.times[0] - self.start, 2) if self.times else None,
               "peak_memory_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 3) if self.on_gpu else None}
        if len(self.times) >= self.skip + 2:
            out.update(self.summary(self.skip))
        return out

    def summary(self, skip: int) -> dict:
        """Steady sequences/s and real tokens/s after ``skip`` steps, the first step (s), graphs compiled.

        Raises:
            ValueError: fewer than ``skip + 2`` steps were timed.
        """
        if len(self.times) < skip + 2:
            raise ValueError(f"{len(self.times)} steps timed; at least {skip + 2} needed")
        span = self.times[-1] - self.times[skip]
        return {"sequences_per_s": sum(self.sequences[skip + 1:]) / span,
                "tokens_per_s": sum(self.tokens[skip + 1:]) / span, "steps": len(self.times),
                "first_step_s": round(self.times[0] - self.start, 2),
                "graphs_compiled": _graphs() - self.graphs_before}


def _graphs() -> int:
    """Graphs ``torch.compile`` has built in this process so far (each recompilation adds one)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo compiles nothing
        return 0
    return int(counters["stats"]["unique_graphs"])


def build_task(shape: str, dry: bool) -> dict:
    """The tokenizer and the encoded splits of ``shape`` at its GPU sizes (``dry``: the CPU's), no model.

    Returns:
        ``{"tokenizer", "task", "encoded", "max_length", "batch_size"}``.
    """
    from clmdetour.tasks.contract import TaskData
    from clmdetour.tasktypes import get_task_type
    from clmdetour.tokenizer import train_tokenizer

    task_type, max_length, batch, n_docs, labels = SHAPES[shape]
    if dry:
        max_length, (batch, n_docs) = DRY_SHAPES[shape], DRY_SIZES
    texts = [" ".join(r.get("words") or r["text"].split()) for r in synthetic_split("multiclass", ["x"], 200, 40, 1)]
    tokenizer = train_tokenizer(texts, vocab_size=400, min_frequency=1)
    metric = get_task_type(task_type).default_metric
    words = int(max_length * 0.7)  # about 1.4 tokens a word: the longest documents reach the limit
    splits = {"train": synthetic_split(task_type, labels, n_docs, words, 0),
              "dev": synthetic_split(task_type, labels, 2, words // 4, 1),
              "test": synthetic_split(task_type, labels, 2, words // 4, 2)}
    task = TaskData(name=shape, task_type=get_task_type(task_type), labels=labels, metric=metric, splits=splits)
    encoded = {s: task.task_type.encode(rows, labels, tokenizer, max_length, None, shape) for s, rows in splits.items()}
    return {"tokenizer": tokenizer, "task": task, "encoded": encoded, "max_length": max_length, "batch_size": batch}


def micro_batch_plan(inputs: dict, model_sizes: dict, dry: bool, limit_gib: float):
    """The project's micro-batch plan for ``inputs`` on a model of ``model_sizes`` (parameters counted on the
    meta device): :func:`clmdetour.finetune.memory.plan_finetune_micro_batch`, bf16 activations on the GPU."""
    import torch
    from transformers import ModernBertModel

    from benchmarks.common import modernbert_config
    from clmdetour.finetune.memory import plan_finetune_micro_batch

    cfg = modernbert_config(inputs["tokenizer"], **dict(model_sizes, max_position_embeddings=max(inputs["max_length"], 512)))
    with torch.device("meta"):
        parameters = sum(p.numel() for p in ModernBertModel(cfg).parameters())
    sizes = {"parameters": parameters, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
             "num_layers": cfg.num_hidden_layers}
    return plan_finetune_micro_batch(sizes, inputs["max_length"], inputs["batch_size"], limit_gib, 4 if dry else 2)


def shape_spec(shape: str, dry: bool, model_sizes: dict, limit_gib: float = 72.0, skip: int = SKIP) -> dict:
    """Row ``shape``'s arithmetic at its sizes, without a model: inputs, steps of one epoch, the steps the clock
    needs, and the micro-batch plan.

    Returns:
        ``{"max_length", "batch_size", "train_inputs", "steps", "steps_needed", "memory"}``.
    """
    inputs = build_task(shape, dry)
    n = len(inputs["encoded"]["train"].examples)
    plan = micro_batch_plan(inputs, model_sizes, dry, limit_gib)
    return {"max_length": inputs["max_length"], "batch_size": inputs["batch_size"], "train_inputs": n,
            "steps": -(-n // inputs["batch_size"]), "steps_needed": skip + 2, "memory": plan.as_dict()}


def build_inputs(root: Path, shape: str, dry: bool, model_sizes: dict) -> dict:
    """:func:`build_task` and the model folder (random init, ``model_sizes``) under ``root``."""
    import torch
    from transformers import ModernBertForMaskedLM

    from benchmarks.common import modernbert_config

    inputs = build_task(shape, dry)
    tokenizer = inputs["tokenizer"]
    cfg = modernbert_config(tokenizer, **dict(model_sizes, max_position_embeddings=max(inputs["max_length"], 512)))
    torch.manual_seed(0)
    ModernBertForMaskedLM(cfg).save_pretrained(str(root / "model"), safe_serialization=True)
    tokenizer.save_pretrained(str(root / "model"))
    return dict(inputs, model_dir=root / "model")


def run_project(inputs: dict, path: str, dry: bool, clock: StepClock, micro_batch: int | None = None) -> dict:
    """Train one epoch with :func:`clmdetour.finetune.loop.train_one_seed` (``path``: ``project``,
    ``flex`` or ``flex-compile``), timing each Composer batch; returns the attention record."""
    import composer
    import torch

    from clmdetour.finetune import loop
    from clmdetour.finetune.data import PaddingCollator
    from clmdetour.settings import FinetuneSettings, TaskFinetuneSettings

    class Clock(composer.Callback):
        def batch_end(self, state, logger):
            clock.step(state.batch["attention_mask"])

    base_trainer, base_task_model = composer.Trainer, loop.task_model

    class TimedTrainer(base_trainer):
        def __init__(self, *a, callbacks=(), **kw):
            super().__init__(*a, callbacks=[*callbacks, Clock()], **kw)

    def compiled_task_model(*a, **kw):
        from clmdetour.modeling.causal import encoder_of

        hf, model, collator, attention = base_task_model(*a, **kw)
        torch._dynamo.config.cache_size_limit = max(64, torch._dynamo.config.cache_size_limit)
        encoder_of(hf).compile(dynamic=False)
        bucket = BUCKET_TOKENS.get(inputs["max_length"], 8)
        return hf, model, PaddingCollator(collator.pad_token_id, collator.task, pad_to_multiple_of=bucket), attention

    attn = {"project": "auto"}.get(path, "flex_attention" if not dry else "sdpa")
    settings = FinetuneSettings(first_seed=0, precision="amp_bf16", attn_implementation=attn, ner_context_tokens=0,
                                threshold_grid=None, tie_tolerance=0.0)
    finetune = TaskFinetuneSettings(lr_grid=[5e-5], epochs=1, batch_size=inputs["batch_size"], warmup_ratio=0.1,
                                    weight_decay=1e-5, betas=[0.9, 0.98], eps=1e-6)
    device, precision = loop.device_and_precision(0 if dry else 1, "amp_bf16")
    composer.Trainer = TimedTrainer
    if path == "flex-compile" and not dry:
        loop.task_model = compiled_task_model
    try:
        result = loop.train_one_seed(0, model_dir=str(inputs["model_dir"]), tokenizer=inputs["tokenizer"],
                                    task=inputs["task"], data=inputs["encoded"], finetune=finetune, lr=5e-5, settings=settings,
                                    device=device, precision=precision, micro_batch=micro_batch)
    finally:
        composer.Trainer, loop.task_model = base_trainer, base_task_model
    return result["attention"]


def run_trainer(inputs: dict, dry: bool, clock: StepClock, scratch: Path, micro_batch: int | None = None) -> dict:
    """One epoch of ``transformers.Trainer`` (sdpa, bf16 on CUDA, padding collator, random order), at the
    project's micro-batch (``gradient_accumulation_steps``: the batch stays ``batch_size``)."""
    import shutil
    import tempfile

    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from benchmarks.finetune import reference_collator
    from clmdetour.finetune.model import load_classifier

    task = inputs["task"]
    model = load_classifier(inputs["model_dir"], task.task_type, task.labels, attn_implementation="sdpa")
    rows = [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in inputs["encoded"]["train"].examples]
    collate = reference_collator(inputs["tokenizer"], task.task_type.name)

    class Clock(TrainerCallback):
        tokens = sequences = 0

        def on_step_end(self, args, state, control, **kwargs):
            clock.step_counts(Clock.tokens, Clock.sequences)
            Clock.tokens = Clock.sequences = 0

    class CountingTrainer(Trainer):
        """Counts each micro-batch as it is trained (the data loader collates ahead of the step)."""

        def training_step(self, model, inputs, *a, **kw):
            Clock.tokens += int(inputs["attention_mask"].sum())
            Clock.sequences += int(inputs["attention_mask"].shape[0])
            return super().training_step(model, inputs, *a, **kw)

    micro = micro_batch or inputs["batch_size"]
    out = Path(tempfile.mkdtemp(dir=scratch))
    args = TrainingArguments(output_dir=str(out), num_train_epochs=1, per_device_train_batch_size=micro,
                             gradient_accumulation_steps=inputs["batch_size"] // micro,
                             learning_rate=5e-5, warmup_steps=1, weight_decay=1e-5, adam_beta2=0.98, adam_epsilon=1e-6,
                             logging_strategy="no", save_strategy="no", report_to=[], use_cpu=dry,
                             bf16=not dry and torch.cuda.is_available(), dataloader_num_workers=0, disable_tqdm=True,
                             remove_unused_columns=False, seed=0)
    try:
        CountingTrainer(model=model, args=args, train_dataset=rows, data_collator=collate, callbacks=[Clock()]).train()
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"implementation": "sdpa", "reason": "transformers.Trainer reference, sdpa"}


def finetune_row(shape: str, path: str, dry: bool, model_sizes: dict, skip: int = SKIP, scratch: Path | None = None,
                 limit_gib: float = 72.0) -> dict:
    """Measure one fine-tuning row in this process (see the module doc); returns its figures. Both paths train
    at the project's micro-batch plan under ``limit_gib`` (recorded as ``memory``). With ``scratch``, the
    row's folder (model, Trainer output) is made there and ``scratch/partial.json`` follows every step.

    Raises:
        KeyError: an unknown ``shape`` or ``path``.
    """
    import shutil
    import tempfile

    import torch

    if shape not in SHAPES or path not in PATHS:
        raise KeyError(f"unknown fine-tuning row {shape}/{path}: shapes {list(SHAPES)}, paths {list(PATHS)}")
    root = Path(tempfile.mkdtemp(prefix="clmdetour-gpu-ft-", dir=scratch))
    try:
        inputs = build_inputs(root, shape, dry, model_sizes)
        plan = micro_batch_plan(inputs, model_sizes, dry, limit_gib)
        if torch.cuda.is_available() and not dry:
            torch.cuda.reset_peak_memory_stats()
        clock = StepClock(progress=None if scratch is None else Path(scratch) / "partial.json", skip=skip)
        if path == "trainer":
            attention = run_trainer(inputs, dry, clock, root, plan.micro_batch_sequences)
        else:
            attention = run_project(inputs, path, dry, clock, plan.micro_batch_sequences)
        row = clock.summary(skip)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    train = inputs["encoded"]["train"].examples
    row.update(task_type=inputs["task"].task_type.name, max_length=inputs["max_length"], batch_size=inputs["batch_size"],
               micro_batch_sequences=plan.micro_batch_sequences, memory=plan.as_dict(),
               train_inputs=len(train), mean_input_tokens=round(sum(len(e["input_ids"]) for e in train) / len(train), 1),
               attention=attention.get("implementation"), attention_reason=attention.get("reason"),
               compiled=path == "flex-compile" and not dry,
               peak_memory_gib=(round(torch.cuda.max_memory_reserved() / 2 ** 30, 3)
                                if torch.cuda.is_available() and not dry else None))
    return row
