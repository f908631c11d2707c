"""What a fine-tuning job trains on, read and tokenised once and shared by its seeds and grid points.

:func:`prepare_task_inputs` checks the task's settings against its prepared folder, lets the task type add its
tokens (a relation task's markers), and encodes every split at the job's ``max_length`` (the lowest of the
task's, the model's and a reference model's declared limit); :func:`hyperparameters_record` is the records'
``hyperparameters``; :func:`job_memory_plan` the micro-batch the job runs under.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from clmdetour.finetune.memory import encoder_sizes, plan_finetune_micro_batch
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.contract import SPLITS, TaskData, TaskDataError, load_task_data
from clmdetour.tasks.settings import TaskSettings
from clmdetour.tasktypes import Encoded, TokenizerAdditions

log = logging.getLogger("clmdetour.finetune")


@dataclass
class PreparedTask:
    """A task read and tokenised once for a job (shared by its seeds and grid points)."""

    data: TaskData
    tokenizer: object
    encoded: dict[str, Encoded]
    max_length: int  # tokens per model input: min(task max_length, model limit, reference limit)
    model_limit: int  # the model's own token limit
    info: dict  # the record's ``data`` section: examples, model inputs, truncated (+ the type's split_counts), encode_s
    # what the task type added to the tokenizer (TaskType.prepare_tokenizer: a relation task's markers)
    additions: TokenizerAdditions = field(default_factory=TokenizerAdditions)


def prepare_task_inputs(task: str, task_dir: str | Path, task_settings: TaskSettings, model_dir: str | Path,
                        settings: FinetuneSettings, model_max_length: int | None = None) -> PreparedTask:
    """Check the task's settings against its folder, then tokenise every split once.

    The task type prepares the job's tokenizer first (:meth:`clmdetour.tasktypes.TaskType.prepare_tokenizer`:
    e.g. a relation task's entity markers become special tokens), then encodes each split
    (:meth:`clmdetour.tasktypes.TaskType.encode`: inputs of at most ``max_length`` tokens, specials
    included, no token_type_ids, no padding) and checks it (:meth:`clmdetour.tasktypes.TaskType.check_encoded`:
    e.g. a NER split whose gold entities no prediction can reach gets a warning).

    Args:
        task_settings: the task's fine-tuning keys (:class:`clmdetour.tasks.settings.TaskSettings`).

    Raises:
        TaskDataError: the folder's type disagrees with ``tasks.{task}.type``, or bad task data.
        InputError: ``max_length`` leaves no room for text.
        ValueError: a token the type adds does not encode to one token (e.g. a marker).
    """
    from transformers import AutoConfig, AutoTokenizer

    from clmdetour.finetune.model import model_token_limit

    folder = load_task_data(task_dir, task)
    ttype = folder.task_type
    if ttype is not task_settings.type:
        raise TaskDataError(f"{Path(task_dir) / 'labels.json'}: type {ttype.name!r} but tasks.{task}.type is "
                            f"{task_settings.type.name!r}")
    data = dataclasses.replace(folder, metric=task_settings.metric)  # the config's metric, resolved (never null)
    t0 = time.perf_counter()
    from clmdetour.modeling.folders import check_model_folder

    check_model_folder(model_dir)  # any architecture: reference models are BERT, CamemBERT, ModernBERT
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    additions = ttype.prepare_tokenizer(tokenizer, data)  # nothing unless the type adds tokens (labels.json marker_tokens)
    limit = model_token_limit(AutoConfig.from_pretrained(str(model_dir)), tokenizer)
    max_length = min(task_settings.max_length, limit, model_max_length or limit)
    encoded = {s: ttype.encode(data.splits[s], data.labels, tokenizer, max_length, settings, data.name) for s in SPLITS}
    info = {"examples": {s: len(data.splits[s]) for s in SPLITS},
            "model_inputs": {s: len(encoded[s].examples) for s in SPLITS},
            "truncated": {s: encoded[s].truncated for s in SPLITS}}
    counts = {s: ttype.split_counts(encoded[s]) for s in SPLITS}
    for key in counts[SPLITS[0]]:
        info[key] = {s: counts[s][key] for s in SPLITS}
    for s in SPLITS:
        ttype.check_encoded(task, s, encoded[s])
    warn_truncated(task, info, max_length, ttype.truncated_unit)
    if additions.tokens:
        info[additions.record_key] = dict(additions.tokens)
    info["encode_s"] = round(time.perf_counter() - t0, 3)
    return PreparedTask(data, tokenizer, encoded, max_length, limit, info, additions)


def warn_truncated(task: str, info: dict, max_length: int, unit: str) -> bool:
    """One log warning per split whose inputs were cut at ``max_length`` tokens (``info``: the record's
    ``data`` section, ``truncated`` and ``model_inputs`` per split; ``unit``: what ``truncated`` counts,
    the type's ``truncated_unit``), with the share of the split's model inputs; returns whether it warned."""
    warned = False
    for s in SPLITS:
        n, total = info["truncated"][s], info["model_inputs"][s]
        if n:
            log.warning("task %s: %d %s of %s cut at max_length %d tokens (%d model inputs, %.1f %%); raise "
                        "tasks.%s.max_length (within the model's limit) to keep them whole", task, n, unit, s,
                        max_length, total, 100 * n / max(total, 1), task)
            warned = True
    return warned


def hyperparameters_record(task: TaskSettings, prepared: PreparedTask, settings: FinetuneSettings, precision: str) -> dict:
    """The record's ``hyperparameters``: the task's ``finetune`` keys plus what the job resolved
    (token limits, precision, NER context, attention, optimizer, scheduler, model selection)."""
    return dict(task.finetune.as_dict(), max_length=prepared.max_length, task_max_length=task.max_length,
                model_token_limit=prepared.model_limit, precision=precision,
                ner_context_tokens=settings.ner_context_tokens,
                attn_implementation=settings.attn_implementation,
                optimizer="composer DecoupledAdamW semantics (betas, eps, weight_decay above; torch's fused AdamW kernel: training.optim), no decay on biases/norms",
                scheduler="linear warm-up, linear decay to 0", model_selection=f"best dev {prepared.data.metric} over epochs")



def job_memory_plan(model_dir, prepared: PreparedTask, task_settings: TaskSettings, limit_gib: float, precision: str):
    """The job's micro-batch plan (:func:`clmdetour.finetune.memory.plan_finetune_micro_batch`) at its resolved
    ``max_length`` and the task's batch size; bf16/fp16 activations under an ``amp_`` precision."""
    return plan_finetune_micro_batch(encoder_sizes(model_dir), prepared.max_length,
                                     task_settings.finetune.batch_size, limit_gib,
                                     2 if precision.startswith("amp_") else 4)
