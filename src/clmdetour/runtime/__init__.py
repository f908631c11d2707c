"""What a pretraining phase (``clmdetour.training``) and a fine-tuning job (``clmdetour.finetune``) both run on.

- :mod:`clmdetour.runtime.precision`: the Composer precision a job runs in and the autocast of its probes;
- :mod:`clmdetour.runtime.optim`: Composer's ``DecoupledAdamW`` updated by torch's fused kernel;
- :mod:`clmdetour.runtime.composer_setup`: Composer's start-up costs avoided, the libraries imported and frozen;
- :mod:`clmdetour.runtime.attention`: the attention back-end settled on a model (the self-check against sdpa);
- :mod:`clmdetour.runtime.memory`: a step's memory estimated and the micro-batch planner.

Below both users (docs/extending.md, "The package's floors"): it imports the model code
(``clmdetour.modeling``), never a pretraining phase or a fine-tuning job.
"""
