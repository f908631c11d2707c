"""Which pretraining-source licences restrict a release (DESIGN.md, Decisions: Licences).

Each corpus source declares an SPDX id (``CC-BY-4.0``, ``CC-BY-NC-SA-4.0``,
``LicenseRef-...``) or ``unknown``. A release built on any non-commercial,
research-only or unknown source needs ``release.licence_reason``, which the
model card states next to the list of sources.
"""

from __future__ import annotations

import re

from . import ReleaseError

NON_COMMERCIAL = "non-commercial"
RESEARCH_ONLY = "research-only"
UNKNOWN = "unknown"
# SPDX has NOASSERTION for "not stated"; the others are what people write for it.
_UNKNOWN_IDS = {"", "unknown", "none", "noassertion", "unspecified", "other", "n/a", "na"}


def licence_restriction(licence: str | None) -> str | None:
    """Classify one source licence.

    Args:
        licence: an SPDX id, an SPDX ``LicenseRef-`` id, free text, ``unknown`` or None.

    Returns:
        ``"non-commercial"`` (an ``NC`` component as in ``CC-BY-NC-4.0``, or the
        words non-commercial), ``"research-only"`` (the word research or
        academic), ``"unknown"`` (missing, ``unknown``, ``NOASSERTION``, ``other``,
        or a custom ``LicenseRef-`` id that cannot be checked), or None for a
        licence that allows commercial use.
    """
    text = (licence or "").strip().lower()
    if text in _UNKNOWN_IDS:
        return UNKNOWN
    parts = set(re.split(r"[^a-z0-9]+", text))
    if "nc" in parts or "noncommercial" in parts or "non-commercial" in text or "non commercial" in text:
        return NON_COMMERCIAL
    if "research" in parts or "academic" in parts:
        return RESEARCH_ONLY
    if text.startswith("licenseref-"):
        return UNKNOWN
    return None


def restricted_sources(licences: dict[str, str | None]) -> dict[str, str]:
    """``{source: restriction}`` for the sources whose licence restricts a release (see ``licence_restriction``)."""
    out = {}
    for name, licence in licences.items():
        kind = licence_restriction(licence)
        if kind is not None:
            out[name] = kind
    return out


def check_licence_policy(licences: dict[str, str | None], licence_reason: str | None,
                         where: str = "results/corpus/manifest.json") -> dict[str, str]:
    """Require ``release.licence_reason`` when any source is non-commercial, research-only or unknown.

    Args:
        licences: ``{source name: licence}`` from the corpus manifest.
        licence_reason: ``release.licence_reason`` from the config (None if unset).
        where: file named in the error.

    Returns:
        The restricted sources (``restricted_sources``), possibly empty.

    Raises:
        ReleaseError: a restricted source and no (or a blank) reason; the message
            lists each source with its licence and names the config key.
    """
    restricted = restricted_sources(licences)
    if restricted and not (licence_reason or "").strip():
        listed = ", ".join(f"{n} ({licences[n] or 'no licence'}: {k})" for n, k in sorted(restricted.items()))
        raise ReleaseError(f"{where}: the release is built on restricted sources: {listed}; "
                           f"set release.licence_reason in the config to say why the release may be "
                           f"published (the model card states it)")
    return restricted
