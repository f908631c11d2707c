"""Rule eval_table: seed records + task folders -> eval_runs.tsv, eval_table.tsv, eval_table.md, eval_ranking.tsv
(clmdetour.evaluation.table, clmdetour.evaluation.ranking)."""
import logging

from clmdetour.smk import redirect_to_log

redirect_to_log(snakemake)

from clmdetour.evaluation.table import write_eval_tables

p = snakemake.params
present = set(snakemake.input.records)
expected = [(m, t, int(s)) for m, t, s, _ in p.runs]
paths = {(m, t, int(s)): path for m, t, s, path in p.runs if path in present}
table = write_eval_tables(expected=expected, paths=paths, models=p.models, tasks=p.tasks, baseline=p.baseline,
                          allow_missing=p.allow_missing, runs_tsv=snakemake.output.runs,
                          table_tsv=snakemake.output.table, table_md=snakemake.output.md, scale=p.scale,
                          tie_tolerance=p.tie_tolerance, task_dirs=dict(p.task_dirs), task_metrics=dict(p.task_metrics),
                          left_out=dict(p.left_out), control=p.control, extra_metrics=dict(p.table_metrics),
                          ranking_tsv=snakemake.output.ranking)
logging.getLogger(__name__).info("table: %d models x %d tasks from %d of %d runs", len(table) - 1, len(p.tasks), len(paths), len(expected))
