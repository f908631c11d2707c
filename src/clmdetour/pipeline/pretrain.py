"""Pretraining (``pretrain.smk``): the base model, each phase's input model, records and params."""

from __future__ import annotations

import json

from clmdetour.config import phase1_owner, resolve_phase
from clmdetour.pipeline.paths import (
    BUILT_BASE_DIR,
    BUILT_BASE_INIT_DIR,
    fetched_model_dir,
    final_model_dir,
    phase_model,
    phase_run,
)


class PretrainStage:
    """Pretraining (``pretrain.smk``): the base model, each phase's input model, records and params.

    One part of :class:`clmdetour.pipeline.Pipeline`, whose constructor sets the attributes used here.
    """

    def base_model_dir(self) -> str:
        """Folder of the base model: the built demo / real-small model, a local folder, or the Hub copy."""
        if self.builds_base:
            return BUILT_BASE_DIR
        if self.config["base_model"]["path"]:
            return self.config["base_model"]["path"]
        return fetched_model_dir(self.base_key)

    def base_init_dir(self) -> str:
        """Folder with the base model's tokenizer and architecture, for the jobs that need nothing else.

        A built base (``base_model.build``): its untrained initialisation, written by ``base_init``
        before the MLM pretraining of ``build_base`` (same tokenizer, same config), so that
        ``prepare_corpus`` and ``random_init`` (and random-init's fine-tunes) run beside that
        pretraining instead of after it. Otherwise the base model itself.
        """
        return BUILT_BASE_INIT_DIR if self.builds_base else self.base_model_dir()

    def phase_input_model(self, variant: str, phase: str) -> str:
        """Model a phase starts from: the base model (phase 1) or its phase-1 owner's model (decay)."""
        if phase == "phase1":
            return self.base_model_dir()
        return phase_model(phase1_owner(self.config, variant), "phase1")

    def pretrain_outputs(self, variant: str) -> list[str]:
        """Every pretraining output a variant needs: its final model and both phase records."""
        owner = phase1_owner(self.config, variant)
        return [final_model_dir(variant), phase_run(variant, "decay"), phase_run(owner, "phase1")]

    def phase_section_json(self, variant: str, phase: str) -> str:
        """A phase's resolved section (``config.resolve_phase``) as canonical JSON: its job's only training params."""
        return json.dumps(resolve_phase(self.config, variant, phase), sort_keys=True)

    def phase1_objectives(self) -> dict[str, str]:
        """Phase-1 objective (clm / mlm) of every variant (the plots' line styles)."""
        return {v: resolve_phase(self.config, v, "phase1")["objective"] for v in self.variants}

    def training_log_runs(self) -> list[list[str]]:
        """(variant, phase) of every phase that trains (a ``phase1_from`` variant owns no phase 1)."""
        return [[v, "phase1"] for v in self.phase1_owners] + [[v, "decay"] for v in self.variants]
