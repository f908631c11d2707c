"""Helpers for workflow scripts run through Snakemake's ``script:`` directive."""

from __future__ import annotations

import logging
import sys

OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


def redirect_to_log(snakemake, level: int = logging.INFO) -> None:
    """Send stderr and Python logging of this script to the rule's ``log:`` file, with the error hook.

    Args:
        snakemake: the object Snakemake injects into a ``script:``.
        level: the root logger's level; this package's loggers (``clmdetour.*``) always log at INFO,
            so ``logging.WARNING`` keeps third-party request logging out of the log.
    """
    if snakemake.log:
        # the script's stderr for the rest of the process: closed by the interpreter at exit
        sys.stderr = open(snakemake.log[0], "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    logging.basicConfig(level=level, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("clmdetour").setLevel(logging.INFO)
    from clmdetour.errors import install_excepthook

    install_excepthook()


def go_offline() -> None:
    """Set the Hugging Face offline variables (:data:`OFFLINE_VARS`) for this process: every rule
    but the fetch rules runs without network, as cluster compute nodes usually have none."""
    import os

    for var in OFFLINE_VARS:
        os.environ[var] = "1"
