"""Upload a staged release to the Hugging Face Hub in one commit and verify it.

``push_release`` resolves a token first (``huggingface_hub.get_token``: the
``HF_TOKEN`` variable or the token saved by ``hf auth login``) and fails before
any network call without one. It then creates the repo if needed (private by
default), refuses a public repo when ``private`` was asked, commits every file
of the staged folder (and deletes files the folder no longer has) in one
commit, lists the tree at that commit and checks each file's hash, and returns
a receipt: repo id, commit sha, URLs, sha256 and size of every file. The Hub
client is injectable (``api``), so the commit can be built and checked without
network. The token is passed to the client only: never logged, printed or
written.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
from pathlib import Path
from typing import Any

from ..io import sha256_file
from . import ReleaseError
from .licence import check_release_metadata

log = logging.getLogger(__name__)
LOGIN_HELP = ("no Hugging Face token found: run `hf auth login` (or `huggingface-cli login` with older "
              "huggingface_hub), or set the HF_TOKEN environment variable to a token with write access; "
              "nothing was uploaded")
KEEP_REMOTE = {".gitattributes"}


def resolve_token(token: str | None = None) -> str:
    """The token to push with: ``token`` if given, else ``huggingface_hub.get_token()``.

    Raises:
        ReleaseError: no token; the message says how to log in (never contains a token).
    """
    if token:
        return token
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise ReleaseError(LOGIN_HELP)
    return found


def git_blob_sha1(path: str | Path) -> str:
    """Git's blob id of a file: sha1 over ``b"blob <size>\\0"`` + content (the Hub's ``blob_id`` of a non-LFS file)."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def staged_files(folder: str | Path) -> dict[str, Path]:
    """``{path in repo: local path}`` of every regular file under ``folder`` (hidden files skipped), sorted.

    Raises:
        ReleaseError: ``folder`` missing, or without ``README.md`` / ``config.json`` / ``model.safetensors``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ReleaseError(f"{folder}: no staged release folder (run stage_release first)")
    files = {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*"))
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)}
    for needed in ("README.md", "config.json", "model.safetensors"):
        if needed not in files:
            raise ReleaseError(f"{folder}: {needed} is missing; re-run stage_release")
    return files


def commit_operations(folder: str | Path, remote_files: list[str] | None = None):
    """The operations of the release commit.

    Args:
        folder: the staged folder.
        remote_files: paths already in the repo (``list_repo_files``); those the
            folder no longer has are deleted (``.gitattributes`` is kept).

    Returns:
        (operations: ``CommitOperationAdd`` per file, sorted by path, then
        ``CommitOperationDelete`` per stale file; ``{path: {"sha256", "bytes"}}``).
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    files = staged_files(folder)
    ops = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(path)) for name, path in files.items()]
    stale = sorted(set(remote_files or []) - set(files) - KEEP_REMOTE)
    ops += [CommitOperationDelete(path_in_repo=name) for name in stale]
    hashes = {name: {"sha256": sha256_file(path), "bytes": path.stat().st_size} for name, path in files.items()}
    return ops, hashes


def verify_commit(api, repo_id: str, revision: str, folder: str | Path, hashes: dict[str, dict[str, Any]]) -> None:
    """Check the repo tree at ``revision`` against the staged files.

    LFS files (weights) are compared by sha256 (``RepoFile.lfs.sha256``), the
    others by git blob id (``RepoFile.blob_id``); the tree must hold no other
    file than the staged ones and ``.gitattributes``.

    Raises:
        ReleaseError: a file missing, extra or with another hash at that revision.
    """
    folder = Path(folder)
    remote = {e.path: e for e in api.list_repo_tree(repo_id, revision=revision, recursive=True, repo_type="model")
              if getattr(e, "blob_id", None) is not None}
    extra = sorted(set(remote) - set(hashes) - KEEP_REMOTE)
    if extra:
        raise ReleaseError(f"{repo_id}@{revision}: files not in the staged folder: {extra}")
    for name, h in hashes.items():
        entry = remote.get(name)
        if entry is None:
            raise ReleaseError(f"{repo_id}@{revision}: {name} is missing after the commit")
        lfs = getattr(entry, "lfs", None)
        if lfs is not None:
            ok = lfs.sha256 == h["sha256"]
        else:
            ok = entry.blob_id == git_blob_sha1(folder / name)
        if not ok:
            raise ReleaseError(f"{repo_id}@{revision}: {name} differs from the staged file")


