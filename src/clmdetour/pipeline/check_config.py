"""Check config files as the workflow will read them, naming the file and line of each problem.

Usage: ``python -m clmdetour.pipeline.check_config config/config.yaml config/demo.yaml my.yaml [--config KEY=VALUE ...]``

Snakemake reads ``--configfiles`` and ``--config`` before any code of this workflow runs, and its own
messages for a file it cannot read ("Config file is not valid JSON or YAML", "... with keys at top
level", a traceback for a missing file, a folder or a byte that is not UTF-8) or for a ``--config``
value it cannot parse (a target after ``--config``, a dotted key) name no file. This command reads each
file with :func:`clmdetour.config.load_yaml` (a tab in the indentation, an unknown anchor, a repeated
key, a list at the top level, a missing file, aliases that expand past a bound: the file and line
named; it is the bounded read to give an overlay you did not write, as Snakemake's is not), the
``--config`` values as Snakemake does, then validates their merge
(:func:`clmdetour.config.validate_config`: the key named) and runs the planning checks of the grid
(:class:`clmdetour.pipeline.Pipeline`). A yte template is read as plain YAML (its expressions are not run).
Exit status 0 when every check passes, 1 otherwise (one line per problem on stderr).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path


def check(paths: list[str], config_args: list[str] | None = None) -> list[str]:
    """The problems of ``paths`` merged in order, then ``--config`` values ``config_args`` (each problem a
    one-line message naming the file, the value or the key), in order.

    A file or value that does not parse stops the merge check (the merged config would not be the run's).
    """
    from clmdetour.config import YTE_KEY, ConfigError, check_config_files, deep_merge, load_yaml, validate_config
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
        merged = deep_merge(merged, data)
    try:
        merged = deep_merge(merged, command_line_config(config_args or []))
    except ConfigError as e:
        problems.append(str(e))
    if problems:
        return problems
    try:
        validate_config(merged)
        check_config_files(paths, allow_yte=merged["allow_yte_configs"])
        pipe = Pipeline(merged, left_out_tasks(merged))  # the planning checks of the evaluation grid and the rules
        if pipe.empty_grid_error():
            problems.append(pipe.empty_grid_error())
    except (ConfigError, TaskError) as e:
        problems.append(str(e))
    return problems


#: Snakemake's rule for a ``--config`` key (snakemake.cli.parse_config): a top-level name, no dot.
CONFIG_KEY = re.compile(r"[a-zA-Z_][\w-]*\w$")


def command_line_config(entries: list[str]) -> dict:
    """The values of ``--config KEY=VALUE ...`` as Snakemake reads them (:func:`snakemake.cli.parse_config`:
    the value as YAML, nested values as strings that validation turns into numbers).

    Raises:
        ConfigError: an entry that is not ``KEY=VALUE`` (a target after ``--config``, which takes every value
            that follows it) or whose key Snakemake refuses (a dotted key), naming the entry and the fix.
    """
    from snakemake.cli import parse_config

    from clmdetour.config import ConfigError

    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep:
            raise ConfigError(f"--config {entry!r}: not KEY=VALUE; --config takes every value that follows it, so "
                              "a target after it is read as a config value: put the target before --config, or "
                              "after --")
        if "." in key:
            top, *inner = key.split(".")
            for name in reversed(inner):
                value = f"{{{name}: {value}}}"
            raise ConfigError(f"--config {entry!r}: Snakemake takes no dotted key ({key!r}); nest the value: "
                              f"--config {top}='{value}'")
        if not CONFIG_KEY.match(key):
            raise ConfigError(f"--config {entry!r}: {key!r} is not a config key Snakemake accepts (a letter or _, "
                              "then letters, digits, _ or -, at least 2 characters)")
    try:
        return parse_config(entries)
    except ValueError as e:
        raise ConfigError(f"--config: {e}") from None


def forgotten_profile_files(argv: list[str], environ, configfiles: list, basedir: str | Path) -> str:
    """The planning error when ``--configfiles`` replaced a profile's ``configfiles`` without repeating
    them ('' otherwise): ``snakemake --profile profiles/local --configfiles my.yaml`` planned the paper's
    full DAG under the CPU demo's profile without a word.

    Args:
        argv: Snakemake's command line (``sys.argv``): ``--profile X`` or ``--profile=X``, else the
            ``SNAKEMAKE_PROFILE`` variable of ``environ``; the last profile that lists ``configfiles`` counts.
        configfiles: the files Snakemake merged (``workflow.configfiles``); a profile's relative path
            matches a file whose path ends with it (Snakemake resolved them before ``directory:``).
        basedir: the workflow's folder, where a relative profile path is looked for after the current one.
    """
    from clmdetour.config import ConfigError, load_yaml

    names = [a.split("=", 1)[1] for a in argv if a.startswith("--profile=")]
    names += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--profile"]
    if not names and environ.get("SNAKEMAKE_PROFILE"):
        names = [environ["SNAKEMAKE_PROFILE"]]
    profile, listed = None, []
    for name in [] if "none" in names else names:
        for candidate in (Path(name), Path(basedir) / name):
            file = next((f for f in (candidate / "config.yaml", candidate / "profile.yaml") if f.is_file()),
                        None) if candidate.is_dir() else (candidate if candidate.is_file() else None)
            try:
                found = load_yaml(file).get("configfiles") if file else None
            except ConfigError:
                found = None
            if isinstance(found, list) and found:
                profile, listed = file, [str(f) for f in found]
                break
    given = [Path(os.path.abspath(f)) for f in configfiles]
    missing = [f for f in listed if not any(_same_file(g, f) for g in given)]
    if not missing:
        return ""
    extra = [_shown(g, basedir) for g in given if not any(_same_file(g, f) for f in listed)]
    return (f"{profile} lists configfiles {' '.join(listed)}, but --configfiles replaces that list (it does not add "
            f"to it): this run would plan without {', '.join(missing)}. Repeat the profile's files, yours last: "
            f"--configfiles {' '.join(listed + extra)} (a target goes before --configfiles, or after --)")


def _same_file(path: Path, listed: str) -> bool:
    """Whether the absolute ``path`` is the profile's ``listed`` file (relative: its last parts)."""
    parts = Path(os.path.normpath(listed)).parts
    return path == Path(listed) if Path(listed).is_absolute() else path.parts[-len(parts):] == parts


def _shown(path: Path, basedir: str | Path) -> str:
    """``path`` as the user would type it: relative to the workflow's folder when inside it."""
    try:
        return str(path.relative_to(Path(basedir).resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """Check the files (and ``--config`` values) of the command line; print one line per problem."""
    args = sys.argv[1:] if argv is None else argv
    args = [a for a in args if a not in ("--configfile", "--configfiles")]  # a snakemake command line, pasted
    at = next((i for i, a in enumerate(args) if a in ("--config", "-C")), len(args))
    paths, config_args = args[:at], args[at + 1:]
    if "--" in config_args:
        config_args = config_args[:config_args.index("--")]
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    problems = check(paths, config_args)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if not problems:
        print(f"ok: {' + '.join(paths)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
