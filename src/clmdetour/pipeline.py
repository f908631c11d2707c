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


def finetune_rule_name(seeds: tuple[int, ...], groups: int) -> str:
    """``finetune`` when every task has the same seed list (``groups == 1``), else one rule per list."""
    return "finetune" if groups == 1 else f"finetune_{len(seeds)}seeds_from{seeds[0]}"


class Pipeline:
    """What a validated config makes of the pipeline: its variants, models, grid and targets.

    Args:
        config: the validated config (``clmdetour.config.validate_config``).
        left_out_tasks: user-provided tasks left out of the grid (``tasks.prepare.left_out_tasks``).

    Raises:
        ConfigError: a bad evaluation section (``finetune.grid``), or a variant whose target name
            is also the name of a rule.
    """

    def __init__(self, config: dict, left_out_tasks: dict | None = None):
        from clmdetour.finetune.grid import eval_models, task_names, task_seeds

        self.config = config
        self.left_out_tasks = dict(left_out_tasks or {})
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
