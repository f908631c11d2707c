"""Warnings at planning (one line each, or ''): a config that runs, but maybe not as meant. Snakemake's
``common.smk`` logs them when the workflow loads.
"""

from __future__ import annotations

from clmdetour.config.checks import known_max_positions
from clmdetour.config.phase import PHASES, parse_layer_spec, phase_key, resolve_phase


def max_length_warning(config: dict) -> str:
    """One line for planning naming the tasks whose ``max_length`` is above the base model's
    ``max_position_embeddings`` when planning can know it (:func:`known_max_positions`), else ''.

    Fine-tuning caps a task's inputs at each model's own limit (tokens), so such a task trains on
    shorter inputs than its config says: a warning, not a refusal (a grid may hold models of longer
    context than the base).
    """
    known = known_max_positions(config)
    if not known:
        return ""
    over = {t: spec["max_length"] for t, spec in (config.get("tasks") or {}).items()
            if isinstance(spec, dict) and isinstance(spec.get("max_length"), int) and spec["max_length"] > known[0]}
    if not over:
        return ""
    listed = ", ".join(f"tasks.{t}.max_length ({n:,})" for t, n in over.items())
    return (f"{listed} above the base model's max_position_embeddings ({known[0]:,} tokens, {known[1]}): its "
            f"fine-tuning inputs are capped at {known[0]:,} tokens; lower the key to say so")


def frozen_encoder_warning(config: dict) -> str:
    """One line for planning naming each variant phase whose ``freeze`` covers every encoder layer
    (``base_model.num_layers``), '' when none: only the MLM head (and the embeddings, unless frozen too)
    would train. A warning, not a refusal: training the head alone is a possible probe.
    """
    n_layers = config["base_model"]["num_layers"]
    found = []
    for name, v in config["pretraining"]["variants"].items():
        for phase in PHASES:
            if phase == "phase1" and v.get("phase1_from"):
                continue  # the owner's phase 1, said under the owner
            freeze = resolve_phase(config, name, phase)["freeze"]
            frozen = {x for i, spec in enumerate(freeze) for x in parse_layer_spec(spec, n_layers, f"freeze[{i}]")}
            if not set(range(n_layers)) <= frozen:
                continue
            emb = "embeddings" in frozen
            found.append(f"{phase_key(config, name, phase, 'freeze')} {freeze} freezes every encoder layer (0-"
                         f"{n_layers - 1} of base_model.num_layers {n_layers}){' and the embeddings' if emb else ''} "
                         f"of {name}'s {phase}: only the {'MLM head trains' if emb else 'embeddings and the MLM head train'}")
    if not found:
        return ""
    return "; ".join(found) + "; free some layers in that key if this is not the experiment you meant"


#: Fine-tuning peak learning rates outside this range (AdamW, encoders of 100M-400M parameters: the field's grids
#: span 1e-6 .. 1e-3) are warned at planning: a run there diverges or does not move.
PLAUSIBLE_FINETUNE_LR = (1e-7, 1e-2)


def lr_grid_warning(config: dict) -> str:
    """One line for planning naming each fine-tuning ``lr_grid`` (``evaluation.lr_grid`` or
    ``tasks.{task}.finetune.lr_grid``) with a value outside :data:`PLAUSIBLE_FINETUNE_LR`, else ''.
    A warning, not a refusal: a diverged run is recorded as such (``status: diverged``)."""
    low, high = PLAUSIBLE_FINETUNE_LR
    grids = [("evaluation.lr_grid", (config.get("evaluation") or {}).get("lr_grid"))]
    grids += [(f"tasks.{t}.finetune.lr_grid", ((spec or {}).get("finetune") or {}).get("lr_grid"))
              for t, spec in (config.get("tasks") or {}).items() if isinstance(spec, dict)]
    found = [f"{key} {grid}" for key, grid in grids
             if isinstance(grid, list) and any(isinstance(x, (int, float)) and not low <= x <= high for x in grid)]
    if not found:
        return ""
    return (f"{'; '.join(found)}: a fine-tuning learning rate outside {low:g} .. {high:g} (AdamW on an encoder) "
            "diverges or does not move; runs whose training loss explodes are recorded as diverged")
