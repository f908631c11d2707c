"""Deterministic train/dev/test assignment by hash of a document id.

Used where a source has no official split (FRACCO, single-file JSONL/TSV/CSV).
Rule: ``u = int(sha256(f"{salt}:{doc_id}")[:16 hex digits], 16) / 16**16`` (a
number in [0, 1) that depends only on the salt and the id); ``u < test_fraction``
gives ``test``, ``u < test_fraction + dev_fraction`` gives ``dev``, else
``train``. The assignment of a document never depends on the other documents,
on file order or on the machine, so it is identical across runs and adding
documents never moves existing ones.
"""

from __future__ import annotations

import hashlib

SPLITS = ("train", "dev", "test")


def hash_unit(doc_id: str, salt: str) -> float:
    """The document's hash position in [0, 1) (rule in the module doc)."""
    digest = hashlib.sha256(f"{salt}:{doc_id}".encode()).hexdigest()
    return int(digest[:16], 16) / 16**16


def hash_split(doc_id: str, dev_fraction: float, test_fraction: float, salt: str) -> str:
    """``"train"``, ``"dev"`` or ``"test"`` for one document id.

    Args:
        doc_id: stable document identifier (file stem, id field).
        dev_fraction, test_fraction: expected fractions of documents (0-1).
        salt: string mixed into the hash (recorded in the manifest).

    Raises:
        ValueError: fractions negative or summing to 1 or more.
    """
    if dev_fraction < 0 or test_fraction < 0 or dev_fraction + test_fraction >= 1:
        raise ValueError(f"dev_fraction ({dev_fraction}) and test_fraction ({test_fraction}) must be >= 0 "
                         "and sum to less than 1")
    u = hash_unit(doc_id, salt)
    if u < test_fraction:
        return "test"
    if u < test_fraction + dev_fraction:
        return "dev"
    return "train"


def hash_split_rule(dev_fraction: float, test_fraction: float, salt: str) -> dict:
    """The split rule as recorded in a task manifest."""
    return {
        "policy": "hash",
        "rule": "u = int(sha256(f'{salt}:{doc_id}').hexdigest()[:16], 16) / 16**16; "
                "test if u < test_fraction, dev if u < test_fraction + dev_fraction, else train",
        "salt": salt,
        "dev_fraction": dev_fraction,
        "test_fraction": test_fraction,
    }
