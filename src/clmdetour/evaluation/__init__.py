"""The evaluation grid and its results: which runs the grid holds (``grid``), the table and its
statistics (``table``, ``stats``), the trivial baselines (``trivial``) and the groups of tasks
that share documents (``task_groups``).

This package reads tasks only through :mod:`clmdetour.tasks` (the task contract and the task-type
registry) and never imports :mod:`clmdetour.finetune`: the table sits beside the trainer, not above it.
"""
