"""Helpers for workflow scripts run through Snakemake's ``script:`` directive."""

from __future__ import annotations

import logging
import sys


def redirect_to_log(snakemake) -> None:
    """Send stderr and Python logging of this script to the rule's ``log:`` file."""
    if snakemake.log:
        sys.stderr = open(snakemake.log[0], "a", buffering=1, encoding="utf-8")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from clmdetour.errors import install_excepthook

    install_excepthook()
