"""The pretraining corpus (``corpus.smk``, and the held-apart text of a built base model): inputs and checks."""

from __future__ import annotations

from pathlib import Path

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.pipeline.paths import DEMO_BASE_CORPUS, DEMO_CORPUS, HELD_APART_CORPUS, dataset_dir, task_dir


class CorpusStage:
    """The pretraining corpus (``corpus.smk``, and the held-apart text of a built base model): inputs and checks.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def check_decontamination_tasks(self) -> None:
        """Stop planning the corpus (and all it feeds) when a task to decontaminate against is missing,
        whatever ``evaluation.missing_user_tasks`` says: a corpus silently built without the
        decontamination the config asks for would leak that task's dev/test text.

        Raises:
            WorkflowError: naming the task, its missing files and the two ways out.
        """
        from clmdetour.tasks.spec import missing_files, user_task_message

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

    def check_local_sources(self) -> None:
        """Stop planning the corpus when a local source file or folder is missing (not at its job, after the
        base model was built), naming its key.

        Raises:
            WorkflowError: ``corpus.sources[i].path`` does not exist (relative to the working directory).
        """
        for i, src in enumerate(self.corpus["sources"]):
            if src["format"] not in ("hub", "demo") and not Path(src["path"]).exists():
                raise WorkflowError(f"corpus.sources[{i}].path ({src['name']!r}): {src['path']} does not exist "
                                    f"(relative to the working directory {Path.cwd()})")

    @property
    def shards(self) -> list[dict]:
        """The corpus shards (:func:`clmdetour.corpus.shards.plan_shards`, from the config and the local files' sizes).

        Raises:
            WorkflowError: a source folder without files of its format (naming it), ``corpus.shard_mb`` NaN.
        """
        if self._shards is None:
            from clmdetour.corpus.shards import plan_shards
            from clmdetour.corpus.sources import SourceError

            try:
                self._shards = plan_shards(self.corpus)
            except SourceError as e:
                raise WorkflowError(f"corpus.sources: {e}") from None
            except ValueError as e:  # corpus.shard_mb
                raise WorkflowError(str(e)) from None
        return self._shards

    @property
    def shard_ids(self) -> list[str]:
        """The shards' ids (``{source}-{k:05d}``), in canonical order."""
        return [s["id"] for s in self.shards]

    def shard(self, shard_id: str) -> dict:
        """One shard's plan. Raises WorkflowError for an id the config does not plan."""
        for s in self.shards:
            if s["id"] == shard_id:
                return s
        raise WorkflowError(f"corpus shard {shard_id!r} is not planned by this config (shards: "
                            f"{', '.join(self.shard_ids[:5])}{' ...' if len(self.shards) > 5 else ''})")

    def shard_source(self, shard_id: str) -> dict:
        """The ``corpus.sources`` entry a shard reads."""
        name = self.shard(shard_id)["source"]
        return next(s for s in self.corpus["sources"] if s["name"] == name)

    def shard_hub_dir(self, shard_id: str) -> str:
        """The fetched folder of a hub shard's source ('' for other formats)."""
        return self.hub_source_dirs().get(self.shard(shard_id)["source"], "")

    def shard_dir(self, shard_id: str, kind: str) -> str:
        """``{pretraining.checkpoint_root}/scratch/corpus-shards/{shard}/{kind}`` (``text`` or ``tokens``):
        a shard job's output, temporary (removed once its readers ran)."""
        return f"{self.config['pretraining']['checkpoint_root']}/scratch/corpus-shards/{shard_id}/{kind}"

    def shard_text_section(self) -> dict:
        """The ``corpus`` keys a shard's text job reads (:data:`clmdetour.corpus.shards.SHARD_TEXT_KEYS`)."""
        from clmdetour.corpus.shards import SHARD_TEXT_KEYS

        return {k: self.corpus[k] for k in SHARD_TEXT_KEYS}

    def shard_text_inputs(self, wildcards) -> dict:
        """corpus_shard_text's input: the shard's file (or the demo text, or the fetched Hub folder) and
        the tasks to decontaminate against (checked first: :meth:`check_decontamination_tasks`,
        :meth:`check_local_sources`)."""
        self.check_decontamination_tasks()
        self.check_local_sources()
        shard, source = self.shard(wildcards.shard), self.shard_source(wildcards.shard)
        inputs = {"tasks": [task_dir(task) for task in self.decontaminate_against]}
        if source["format"] == "demo":
            inputs["demo_corpus"] = DEMO_CORPUS
        elif source["format"] == "hub":
            inputs["hub"] = self.hub_source_dirs()[source["name"]]
        else:
            inputs["file"] = shard["file"]
        return inputs

    def corpus_inputs(self, wildcards) -> dict:
        """prepare_corpus's (the merge's) input: the base tokenizer (:meth:`base_init_dir`), every shard's
        tokens, the tasks to decontaminate against (their texts map matches to tasks)."""
        self.check_decontamination_tasks()
        self.check_local_sources()
        return {"tokenizer": self.base_init_dir(), "shards": [self.shard_dir(i, "tokens") for i in self.shard_ids],
                "tasks": [task_dir(task) for task in self.decontaminate_against]}

    def held_apart_inputs(self, wildcards) -> dict:
        """held_apart_corpus's input: every shard's text and the tasks its text is decontaminated against."""
        self.check_decontamination_tasks()
        self.check_local_sources()
        return {"shards": [self.shard_dir(i, "text") for i in self.shard_ids],
                "tasks": [task_dir(task) for task in self.decontaminate_against]}

    def base_corpus_path(self) -> str:
        """Texts of the built base model: the generated demo documents or the held-apart slice of the sources."""
        return DEMO_BASE_CORPUS if self.config["base_model"]["build"]["corpus"] == "demo" else HELD_APART_CORPUS