def push_release(folder: str | Path, repo_id: str, *, private: bool = True, commit_message: str,
                 token: str | None = None, api=None) -> dict[str, Any]:
    """Push a staged release folder to ``repo_id`` in one commit and return the receipt.

    Args:
        folder: ``results/release/{variant}``.
        repo_id: ``namespace/name`` on the Hub.
        private: create the repo private; refuse to push to an existing public
            repo while True.
        commit_message: the commit's title.
        token: a token (default: ``huggingface_hub.get_token()``).
        api: the Hub client (default ``huggingface_hub.HfApi(token=...)``); tests
            pass an object with ``create_repo``, ``repo_info``, ``list_repo_files``,
            ``create_commit`` and ``list_repo_tree``.

    Returns:
        The receipt: ``repo_id``, ``url``, ``commit_sha``, ``commit_url``,
        ``private``, ``files`` ({path: {sha256, bytes}}), ``deleted``,
        ``pushed_at`` (UTC ISO 8601), ``huggingface_hub`` version, ``verified``.

    Raises:
        ReleaseError: no token (before any call), a folder that is not a staged
            release or whose card was built for another repo, a card whose licence
            or datasets the Hub would refuse (:func:`clmdetour.release.licence.check_release_metadata`), a public repo
            while ``private``, or a failed verification.
    """
    import huggingface_hub

    token = resolve_token(token)  # first: no network call without a token
    folder = Path(folder)
    files = staged_files(folder)
    if repo_id not in files["README.md"].read_text(encoding="utf-8"):
        raise ReleaseError(f"{folder / 'README.md'}: the card does not name {repo_id!r}; it was staged for "
                           "another repo: re-run stage_release with the current release config")
    card = huggingface_hub.ModelCard(files["README.md"].read_text(encoding="utf-8"))
    try:  # the card's licence and datasets, checked again before anything leaves the machine
        check_release_metadata({"licence": card.data.license, "licence_name": card.data.license_name,
                                "datasets": card.data.datasets})
    except ReleaseError as e:
        raise ReleaseError(f"{folder / 'README.md'}: {e}; re-stage the release after fixing the config") from None
    if api is None:
        api = huggingface_hub.HfApi(token=token)
    url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
    is_private = bool(getattr(api.repo_info(repo_id, repo_type="model"), "private", False))
    if private and not is_private:
        raise ReleaseError(f"{repo_id} exists and is public but release.private is true; make the repo private "
                           "on the Hub or set release.private: false")
    remote = list(api.list_repo_files(repo_id, repo_type="model"))
    ops, hashes = commit_operations(folder, remote)
    deleted = [op.path_in_repo for op in ops if type(op).__name__ == "CommitOperationDelete"]
    log.info("pushing %d files to %s (%d stale files deleted)", len(hashes), repo_id, len(deleted))
    info = api.create_commit(repo_id, operations=ops, commit_message=commit_message, repo_type="model")
    verify_commit(api, repo_id, info.oid, folder, hashes)
    log.info("pushed %s at %s", repo_id, info.oid)
    return {"repo_id": repo_id, "url": str(url), "commit_sha": info.oid, "commit_url": info.commit_url,
            "private": is_private, "files": hashes, "deleted": deleted,
            "pushed_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "huggingface_hub": huggingface_hub.__version__, "verified": True}
