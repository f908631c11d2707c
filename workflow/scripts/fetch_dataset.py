"""Download a Hub dataset into resources/datasets/{name}/ and record its revision (network)."""
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download

from clmdetour.io import atomic_output_dir, atomic_write_text
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
src = snakemake.params.source
out = Path(snakemake.output.folder)
with atomic_output_dir(out) as tmp:
    snapshot_download(repo_id=src["hub_id"], repo_type="dataset", revision=src.get("revision"), local_dir=tmp)
    sha = HfApi().dataset_info(src["hub_id"], revision=src.get("revision")).sha
    atomic_write_text(Path(tmp) / "revision.txt", f"{src['hub_id']}@{sha}\n")
