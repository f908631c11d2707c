"""Which pretraining-source licences restrict a release (docs/fidelity.md).

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
# Licences known to allow commercial use and redistribution of derived weights (SPDX ids, case and
# separators loose; Etalab / Licence Ouverte 2.0 is the French administration's open licence). Any other
# text ("All rights reserved", "proprietary", "DUA", a typo) is unknown: a release then needs a reason.
_PERMISSIVE_RE = re.compile(
    r"(cc[ -]?by([ -]sa)?([ -]\d(\.\d)?)?|cc0([ -]1\.0)?|mit|apache[ -]2\.0|bsd[ -][23][ -]clause|isc|zlib"
    r"|[al]?gpl[ -][23]\.[01]([ -]or[ -]later|[ -]only)?|gfdl[ -]1\.[23]([ -]or[ -]later|[ -]only)?|mpl[ -]2\.0"
    r"|odc[ -]by([ -]1\.0)?|odbl([ -]1\.0)?|pddl([ -]1\.0)?|etalab[ -]2\.0|lo[ -]2\.0|unlicense|public[ -]domain)")


def licence_restriction(licence: str | None) -> str | None:
    """Classify one source licence.

    Args:
        licence: an SPDX id, an SPDX ``LicenseRef-`` id, free text, ``unknown`` or None.

    Returns:
        ``"non-commercial"`` (an ``NC`` component as in ``CC-BY-NC-4.0``, or the
        words non-commercial), ``"research-only"`` (the word research or
        academic), ``"unknown"`` (missing, ``unknown``, ``NOASSERTION``, ``other``,
        or a custom ``LicenseRef-`` id that cannot be checked, or any text that is not a
        known permissive licence: ``All rights reserved``, a typo), or None for a licence
        known to allow commercial use (:data:`_PERMISSIVE_RE`: CC-BY, CC0, MIT, Apache-2.0,
        the GPL family, GFDL, ODbL, Etalab-2.0 ...).
    """
    text = (licence or "").strip().lower()
    if text in _UNKNOWN_IDS:
        return UNKNOWN
    parts = set(re.split(r"[^a-z0-9]+", text))
    if ("nc" in parts or any(re.fullmatch(r"nc\d.*", p) for p in parts) or "noncommercial" in parts
            or "non-commercial" in text or "non commercial" in text):
        return NON_COMMERCIAL
    if "research" in parts or "academic" in parts:
        return RESEARCH_ONLY
    if _PERMISSIVE_RE.fullmatch(text.replace("_", "-")):
        return None
    return UNKNOWN


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


# Licence identifiers the Hugging Face Hub accepts in a repo card's ``license:`` field
# (https://huggingface.co/docs/hub/repositories-licenses, "License identifier (to use in repo card)").
HUB_LICENCES = (
    "apache-2.0", "mit", "openrail", "bigscience-openrail-m", "creativeml-openrail-m", "bigscience-bloom-rail-1.0",
    "bigcode-openrail-m", "afl-3.0", "artistic-2.0", "bsl-1.0", "bsd", "bsd-2-clause", "bsd-3-clause",
    "bsd-3-clause-clear", "c-uda", "cc", "cc0-1.0", "cc-by-2.0", "cc-by-2.5", "cc-by-3.0", "cc-by-4.0",
    "cc-by-sa-3.0", "cc-by-sa-4.0", "cc-by-nc-2.0", "cc-by-nc-3.0", "cc-by-nc-4.0", "cc-by-nd-4.0",
    "cc-by-nc-nd-3.0", "cc-by-nc-nd-4.0", "cc-by-nc-sa-2.0", "cc-by-nc-sa-3.0", "cc-by-nc-sa-4.0",
    "cdla-sharing-1.0", "cdla-permissive-1.0", "cdla-permissive-2.0", "wtfpl", "ecl-2.0", "epl-1.0", "epl-2.0",
    "etalab-2.0", "eupl-1.1", "eupl-1.2", "agpl-3.0", "gfdl", "gpl", "gpl-2.0", "gpl-3.0", "lgpl", "lgpl-2.1",
    "lgpl-3.0", "isc", "h-research", "intel-research", "lppl-1.3c", "ms-pl", "apple-ascl", "apple-amlr",
    "mpl-2.0", "odc-by", "odbl", "openmdw-1.0", "openrail++", "osl-3.0", "postgresql", "ofl-1.1", "ncsa",
    "unlicense", "zlib", "pddl", "lgpl-lr", "deepfloyd-if-license", "fair-noncommercial-research-license",
    "llama2", "llama3", "llama3.1", "llama3.2", "llama3.3", "llama4", "gemma", "unknown", "other",
)
# A Hub dataset id: ``owner/name`` (letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters each).
HUB_DATASET_ID_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?/[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9+.]+", "", text.lower().replace("licence", "").replace("license", ""))


def closest_hub_licence(value: str) -> str | None:
    """The Hub licence id closest to ``value`` (``"Apache 2.0"`` -> ``apache-2.0``), or None.

    Spelling is compared without case, spaces, hyphens and the word licence/license;
    otherwise :func:`difflib.get_close_matches` picks the nearest id.
    """
    import difflib

    squashed = _squash(value)
    by_squash = {_squash(x): x for x in HUB_LICENCES}
    if squashed in by_squash:
        return by_squash[squashed]
    near = difflib.get_close_matches(squashed, list(by_squash), n=1, cutoff=0.6)
    return by_squash[near[0]] if near else None


def check_release_metadata(release: dict) -> str:
    """Check ``release.licence`` and ``release.datasets`` before a card is staged or pushed.

    Args:
        release: the ``release`` config section.

    Returns:
        The licence id, exactly as the Hub spells it.

    Raises:
        ReleaseError: ``release.licence`` unset or not a Hub licence id (the message
            suggests the closest id), licence ``other`` without ``release.licence_name``,
            or a ``release.datasets`` entry that is not a Hub dataset id ``owner/name``
            (the message names the key and the entry).
    """
    licence = release.get("licence")
    if not licence:
        raise ReleaseError("config key release.licence is not set; give the Hub licence id of the released "
                           "weights (e.g. apache-2.0, mit, cc-by-4.0, cc-by-nc-4.0, other)")
    licence = str(licence)
    if licence not in HUB_LICENCES:
        near = closest_hub_licence(licence)
        hint = f"did you mean {near!r}? " if near else ""
        raise ReleaseError(f"config key release.licence: {licence!r} is not a licence id the Hub accepts; {hint}"
                           f"ids: {', '.join(HUB_LICENCES[:12])} ... (clmdetour.release.licence.HUB_LICENCES); "
                           "for another licence set licence: other with licence_name and licence_link")
    if licence == "other" and not release.get("licence_name"):
        raise ReleaseError("config key release.licence_name is required when release.licence is 'other'")
    for i, ds in enumerate(release.get("datasets") or []):
        if not isinstance(ds, str) or not HUB_DATASET_ID_RE.fullmatch(ds) or "--" in ds or ".." in ds:
            fixed = re.sub(r"[^A-Za-z0-9._/-]+", "-", str(ds)).strip("-/")
            hint = f" (e.g. {fixed!r})" if HUB_DATASET_ID_RE.fullmatch(fixed) else ""
            raise ReleaseError(f"config key release.datasets[{i}]: {ds!r} is not a Hub dataset id; expected "
                               f"'owner/name'{hint}, e.g. 'DrBenchmark/QUAERO'")
    return licence
