"""Check config files as the workflow will read them, naming the file and line of each problem.

Usage: ``python -m clmdetour.pipeline.check_config config/config.yaml config/demo.yaml my.yaml``

Snakemake reads ``--configfiles`` before any code of this workflow runs, and its own messages for a
file it cannot read ("Config file is not valid JSON or YAML", "... with keys at top level") do not
name the file. This command reads each file with :func:`clmdetour.config.load_yaml` (a tab in the
indentation, an unknown anchor, a repeated key, a list at the top level, a missing file: the file and
line named), then validates their merge (:func:`clmdetour.config.validate_config`: the key named) and
runs the planning checks of the grid (:class:`clmdetour.pipeline.Pipeline`). A yte template is read
as plain YAML (its expressions are not run).
Exit status 0 when every check passes, 1 otherwise (one line per problem on stderr).
"""

from __future__ import annotations

import sys


def check(paths: list[str]) -> list[str]:
    """The problems of ``paths`` (each a one-line message naming the file or the key), in order.

    A file that does not parse stops the merge check (the merged config would not be the run's).
    """
    from clmdetour.config import YTE_KEY, ConfigError, _deep_merge, check_config_files, load_yaml, validate_config
    from clmdetour.pipeline import Pipeline
    from clmdetour.tasks.spec import TaskError, left_out_tasks

    problems, merged = [], {}
    for path in paths:
        try:
            data = load_yaml(path)
        except ConfigError as e:
            problems.append(str(e))
            continue
        if not data:
            problems.append(f"{path}: holds no keys (Snakemake refuses an empty config file)")
        data.pop(YTE_KEY, None)  # Snakemake's yte rendering removes it
        merged = _deep_merge(merged, data)
    if problems:
        return problems
    try:
        validate_config(merged)
        check_config_files(paths, allow_yte=merged["allow_yte_configs"])
        Pipeline(merged, left_out_tasks(merged))  # the planning checks of the evaluation grid and the rules
    except (ConfigError, TaskError) as e:
        problems.append(str(e))
    return problems


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    problems = check(paths)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not problems:
        print(f"ok: {' + '.join(paths)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
