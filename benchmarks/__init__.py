"""Performance harness: hot paths of the pipeline measured against what one would otherwise use.

Run ``python benchmarks/run.py`` (``--quick`` for a smoke run). Each benchmark
lives in its own module and returns rows of :class:`benchmarks.common.Row`.
"""
