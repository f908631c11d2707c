"""Temporary alias of clmdetour.objectives (removed once every training module imports it from there)."""
from clmdetour.objectives import DECAY_OBJECTIVE, OBJECTIVES, get_objective  # noqa: F401
from clmdetour.training.collators import make_collator  # noqa: F401
