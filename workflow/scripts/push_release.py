"""Rule push_release: upload results/release/{variant}/ to the Hub in one commit; write the receipt.

The token comes from HF_TOKEN or `hf auth login` (huggingface_hub.get_token) and is never logged or written.
"""

import logging
import sys

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake, logging.WARNING)

from clmdetour.io import atomic_write_json, read_json
from clmdetour.release.push import push_release

variant = snakemake.wildcards.variant
git_sha = str(read_json(snakemake.input.decay_run).get("git_sha", "unknown"))[:12]
receipt = push_release(
    snakemake.input.staged,
    snakemake.params.repo_id,
    private=bool(snakemake.params.private),
    commit_message=snakemake.params.commit_message.format(variant=variant, git_sha=git_sha),
)
receipt["variant"] = variant
atomic_write_json(snakemake.output[0], receipt)
print(f"pushed {variant} to {receipt['url']} at {receipt['commit_sha']}", file=sys.stderr)
