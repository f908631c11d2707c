"""The release (``release.smk``): which variants ``all`` stages, the checks made at planning, the card's params."""

from __future__ import annotations

# Snakemake's own error class (snakemake.exceptions re-exports it): input functions raise it so that
# Snakemake reports the message with the rule and wildcards, and nothing runs.
from snakemake_interface_common.exceptions import WorkflowError

from clmdetour.config import phase1_owner
from clmdetour.pipeline.paths import (
    CLAIMS_TSV,
    CORPUS_MANIFEST,
    EVAL_TABLE,
    final_model_dir,
    phase_run,
    push_record,
    release_dir,
)


class ReleaseStage:
    """The release (``release.smk``): which variants ``all`` stages, the checks made at planning, the card's params.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def release_outputs(self, variant: str) -> list[str]:
        """A variant's staged release for ``all``: once ``release.licence`` is set, the grid has a
        table and the variant is evaluated (its card cites the grid); ``release_{v}`` stages any variant."""
        if not self.config["release"]["licence"] or not self.eval_tasks or variant not in self.eval_models:
            return []
        return [release_dir(variant)]

    def release_warning(self) -> str:
        """One line for planning when ``all`` leaves the releases out for want of ``release.licence``
        ('' when a licence is set, or when nothing would be released anyway)."""
        if self.config["release"]["licence"] or not self.eval_tasks:
            return ""
        evaluated = [v for v in self.variants if v in self.eval_models]
        if not evaluated:
            return ""
        return (f"release.licence is not set, so `all` stages no release (variants {', '.join(evaluated)}); set it "
                "to the Hub licence id of the weights (e.g. apache-2.0, cc-by-nc-4.0) to stage them, or ask for "
                "release_<variant> to be told what else is missing")

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
        owner), the corpus manifest, the table and the claims (checked first: :meth:`check_release_config`)."""
        variant = wildcards.variant
        self.check_release_config(variant)
        return {"model": final_model_dir(variant), "phase1_run": phase_run(phase1_owner(self.config, variant), "phase1"),
                "decay_run": phase_run(variant, "decay"), "manifest": CORPUS_MANIFEST, "eval_table": EVAL_TABLE,
                "claims": CLAIMS_TSV}

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
                f"{push_record(wildcards.variant)}: no Hub repo for {wildcards.variant!r}; "
                f"set release.repo_ids.{wildcards.variant} or release.repo_template")
        return repo
