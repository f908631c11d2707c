"""Print, as JSON, every job's params as Snakemake records them (sorted reprs), for a DAG target."""
import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

repo, workdir, target, *configfiles = sys.argv[1:]
with SnakemakeApi(OutputSettings(quiet=set())) as api:
    wapi = api.workflow(resource_settings=ResourceSettings(cores=1),
                        config_settings=ConfigSettings(configfiles=[Path(c) for c in configfiles]),
                        snakefile=Path(repo) / "Snakefile", workdir=Path(workdir))
    dapi = wapi.dag(dag_settings=DAGSettings(targets={target}, forceall=True))
    wf = dapi.workflow_api._workflow
    wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
    wf._build_dag()
    out = {}
    for job in wf.dag.jobs:
        key = f"{job.rule.name}[{','.join(f'{k}={v}' for k, v in job.wildcards.items())}]"
        out[key] = sorted(repr(v) for v in job.non_derived_params)
print("PARAMS_JSON=" + json.dumps(out, sort_keys=True))
