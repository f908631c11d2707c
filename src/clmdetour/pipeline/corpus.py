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

    def corpus_inputs(self, wildcards) -> dict:
        """prepare_corpus's input: the base tokenizer (:meth:`base_init_dir`), the demo text, the Hub sources, the tasks to
        decontaminate against (checked first: :meth:`check_decontamination_tasks`, :meth:`check_local_sources`)."""
        self.check_decontamination_tasks()
        self.check_local_sources()
        inputs = {"tokenizer": self.base_init_dir()}
        if self.demo_sources:
            inputs["demo_corpus"] = DEMO_CORPUS
        inputs["hub"] = list(self.hub_source_dirs().values())
        inputs["tasks"] = [task_dir(task) for task in self.decontaminate_against]
        return inputs

    def held_apart_inputs(self, wildcards) -> dict:
        """held_apart_corpus's input: the Hub sources and the tasks its text is decontaminated against."""
        self.check_decontamination_tasks()
        self.check_local_sources()
        return {"hub": list(self.hub_source_dirs().values()),
                "tasks": [task_dir(task) for task in self.decontaminate_against]}

    def base_corpus_path(self) -> str:
        """Texts of the built base model: the generated demo documents or the held-apart slice of the sources."""
        return DEMO_BASE_CORPUS if self.config["base_model"]["build"]["corpus"] == "demo" else HELD_APART_CORPUS
