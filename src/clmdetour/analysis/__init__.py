"""Analysis of the continued-pretrained models: layer drift (weight change, CKA) and report figures.

Modules: ``cka`` (linear CKA), ``drift`` (per-layer drift tables), ``plots`` (figures).
"""
