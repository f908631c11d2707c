"""Fetching task sources: an archive from a URL, or a Hub dataset snapshot.

Only the fetch rules (``fetch_url``, ``fetch_task_hub``) call these; every other
rule reads the local copy under ``resources/datasets/{name}/``.

URL archives: the file is downloaded to a temporary file, its sha256 computed
and checked against, in order, the config's ``sha256`` and the checksum
recorded by the first fetch in ``{record_dir}/{name}.sha256`` (kept outside
the output folder, which Snakemake deletes before re-running a fetch). A
mismatch is an error; a first fetch without a configured checksum records
it. ``.zip`` and ``.tar[.gz|.bz2|.xz]`` archives are extracted (a single
top-level folder is stripped, so ``QUAERO_FrenchMed/corpus/...`` lands as
``corpus/...``); other files are stored as they are. ``revision.txt`` in the
output folder records the URL, sha256 and fetch time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from clmdetour.errors import ExpectedError
from clmdetour.io import atomic_output_dir, atomic_write_text


class FetchError(ExpectedError, RuntimeError):
    """A download failed or its checksum does not match; the message names the URL."""


def _download(url: str, dest: Path, timeout_s: float, chunk_bytes: int = 1 << 20) -> str:
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r, open(dest, "wb") as f:
            for chunk in iter(lambda: r.read(chunk_bytes), b""):
                h.update(chunk)
                f.write(chunk)
    except OSError as e:
        from clmdetour.io import disk_space_error

        dest.unlink(missing_ok=True)  # never a partial archive left behind
        full = disk_space_error(dest, e)
        if full is not None:
            raise full from None  # names the file and the bytes free, not "download failed"
        raise FetchError(f"{url}: download failed: {e}") from None
    return h.hexdigest()


def _extract(archive: Path, name: str, out: Path) -> None:
    low = name.lower()
    if low.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                target = (out / member).resolve()
                if not str(target).startswith(str(out.resolve())):
                    raise FetchError(f"{name}: archive member {member!r} escapes the output folder")
            z.extractall(out)
    elif re.search(r"\.tar(\.gz|\.bz2|\.xz)?$|\.tgz$", low):
        with tarfile.open(archive) as t:
            t.extractall(out, filter="data")
    else:
        shutil.copy2(archive, out / name)
        return
    entries = [p for p in out.iterdir() if p.name != "__MACOSX"]
    if len(entries) == 1 and entries[0].is_dir():
        inner = entries[0]
        for child in list(inner.iterdir()):
            shutil.move(str(child), str(out / child.name))
        inner.rmdir()
    shutil.rmtree(out / "__MACOSX", ignore_errors=True)


def fetch_url(url: str, out_dir: str | Path, name: str, sha256: str | None = None,
              record_dir: str | Path = "resources/checksums", timeout_s: float = 600) -> dict:
    """Download ``url`` into ``out_dir`` (extracting archives) with a checked sha256.

    Args:
        url: http(s) or file URL of the archive.
        out_dir: output folder (replaced atomically when complete).
        name: dataset name (names the checksum record ``{record_dir}/{name}.sha256``).
        sha256: expected hex digest of the downloaded file, or ``None``.
        record_dir: folder of checksums recorded by first fetches.
        timeout_s: socket timeout in seconds.

    Returns:
        ``{"url", "sha256", "bytes", "fetched"}`` (also written to ``revision.txt``).

    Raises:
        FetchError: download failure, or a digest differing from the configured or
            recorded one (the message names both digests and where the expected one is from).
    """
    record = Path(record_dir) / f"{name}.sha256"
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fname = Path(urllib.request.urlparse(url).path).name or "download"
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.dl.") as tmpdl:
        archive = Path(tmpdl) / fname
        digest = _download(url, archive, timeout_s)
        expected, origin = (sha256, "config sha256") if sha256 else (None, None)
        if expected is None and record.exists():
            expected, origin = record.read_text(encoding="utf-8").split()[0], str(record)
        if expected is not None and expected.lower() != digest:
            raise FetchError(f"{url}: sha256 {digest} differs from {expected} ({origin}); the upstream file changed "
                             "or the download is corrupt")
        info = {"url": url, "sha256": digest, "bytes": archive.stat().st_size,
                "fetched": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
        with atomic_output_dir(out_dir) as tmp:
            _extract(archive, fname, tmp)
            atomic_write_text(tmp / "revision.txt", "".join(f"{k}: {v}\n" for k, v in info.items()))
    if not record.exists():
        atomic_write_text(record, f"{digest}  {url}\n")
    return info


def fetch_hub_dataset(hub_id: str, out_dir: str | Path, revision: str | None = None) -> str:
    """Download a Hub dataset repository snapshot into ``out_dir``; write ``revision.txt``.

    Args:
        hub_id: dataset repository id (``owner/name``).
        out_dir: output folder (replaced atomically when complete).
        revision: branch, tag or commit; resolved to a commit sha first, so the
            snapshot and ``revision.txt`` name the same commit.

    Returns:
        The commit sha downloaded.

    Raises:
        huggingface_hub errors (repository or revision not found, network).
    """
    from huggingface_hub import HfApi, snapshot_download

    sha = HfApi().dataset_info(hub_id, revision=revision).sha
    with atomic_output_dir(out_dir) as tmp:
        snapshot_download(repo_id=hub_id, repo_type="dataset", revision=sha, local_dir=str(tmp))
        shutil.rmtree(tmp / ".cache", ignore_errors=True)
        atomic_write_text(tmp / "revision.txt", f"{hub_id} {sha}\n")
    return sha
