"""The pipeline's wiring: the contract's paths, every target list, the rules' input and params
functions, and the rule names a variant's target must not shadow, as functions of the validated config.

The rule files (``workflow/rules/*.smk``) declare rules; which files a stage reads and writes, and
which targets ``all`` and the named targets stand for, come from here (:class:`Pipeline`, one
part per stage: :mod:`~clmdetour.pipeline.tasks`, :mod:`~clmdetour.pipeline.corpus`,
:mod:`~clmdetour.pipeline.pretrain`, :mod:`~clmdetour.pipeline.evaluation`,
:mod:`~clmdetour.pipeline.analysis`, :mod:`~clmdetour.pipeline.release`; paths in
:mod:`~clmdetour.pipeline.paths`). Nothing here looks a rule up by name or by output path, and
nothing depends on the order of the ``include:`` lines: each stage's presence follows from the
config alone (no task -> no table; no licence -> no release).

Layering: the library (every other ``clmdetour`` package) never imports this package; this package
imports the library; the rule files import this package.
"""

from __future__ import annotations

from clmdetour.config import ConfigError, phase1_owner, variant_target
from clmdetour.pipeline.analysis import AnalysisStage
from clmdetour.pipeline.corpus import CorpusStage
from clmdetour.pipeline.evaluation import EvaluationStage
from clmdetour.pipeline.paths import BASE_BUILD_RULES, STATIC_RULES, finetune_rule_name
from clmdetour.pipeline.pretrain import PretrainStage
from clmdetour.pipeline.release import ReleaseStage
from clmdetour.pipeline.tasks import TaskStage


class Pipeline(TaskStage, CorpusStage, PretrainStage, EvaluationStage, AnalysisStage, ReleaseStage):
    """What a validated config makes of the pipeline: its variants, models, grid and targets.

    Args:
        config: the validated config (``clmdetour.config.validate_config``).
        left_out_tasks: user-provided tasks left out of the grid (``tasks.spec.left_out_tasks``).

    Attributes:
        builds_base: whether the config builds its base model (``base_model.build``: the demo and
            real-small), rather than starting from a Hub checkpoint or a local folder.

    Raises:
        ConfigError: a bad evaluation section (``evaluation.grid``), a task spec that does not resolve
            (``tasks.spec.resolve_task_spec``), two tasks fetching one dataset differently, or a
            variant whose target name is also the name of a rule.
    """

    def __init__(self, config: dict, left_out_tasks: dict | None = None):
        from clmdetour.corpus.decontaminate import decontamination_tasks
        from clmdetour.evaluation.grid import eval_models, finetune_task_params, task_names, task_seeds
        from clmdetour.release.licence import ReleaseError, check_release_metadata
        from clmdetour.tasks.spec import TaskError, resolve_task_spec

        self.config = config
        self.left_out_tasks = dict(left_out_tasks or {})
        self.cluster = config["cluster"]
        self.corpus = config["corpus"]
        self.hub_sources = {s["name"]: s for s in self.corpus["sources"] if s["format"] == "hub"}
        self.demo_sources = [s for s in self.corpus["sources"] if s["format"] == "demo"]
        self._shards: list[dict] | None = None  # planned on first use (CorpusStage.shards)
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
        self.builds_base = config["base_model"]["build"] is not None
        self.base_key = config["base_model"]["key"]
        self.eval_models = eval_models(config)
        self.eval_tasks = task_names(config)
        self.task_seeds = {t: task_seeds(config, t) for t in self.eval_tasks}
        groups: dict[tuple[int, ...], list[str]] = {}
        for t in self.eval_tasks:
            groups.setdefault(tuple(self.task_seeds[t]), []).append(t)
        self.seed_groups = groups  # seed list -> tasks fine-tuned by one rule
        for t in self.task_specs:  # a bad learning-rate grid stops planning, naming the key the user set
            finetune_task_params(config, t)
        if config["release"]["licence"]:  # a licence id the Hub refuses stops planning, not the last job
            try:
                check_release_metadata(config["release"])
            except ReleaseError as e:
                raise ConfigError(str(e)) from None
        self._check_rule_names()

    def variant_outputs(self, variant: str) -> list[str]:
        """The ``{v}`` target: the variant's pretraining and its fine-tuning records."""
        return [*self.pretrain_outputs(variant), *self.model_eval_outputs(variant)]

    def all_targets(self) -> list[str]:
        """Inputs of ``all``: every final model, the table, the analysis and the staged releases."""
        return [*[p for v in self.variants for p in self.pretrain_outputs(v)], *self.eval_table_outputs(),
                *self.analysis_outputs(), *[p for v in self.variants for p in self.release_outputs(v)]]

    def _check_rule_names(self) -> None:
        """Every rule name the config generates is new: a variant's three targets and a task's target
        never repeat a rule of the workflow, a fine-tuning rule or another generated target.

        Raises:
            ConfigError: naming the variant's or task's key and the rule it collides with.
        """
        taken = {name: "a rule of the workflow" for name in STATIC_RULES}
        taken.update({name: "a fine-tuning rule" for name in self.finetune_rules()})
        generated = [(f"pretraining.variants.{v}", n, f"a target of variant {v!r}") for v in self.variants
                     for n in (variant_target(v), f"pretrain_{variant_target(v)}", f"release_{variant_target(v)}")]
        generated += [(f"tasks.{t}", self.task_target(t), f"the target of task {t!r}") for t in self.task_specs]
        generated += [(f"tasks.{t}", f"misspelt_{self.task_target(t)}", f"the did-you-mean rule of task {t!r}")
                      for t in self.task_specs if "-" in t]
        for key, name, what in generated:
            if name in taken:
                raise ConfigError(f"{key}: name collides with the rule {name!r} ({taken[name]}); choose another name")
            taken[name] = what

    def finetune_rules(self) -> dict[str, list[str]]:
        """Fine-tuning rule name -> its tasks (one rule per distinct seed list)."""
        n = len(self.seed_groups)
        return {finetune_rule_name(seeds, n): tasks for seeds, tasks in self.seed_groups.items()}

    def scratch_writers(self) -> dict[str, list[str]]:
        """Rule name -> the folders outside its outputs that its jobs write to: ``pretraining.checkpoint_root``
        (the phases' checkpoints, the corpus jobs' and the base build's scratch, the fine-tuning jobs' finished
        runs), for :func:`clmdetour.pipeline.writable.check_jobs_writable`."""
        root = [str(self.config["pretraining"]["checkpoint_root"])]
        rules = ["pretrain_phase1", "pretrain_decay", "prepare_corpus", "corpus_shard_text", "corpus_shard_tokens"]
        if self.builds_base:
            rules.append("build_base")
        return {rule: root for rule in [*rules, *self.finetune_rules()]}

    def rule_names(self) -> set[str]:
        """Every rule the rule files declare for this config: :data:`STATIC_RULES` (less
        :data:`BASE_BUILD_RULES` when the base model is not built), the per-variant targets, the
        per-task preparation targets (``prepare_task_{t}``), the rules that answer a task target typed with ``-``
        (``misspelt_prepare_task_{t}``) and the fine-tuning rules (none without a task)."""
        per_variant = {name for v in self.variants
                       for name in (f"pretrain_{variant_target(v)}", variant_target(v), f"release_{variant_target(v)}")}
        static = STATIC_RULES if self.builds_base else STATIC_RULES - BASE_BUILD_RULES
        per_task = {self.task_target(t) for t in self.task_specs}
        misspelt = {f"misspelt_{target}" for target in self.misspelt_task_targets().values()}
        return set(static) | per_variant | per_task | misspelt | set(self.finetune_rules())
