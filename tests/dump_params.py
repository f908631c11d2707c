"""Print, as JSON, every job's params as Snakemake records them (sorted reprs), for a DAG target.

Usage: dump_params.py REPO WORKDIR TARGET [CONFIGFILE ...] [--config KEY=VALUE ...]

Also prints the resolved config (``CONFIG_JSON=``), the input files of the
target's own job when the target is a rule (``TARGET_INPUT_JSON=``), the names of
the workflow's rules (``RULES_JSON=``) and those clmdetour.pipeline declares
(``PIPELINE_RULES_JSON=``).
"""
import json
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings

repo, workdir, target, *rest = sys.argv[1:]
configfiles = rest[: rest.index("--config")] if "--config" in rest else rest
overrides = {}
for item in rest[rest.index("--config") + 1:] if "--config" in rest else []:
    key, value = item.split("=", 1)
    overrides[key] = json.loads(value)
with SnakemakeApi(OutputSettings(quiet=set())) as api:
    wapi = api.workflow(resource_settings=ResourceSettings(cores=1),
                        config_settings=ConfigSettings(configfiles=[Path(c) for c in configfiles], config=overrides),
                        snakefile=Path(repo) / "Snakefile", workdir=Path(workdir))
    dapi = wapi.dag(dag_settings=DAGSettings(targets={target}, forceall=True))
    wf = dapi.workflow_api._workflow
    wf._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True)
    wf._build_dag()
    out = {}
    target_input = []
    for job in wf.dag.jobs:
        key = f"{job.rule.name}[{','.join(f'{k}={v}' for k, v in job.wildcards.items())}]"
        out[key] = sorted(repr(v) for v in job.non_derived_params)
        if job.rule.name == target:
            target_input = sorted(str(f) for f in job.input)
    config = json.loads(json.dumps(wf.config, default=str))
    rules = sorted(r.name for r in wf.rules)
    declared = sorted(wf.globals["PIPELINE"].rule_names())
print("PARAMS_JSON=" + json.dumps(out, sort_keys=True))
print("CONFIG_JSON=" + json.dumps(config, sort_keys=True))
print("TARGET_INPUT_JSON=" + json.dumps(target_input))
print("RULES_JSON=" + json.dumps(rules))
print("PIPELINE_RULES_JSON=" + json.dumps(declared))
