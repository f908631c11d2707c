"""Plan a forced DAG in a subprocess (tests/dump_params.py) and read back its jobs' params."""
import json
import subprocess
import sys
from pathlib import Path

from helpers import REPO, clean_env


def plan(workdir: Path, target: str, configfiles: list[str], overrides: dict | None = None,
         rules: dict | None = None) -> tuple[dict, dict, list]:
    """(params of every job, resolved config, input files of the target's job) of a forced DAG;
    ``rules``, when given, receives the workflow's rule names and those clmdetour.pipeline declares."""
    args = [sys.executable, str(REPO / "tests/dump_params.py"), str(REPO), str(workdir), target, *configfiles]
    if overrides:
        args += ["--config", *(f"{k}={json.dumps(v)}" for k, v in overrides.items())]
    r = subprocess.run(args, cwd=workdir, capture_output=True, text=True, timeout=300, env=clean_env(), check=False)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    lines = dict(line.split("=", 1) for line in r.stdout.splitlines() if line.split("=", 1)[0].endswith("_JSON"))
    if rules is not None:
        rules.update(workflow=json.loads(lines["RULES_JSON"]), pipeline=json.loads(lines["PIPELINE_RULES_JSON"]))
    return json.loads(lines["PARAMS_JSON"]), json.loads(lines["CONFIG_JSON"]), json.loads(lines["TARGET_INPUT_JSON"])
