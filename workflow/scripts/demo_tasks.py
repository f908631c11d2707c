"""demo_task_source: write one generated demo task source in its real format (clmdetour.demo.tasks)."""
from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.demo.tasks import write_demo_source

p = snakemake.params
write_demo_source(snakemake.wildcards.demo_source, snakemake.output.folder, seed=p.seed,
                  n_train=p.n_train, n_dev=p.n_eval, n_test=p.n_eval, noise=p.noise)
