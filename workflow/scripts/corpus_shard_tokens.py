"""One corpus shard's token job: its kept documents tokenised into ids.bin and docs.parquet."""
import os

# the tokenizer's own threads: the job's CPUs (read by the Rust library at its first parallel call)
os.environ["RAYON_NUM_THREADS"] = str(snakemake.threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if snakemake.threads > 1 else "false"

from clmdetour.corpus.shards import shard_tokens
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)
record = shard_tokens(snakemake.input.text, snakemake.input.tokenizer, snakemake.output.folder,
                      snakemake.params.batch_size)
print(f"shard {record['shard']}: {record['tokens']:,} tokens ({record['token_dtype']}), {record}")
