"""The pipeline's wiring in one place: the paths of the contract, every target list, and the
rule names a variant's target must not shadow.

The rule files (``workflow/rules/*.smk``) declare rules; which files a stage reads and writes, and
which targets ``all`` and the named targets stand for, come from here, as functions of the
validated config (:class:`Pipeline`). Nothing here looks a rule up by name or by output path,
and nothing depends on the order of the ``include:`` lines: each stage's presence follows from
the config alone (no task -> no table; no licence -> no release). Paths are relative to the
working directory, as in ``../shared/DESIGN.md``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import ConfigError, phase1_owner, resolve_phase, variant_target

# ---------------------------------------------------------------- paths of the contract

CORPUS_DIR = "results/corpus"
CORPUS_MANIFEST = f"{CORPUS_DIR}/manifest.json"
CORPUS_VALID = f"{CORPUS_DIR}/valid"
DEMO_CORPUS = "results/demo/corpus.jsonl"
DEMO_BASE_CORPUS = "results/demo/base_corpus.jsonl"
DEMO_TASKS_ROOT = "results/demo/tasks"
HELD_APART_CORPUS = "results/base/held_apart.jsonl"
BUILT_BASE_DIR = "results/base/model"
RANDOM_INIT_DIR = "results/random-init/model"
EVAL_TABLE = "results/eval_table.tsv"
EVAL_RUNS = "results/eval_runs.tsv"
EVAL_TABLE_MD = "results/eval_table.md"
EVAL_TABLE_FILES = {"table": EVAL_TABLE, "runs": EVAL_RUNS, "md": EVAL_TABLE_MD}
LAYER_DRIFT_TABLE = "results/analysis/layer_drift.tsv"
CONFIG_RECORD = "results/config_used.yaml"
PLOT_EXTS = ("png", "svg")
ANALYSIS_FIGURES = ("layer_drift", "layer_drift_modules", "training_curves")
EVAL_FIGURE = "eval_scores"

# The pretraining chain (corpus -> base -> phase 1 -> decay) is the DAG's critical path: its
# jobs go before ready fine-tunes, so that a variant's fine-tunes are not all left for the end.
# The reference models' jobs (random_init, fetch_model) share it: a priority-0 job waits until no
# fine-tune is ready (Snakemake does not pass priority on to a job's inputs), which left random-init's
# 6-minute FrACCO-30 job of real-small to the end.
PRETRAIN_PRIORITY = 10

# Every rule the rule files declare by a fixed name. Per-variant targets (pretrain_{v}, {v},
# release_{v}) and the fine-tuning rules of a config with several seed lists are added by
# Pipeline.rule_names(); tests/test_pipeline_dags.py compares the two with workflow.rules.
STATIC_RULES = frozenset({
    "all", "pretrain_all", "eval_all", "analysis_all", "release_all",
    "demo_corpus", "fetch_dataset", "prepare_corpus", "held_apart_corpus", "build_base",
    "pretrain_phase1", "pretrain_decay",
    "fetch_url", "fetch_task_hub", "demo_task_source", "demo_tasks", "prepare_task",
    "fetch_model", "random_init", "eval_table",
    "layer_drift", "layer_drift_table", "plot_layer_drift", "plot_training_curves", "plot_eval_scores",
    "config_used", "stage_release", "push_release",
})
# Declared only when the config builds its base model (base_model.build: demo, real-small).
BASE_BUILD_RULES = frozenset({"held_apart_corpus", "build_base"})


def phase_dir(variant: str, phase: str) -> str:
    """``results/pretrain/{variant}/{phase}``: a phase's model and records."""
    return f"results/pretrain/{variant}/{phase}"


def phase_model(variant: str, phase: str) -> str:
    """The HF model folder a phase writes."""
    return f"{phase_dir(variant, phase)}/model"


def phase_run(variant: str, phase: str) -> str:
    """The phase's ``run.json`` record."""
    return f"{phase_dir(variant, phase)}/run.json"


