"""Issue checkable-scores item 5: the newest French biomedical encoders, added by an overlay (config/peers.yaml),
join the grid as reference models; the paper config alone is unchanged."""

from __future__ import annotations

from helpers import REPO

PEERS = {"doctobert-fr-base": ("doctolib-lab/doctobert-fr-base", 512),
         "doctomodernbert-fr-base": ("doctolib-lab/doctomodernbert-fr-base", 8192),
         "doctomodernbert-fr-large": ("doctolib-lab/doctomodernbert-fr-large", 8192),
         "moderncamembert-bio-v2-base": ("almanach/ModernCamemBERT-bio-v2-base", 8192)}


def _config(*files):
    from snakemake.utils import update_config

    from clmdetour.config import load_yaml, validate_config

    merged: dict = {}
    for f in files:
        update_config(merged, load_yaml(REPO / f))
    return validate_config(merged)


def test_the_overlay_plans_the_four_peers_into_the_grid_and_the_projection():
    from clmdetour.evaluation.grid import eval_models
    from clmdetour.pipeline.cost import project_cost

    paper = _config("config/config.yaml")
    peers = _config("config/config.yaml", "config/peers.yaml")
    for key, (hub_id, limit) in PEERS.items():
        ref = peers["reference_models"][key]
        assert (ref["hub_id"], ref["max_length"], ref["revision"]) == (hub_id, limit, "main")
        assert key in eval_models(peers) and key not in eval_models(paper)
    assert set(eval_models(peers)) - set(eval_models(paper)) == set(PEERS)
    runs_paper = project_cost(paper).count("fine-tuning")
    runs_peers = project_cost(peers).count("fine-tuning")
    per_model = runs_paper // len(eval_models(paper))
    assert runs_peers - runs_paper == len(PEERS) * per_model  # what the overlay adds, by runs
    assert project_cost(peers).gpu_hours("pretraining") == project_cost(paper).gpu_hours("pretraining")