def final_model_dir(variant: str) -> str:
    """The final (post-decay) model of a variant."""
    return phase_model(variant, "decay")


def task_dir(task: str) -> str:
    """A prepared task: ``train``/``dev``/``test``, ``labels.json``, ``manifest.json``."""
    return f"results/tasks/{task}"


def seed_json(model: str, task: str, seed: int) -> str:
    """One fine-tuning seed's record."""
    return f"results/eval/{model}/{task}/seed{seed}.json"


def layer_drift_path(variant: str) -> str:
    """A variant's per-layer drift table."""
    return f"results/analysis/{variant}/layer_drift.tsv"


def release_dir(variant: str) -> str:
    """A variant's staged Hub release (model, tokenizer, card)."""
    return f"results/release/{variant}"


def fetched_model_dir(key: str) -> str:
    """A model fetched from the Hub (the base model or a reference model)."""
    return f"resources/models/{key}"


def dataset_dir(name: str) -> str:
    """A fetched dataset (a Hub corpus source, or a task's url / hub download)."""
    return f"resources/datasets/{name}"


def alternation(names) -> str:
    """A wildcard constraint matching exactly ``names`` (regex-escaped); one that matches nothing when empty."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def json_param(fn):
    """A params function returning ``fn(wildcards)`` as canonical JSON (sorted keys)."""
    return lambda wildcards: json.dumps(fn(wildcards), sort_keys=True)


def phase_resources(cluster: dict) -> dict:
    """Snakemake resources of a pretraining phase job, from the ``cluster`` config section.

    One node: ``gpu`` (and ``gpu_model``), ``cpus_per_task`` = GPUs x ``cpus_per_gpu`` (or
    ``cpu_threads`` on CPU), ``mem_mb`` = GPUs x ``mem_mb_per_gpu`` (8,000 MB on CPU), ``runtime``
    in minutes. Several nodes: sbatch ``--nodes=K --ntasks=K`` (one launcher per node;
    ``cpus_per_task`` and ``mem_mb`` per node) through the SLURM executor plugin's ``mpi`` route,
    whose job script runs the rule's shell itself, so that its ``srun`` spans every node (otherwise
    the plugin wraps the job in ``srun -n1``, which SLURM confines to one node); GPUs as GRES, which
    counts per node (the plugin's ``gpu`` is a total per job), with ``tasks_per_gpu: 0`` so that the
    plugin does not turn ``tasks`` into ``--ntasks-per-gpu``. Checked on a real 2-node allocation by
    tests/test_slurm_cluster.py.
    """
    gpus, nodes = cluster["pretrain_gpus"], cluster["pretrain_nodes"]
    res = {
        "cpus_per_task": gpus * cluster["cpus_per_gpu"] if gpus else cluster["cpu_threads"],
        "mem_mb": gpus * cluster["mem_mb_per_gpu"] if gpus else 8000,
        "runtime": cluster["pretrain_runtime_min"],
    }
    if nodes == 1:
        res["gpu"] = gpus
        if gpus and cluster.get("gpu_model"):
            res["gpu_model"] = cluster["gpu_model"]
        return res
    res.update(nodes=nodes, tasks=nodes, mpi="srun")
    if gpus:
        res["gres"] = f"gpu:{cluster['gpu_model']}:{gpus}" if cluster.get("gpu_model") else f"gpu:{gpus}"
        res["tasks_per_gpu"] = 0
    return res


def finetune_rule_name(seeds: tuple[int, ...], groups: int) -> str:
    """``finetune`` when every task has the same seed list (``groups == 1``), else one rule per list."""
    return "finetune" if groups == 1 else f"finetune_{len(seeds)}seeds_from{seeds[0]}"


class Pipeline:
    """What a validated config makes of the pipeline: its variants, models, grid and targets.

    Args:
        config: the validated config (``clmdetour.config.validate_config``).
        left_out_tasks: user-provided tasks left out of the grid (``tasks.prepare.left_out_tasks``).

    Raises:
        ConfigError: a bad evaluation section (``finetune.grid``), a task spec that does not resolve
            (``tasks.prepare.resolve_task_spec``), two tasks fetching one dataset differently, or a
            variant whose target name is also the name of a rule.
    """

    def __init__(self, config: dict, left_out_tasks: dict | None = None):
        from clmdetour.corpus.decontaminate import decontamination_tasks
        from clmdetour.finetune.grid import eval_models, task_names, task_seeds
        from clmdetour.tasks.prepare import TaskError, resolve_task_spec

        self.config = config
        self.left_out_tasks = dict(left_out_tasks or {})
        self.cluster = config["cluster"]
        self.corpus = config["corpus"]
        self.hub_sources = {s["name"]: s for s in self.corpus["sources"] if s["format"] == "hub"}
        self.demo_sources = [s for s in self.corpus["sources"] if s["format"] == "demo"]
        # corpus.decontaminate_against resolved (`all`: every configured task with its files), and a
        # warning naming the configured tasks left undecontaminated ('' when none)
        self.decontaminate_against, self.decontamination_warning = decontamination_tasks(
            config, self.left_out_tasks)
        try:
            self.task_specs = {name: resolve_task_spec(name, spec)
                               for name, spec in (config.get("tasks") or {}).items()}
        except TaskError as e:
            raise ConfigError(str(e)) from None
        self.url_datasets = self._fetched_datasets("url")
        self.hub_datasets = self._fetched_datasets("hub")
        self.variants = list(config["pretraining"]["variants"])
        self.phase1_owners = [v for v in self.variants if phase1_owner(config, v) == v]
        self.demo = config["base_model"]["build"] is not None
        self.base_key = config["base_model"]["key"]
        self.eval_models = eval_models(config)
        self.eval_tasks = task_names(config)
        self.task_seeds = {t: task_seeds(config, t) for t in self.eval_tasks}
        groups: dict[tuple[int, ...], list[str]] = {}
        for t in self.eval_tasks:
            groups.setdefault(tuple(self.task_seeds[t]), []).append(t)
        self.seed_groups = groups  # seed list -> tasks fine-tuned by one rule
        for v in self.variants:
            if variant_target(v) in STATIC_RULES or f"pretrain_{variant_target(v)}" in STATIC_RULES \
                    or variant_target(v) in self.finetune_rules():
                raise ConfigError(f"pretraining.variants.{v}: name collides with the rule "
                                  f"{variant_target(v)!r}; choose another name")

    # ------------------------------------------------------------ models

    def base_model_dir(self) -> str:
        """Folder of the base model: the built demo / real-small model, a local folder, or the Hub copy."""
        if self.demo:
            return BUILT_BASE_DIR
        if self.config["base_model"]["path"]:
            return self.config["base_model"]["path"]
        return fetched_model_dir(self.base_key)

    def phase_input_model(self, variant: str, phase: str) -> str:
        """Model a phase starts from: the base model (phase 1) or its phase-1 owner's model (decay)."""
        if phase == "phase1":
            return self.base_model_dir()
        return phase_model(phase1_owner(self.config, variant), "phase1")

    def reference_model_dir(self, model: str) -> str:
        """Folder of a reference model key: its local path, the random-init build, or the Hub copy.

        Raises:
            ConfigError: ``model`` is not a variant, the base model or a reference model.
        """
        refs = self.config.get("reference_models") or {}
        if model not in refs:
            raise ConfigError(f"model {model!r} is neither a variant ({self.variants}), the base model "
                              f"({self.base_key!r}) nor a reference model ({sorted(refs)})")
        spec = refs[model]
        if spec.get("path"):
            return spec["path"]
        if spec.get("build") == "random-init":
            return RANDOM_INIT_DIR
        return fetched_model_dir(model)

    def model_dir(self, model: str) -> str:
        """Folder of any evaluated model key (variant, base model or reference model)."""
        if model in self.variants:
            return final_model_dir(model)
        if model == self.base_key:
            return self.base_model_dir()
        return self.reference_model_dir(model)

    # ------------------------------------------------------------ target lists

    def pretrain_outputs(self, variant: str) -> list[str]:
        """Every pretraining output a variant needs: its final model and both phase records."""
        owner = phase1_owner(self.config, variant)
        return [final_model_dir(variant), phase_run(variant, "decay"), phase_run(owner, "phase1")]

    def model_eval_outputs(self, model: str) -> list[str]:
        """Every seed record of one model over the grid's tasks ([] outside ``evaluation.models``)."""
        if model not in self.eval_models:
            return []
        return [seed_json(model, t, s) for t in self.eval_tasks for s in self.task_seeds[t]]

    def eval_grid_outputs(self) -> list[str]:
        """Every seed record of the grid (models x tasks x seeds)."""
        return [p for m in self.eval_models for p in self.model_eval_outputs(m)]

    def eval_table_outputs(self) -> list[str]:
        """The three table files; [] when the grid has no task."""
        return list(EVAL_TABLE_FILES.values()) if self.eval_tasks else []

    def analysis_figures(self) -> list[str]:
        """The report figures (the evaluation scores only when there is a table)."""
        return [*ANALYSIS_FIGURES, *([EVAL_FIGURE] if self.eval_tasks else [])]

    def analysis_outputs(self) -> list[str]:
        """The combined drift table, every figure in every format, the config record."""
        return [LAYER_DRIFT_TABLE, CONFIG_RECORD,
                *[f"results/plots/{f}.{ext}" for f in self.analysis_figures() for ext in PLOT_EXTS]]

    def release_outputs(self, variant: str) -> list[str]:
        """A variant's staged release for ``all``: once ``release.licence`` is set, the grid has a
        table and the variant is evaluated (its card cites the grid); ``release_{v}`` stages any variant."""
        if not self.config["release"]["licence"] or not self.eval_tasks or variant not in self.eval_models:
            return []
        return [release_dir(variant)]

    def variant_outputs(self, variant: str) -> list[str]:
        """The ``{v}`` target: the variant's pretraining and its fine-tuning records."""
        return [*self.pretrain_outputs(variant), *self.model_eval_outputs(variant)]

    def all_targets(self) -> list[str]:
        """Inputs of ``all``: every final model, the table, the analysis and the staged releases."""
        return [*[p for v in self.variants for p in self.pretrain_outputs(v)], *self.eval_table_outputs(),
                *self.analysis_outputs(), *[p for v in self.variants for p in self.release_outputs(v)]]

    # ------------------------------------------------------------ rule names

    def finetune_rules(self) -> dict[str, list[str]]:
        """Fine-tuning rule name -> its tasks (one rule per distinct seed list)."""
        n = len(self.seed_groups)
        return {finetune_rule_name(seeds, n): tasks for seeds, tasks in self.seed_groups.items()}

    def rule_names(self) -> set[str]:
        """Every rule the rule files declare for this config: :data:`STATIC_RULES` (less
        :data:`BASE_BUILD_RULES` when the base model is not built), the per-variant targets and
        the fine-tuning rules (none without a task)."""
        per_variant = {name for v in self.variants
                       for name in (f"pretrain_{variant_target(v)}", variant_target(v), f"release_{variant_target(v)}")}
        static = STATIC_RULES if self.demo else STATIC_RULES - BASE_BUILD_RULES
        return set(static) | per_variant | set(self.finetune_rules())

    # ------------------------------------------------------------ params slices

    def phase1_objectives(self) -> dict[str, str]:
        """Phase-1 objective (clm / mlm) of every variant (the plots' line styles)."""
        return {v: resolve_phase(self.config, v, "phase1")["objective"] for v in self.variants}

    def training_log_runs(self) -> list[list[str]]:
        """(variant, phase) of every phase that trains (a ``phase1_from`` variant owns no phase 1)."""
        return [[v, "phase1"] for v in self.phase1_owners] + [[v, "decay"] for v in self.variants]

    # ------------------------------------------------------------ task data (tasks.smk)

    def _fetched_datasets(self, kind: str) -> dict[str, dict]:
        """Dataset name -> spec of the tasks fetched by ``kind`` (``url`` / ``hub``).

        Raises:
            ConfigError: two tasks share a dataset but not its url / sha256 (hub id / config / revision).
        """
        out: dict[str, dict] = {}
        keys = ("url", "sha256") if kind == "url" else ("hub_id", "hub_config", "revision")
        for name, spec in self.task_specs.items():
            if spec["source"] != kind or not spec["fetch"]:
                continue  # a hub task with a local path is read there: no fetch
            ds = spec["dataset"]
            if ds in out and any(out[ds][k] != spec[k] for k in keys):
                raise ConfigError(f"tasks.{name}: dataset {ds!r} is fetched by another task with a different {keys}")
            out[ds] = spec
        return out

    def task_data_params(self, wildcards) -> dict:
        """prepare_task's only params: the part of a task's spec that shapes its data (editing
        ``finetune``, ``seeds``, ``max_length`` or ``instructions`` never reruns it)."""
        training_keys = ("finetune", "seeds", "max_length", "instructions")
        return {k: v for k, v in self.task_specs[wildcards.task].items() if k not in training_keys}

    def _demo_source_dir(self, path: str) -> str | None:
        from clmdetour.demo.tasks import DEMO_SOURCES

        parts, root = Path(path).parts, Path(DEMO_TASKS_ROOT).parts
        if self.demo and parts[: len(root)] == root and len(parts) > len(root) and parts[len(root)] in DEMO_SOURCES:
            return str(Path(*parts[: len(root) + 1]))
        return None

    def task_source_input(self, wildcards) -> dict:
        """prepare_task's input: the fetched folder, the demo source folder, or the task's local files.

        Raises:
            WorkflowError: an unknown task, or missing source files (for a ``user`` task, naming the
                task, the files and their format), so that only the targets needing it fail, before any job.
        """
        from clmdetour.tasks.prepare import expected_files, format_description, missing_files, user_task_message

        task = wildcards.task
        if task not in self.task_specs:
            raise WorkflowError(f"task {task!r} is not in config tasks; tasks: {sorted(self.task_specs)}")
        spec = self.task_specs[task]
        if spec["source"] in ("url", "hub") and spec["fetch"]:
            return {"source": dataset_dir(spec["dataset"])}
        demo_dir = self._demo_source_dir(spec["path"])
        if demo_dir:
            return {"source": demo_dir}
        missing = missing_files(spec)
        if missing:
            if spec["source"] == "user":
                raise WorkflowError(user_task_message(task, spec, missing))
            raise WorkflowError(f"task {task!r}: source files missing: {missing}; expected: {format_description(spec)}")
        return {"source": expected_files(spec)}

    # ------------------------------------------------------------ corpus and base model (corpus.smk, pretrain.smk)

    def check_decontamination_tasks(self) -> None:
        """Stop planning the corpus (and all it feeds) when a task to decontaminate against is missing,
        whatever ``evaluation.missing_user_tasks`` says: a corpus silently built without the
        decontamination the config asks for would leak that task's dev/test text.

        Raises:
            WorkflowError: naming the task, its missing files and the two ways out.
        """
        from clmdetour.tasks.prepare import missing_files, user_task_message

        for task in self.decontaminate_against:
            spec = self.task_specs[task]
            missing = missing_files(spec) if spec["source"] == "user" else []
            if missing:
                listed = "lists" if self.corpus["decontaminate_against"] != "all" else "(all) includes"
                raise WorkflowError(
                    f"corpus.decontaminate_against {listed} task {task!r}, whose files are missing, so results/corpus/ "
                    f"cannot be built: {user_task_message(task, spec, missing)}; provide them, or remove {task!r} "
                    "from corpus.decontaminate_against (and say so when you report results)")

    def hub_source_dirs(self) -> dict[str, str]:
        """Hub corpus source name -> its fetched folder."""
        return {name: dataset_dir(name) for name in self.hub_sources}

    def corpus_inputs(self, wildcards) -> dict:
        """prepare_corpus's input: the base tokenizer, the demo text, the Hub sources, the tasks to
        decontaminate against (checked first: :meth:`check_decontamination_tasks`)."""
        self.check_decontamination_tasks()
        inputs = {"tokenizer": self.base_model_dir()}
        if self.demo_sources:
            inputs["demo_corpus"] = DEMO_CORPUS
        inputs["hub"] = list(self.hub_source_dirs().values())
        inputs["tasks"] = [task_dir(task) for task in self.decontaminate_against]
        return inputs

    def held_apart_inputs(self, wildcards) -> dict:
        """held_apart_corpus's input: the Hub sources and the tasks its text is decontaminated against."""
        self.check_decontamination_tasks()
        return {"hub": list(self.hub_source_dirs().values()),
                "tasks": [task_dir(task) for task in self.decontaminate_against]}

    def base_corpus_path(self) -> str:
        """Texts of the built base model: the generated demo documents or the held-apart slice of the sources."""
        return DEMO_BASE_CORPUS if self.config["base_model"]["build"]["corpus"] == "demo" else HELD_APART_CORPUS

    def phase_section_json(self, variant: str, phase: str) -> str:
        """A phase's resolved section (``config.resolve_phase``) as canonical JSON: its job's only training params."""
        return json.dumps(resolve_phase(self.config, variant, phase), sort_keys=True)

    # ------------------------------------------------------------ evaluation (evaluate.smk)

    def model_input(self, wildcards) -> str:
        """A fine-tune job's model folder (:meth:`model_dir` of ``wildcards.model``).

        Raises:
            WorkflowError: the model key is unknown.
        """
        try:
            return self.model_dir(wildcards.model)
        except ConfigError as e:
            raise WorkflowError(str(e)) from None

    def finetune_task_input(self, wildcards) -> str:
        """A fine-tune job's prepared task folder.

        Raises:
            WorkflowError: the task is not configured (naming the configured ones).
        """
        from clmdetour.finetune.grid import finetune_task_params

        try:
            finetune_task_params(self.config, wildcards.task)
        except ConfigError as e:
            raise WorkflowError(str(e)) from None
        return task_dir(wildcards.task)

    def finetune_work(self, task: str) -> float:
        """A fine-tune job's work estimate: epochs x learning-rate grid points x seeds x ``max_length``.

        Units: token positions per training example, summed over every run of the job (an upper
        bound: inputs may be shorter than ``max_length``); it orders jobs, nothing more.

        Raises:
            ConfigError: unknown task, or a missing key (:func:`clmdetour.finetune.grid.finetune_task_params`).
        """
        from clmdetour.finetune.grid import finetune_task_params

        params = finetune_task_params(self.config, task)
        ft = params["finetune"]
        return float(ft["epochs"]) * len(ft["lr_grid"]) * int(params["seeds"]) * int(params["max_length"])

    def finetune_priority(self, wildcards) -> float:
        """Scheduling priority of a fine-tune job (the rule's ``priority``): longest first.

        Jobs with more work (:meth:`finetune_work`) start first, so that the grid does not end on one
        long job with the other cores idle (longest-processing-time-first list scheduling, Graham
        1969); every fine-tune stays below the pretraining chain (``PRETRAIN_PRIORITY``): the job of
        most work in the evaluation grid gets ``PRETRAIN_PRIORITY - 1``, the others proportionally less.

        Returns:
            A float in ``[0, PRETRAIN_PRIORITY - 1]``; 0 for a task that is not configured (its
            input function names the error).
        """
        try:
            work = self.finetune_work(wildcards.task)
        except ConfigError:
            return 0.0
        most = max(self._grid_finetune_work, work)
        return (PRETRAIN_PRIORITY - 1) * work / most if most > 0 else 0.0

    @functools.cached_property
    def _grid_finetune_work(self) -> float:
        """The largest :meth:`finetune_work` in the evaluation grid (0 without tasks), computed once."""
        return max((self.finetune_work(t) for t in self.eval_tasks), default=0.0)

    def hub_spec(self, wildcards) -> dict:
        """fetch_model's params: Hub id and revision of a fetchable model (a Hub reference model, or
        the base model when it is not built or local).

        Raises:
            WorkflowError: the key names no Hub model of the config (listing the fetchable ones).
        """
        model = wildcards.model
        refs = self.config.get("reference_models") or {}
        base = self.config["base_model"]
        base_fetched = bool(base.get("hub_id")) and not self.demo and not base.get("path")
        if model in refs and refs[model].get("hub_id"):
            return {"hub_id": refs[model]["hub_id"], "revision": refs[model]["revision"]}
        if model == self.base_key and base_fetched:
            return {"hub_id": base["hub_id"], "revision": base["revision"]}
        fetchable = [k for k, v in refs.items() if v.get("hub_id")] + ([self.base_key] if base.get("hub_id") and not self.demo else [])
        raise WorkflowError(f"{fetched_model_dir(model)}: {model!r} is not a Hub model of the config; fetchable: {fetchable}")

    def _random_init_models(self) -> dict[str, dict]:
        """Reference models built untrained (``build: random-init``), key -> spec."""
        refs = self.config.get("reference_models") or {}
        return {k: v for k, v in refs.items() if v.get("build") == "random-init"}

    def random_init_seed(self) -> int:
        """Seed of the ``random-init`` reference model (0 when none sets one)."""
        return next((v.get("seed", 0) for v in self._random_init_models().values()), 0)

    def control_model(self) -> str | None:
        """The evaluated ``random-init`` reference model (the table's positive control), or None."""
        return next((k for k in self._random_init_models() if k in self.eval_models), None)

    def eval_task_dirs(self) -> dict[str, str]:
        """Grid task -> its prepared folder, in sorted task order."""
        return {t: task_dir(t) for t in sorted(self.eval_tasks)}

    def eval_table_records(self, wildcards) -> list[str]:
        """eval_table's seed records: every expected one; with ``evaluation.allow_missing`` those that
        exist, so that the table never waits for (or fails on) a missing run."""
        if self.config["evaluation"]["allow_missing"]:
            return [p for p in self.eval_grid_outputs() if Path(p).exists()]
        return self.eval_grid_outputs()

    def eval_table_task_dirs(self, wildcards) -> list[str]:
        """eval_table's task folders (trivial baseline, document groups); with allow_missing those that exist."""
        dirs = list(self.eval_task_dirs().values())
        return [d for d in dirs if Path(d).exists()] if self.config["evaluation"]["allow_missing"] else dirs

    def task_metrics(self, wildcards) -> dict[str, str]:
        """Grid task -> its metric (``finetune.grid.finetune_task_params``)."""
        from clmdetour.finetune.grid import finetune_task_params

        return {t: finetune_task_params(self.config, t)["metric"] for t in sorted(self.eval_tasks)}

    # ------------------------------------------------------------ analysis (analysis.smk)

    def layer_drift_inputs(self, wildcards) -> dict:
        """layer_drift's input: the base model, the variant's phase-1 model and record (its owner's for
        ``phase1_from``), its decay model and record, and the held-out corpus."""
        variant = wildcards.variant
        owner = phase1_owner(self.config, variant)
        return {"base": self.base_model_dir(), "phase1": phase_model(owner, "phase1"),
                "phase1_run": phase_run(owner, "phase1"), "decay": phase_model(variant, "decay"),
                "decay_run": phase_run(variant, "decay"), "valid": CORPUS_VALID}

    def eval_runs_input(self, wildcards) -> str:
        """plot_eval_scores's input.

        Raises:
            WorkflowError: the grid has no task, so no run table is written.
        """
        if not self.eval_tasks:
            raise WorkflowError(f"plot_eval_scores needs {EVAL_RUNS}, which only a grid with tasks writes (evaluation.tasks)")
        return EVAL_RUNS

    # ------------------------------------------------------------ release (release.smk)

    def check_release_config(self, variant: str) -> None:
        """Fail at DAG build, before any job, on release settings staging would reject.

        Raises:
            WorkflowError: ``release.licence`` unset, or restricted corpus licences without ``release.licence_reason``.
        """
        from clmdetour.release.licence import restricted_sources

        release = self.config["release"]
        if not release["licence"]:
            raise WorkflowError(
                f"release of {variant!r}: config key release.licence is not set; give the Hub licence id "
                "of the released weights (e.g. apache-2.0, mit, cc-by-4.0, cc-by-nc-4.0, other)")
        declared = {s["name"]: s.get("licence") for s in self.corpus["sources"]}
        restricted = restricted_sources(declared)
        if restricted and not (release["licence_reason"] or "").strip():
            listed = ", ".join(f"{n} ({declared[n]}: {k})" for n, k in sorted(restricted.items()))
            raise WorkflowError(
                f"release of {variant!r}: corpus.sources include {listed}; set release.licence_reason "
                "to say why the release may be published (the model card states it)")

    def release_inputs(self, wildcards) -> dict:
        """stage_release's input: the final model, the records the card cites (phase 1 from its
        owner), the corpus manifest and the table (checked first: :meth:`check_release_config`)."""
        variant = wildcards.variant
        self.check_release_config(variant)
        return {"model": final_model_dir(variant), "phase1_run": phase_run(phase1_owner(self.config, variant), "phase1"),
                "decay_run": phase_run(variant, "decay"), "manifest": CORPUS_MANIFEST, "eval_table": EVAL_TABLE}

    def card_tasks(self) -> dict:
        """Per grid task only what the card states: fine-tuning edits never restage a release."""
        keys = ("type", "metric", "name", "hub_id", "description")
        tasks = self.config.get("tasks") or {}
        return {t: {k: tasks[t][k] for k in keys if k in tasks[t]} for t in self.eval_tasks}

    def card_evaluation(self) -> dict:
        """The evaluation settings the card states (missing runs allowed, baseline, tasks left out)."""
        ev = self.config["evaluation"]
        return {"allow_missing": bool(ev["allow_missing"]), "baseline": ev["baseline"], "left_out": self.left_out_tasks}

    def card_release(self, wildcards) -> dict:
        """The release keys the card states, with only this variant's repo id: editing another
        variant's repo, the push settings or job sizes never restages this one."""
        from clmdetour.release.stage import repo_id_for

        release = self.config["release"]
        skip = ("repo_ids", "private", "commit_message", "mem_mb", "runtime_min")
        out = {k: v for k, v in release.items() if k not in skip}
        repo = repo_id_for(release, wildcards.variant)
        out["repo_ids"] = {wildcards.variant: repo} if repo else {}
        out["repo_template"] = None
        return out

    def push_repo(self, wildcards) -> str:
        """push_release's Hub repo id for the variant.

        Raises:
            WorkflowError: no repo configured for it (``release.repo_ids`` / ``release.repo_template``).
        """
        from clmdetour.release.stage import repo_id_for

        repo = repo_id_for(self.config["release"], wildcards.variant)
        if repo is None:
            raise WorkflowError(
                f"results/release/{wildcards.variant}.push.json: no Hub repo for {wildcards.variant!r}; "
                f"set release.repo_ids.{wildcards.variant} or release.repo_template")
        return repo
