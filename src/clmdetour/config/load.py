"""Reading config files: the bounded YAML loader, overlays merged and their removals, canonical params,
and :class:`ConfigError`, the one error class of a configuration value (its message names the key).

Snakemake reads and deep-merges the ``--configfiles`` itself; :func:`load_yaml` reads each file again with
the checks Snakemake lacks (a repeated key, an alias bomb, a yte template: :func:`check_config_files`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from clmdetour.errors import ExpectedError


class ConfigError(ExpectedError, ValueError):
    """A configuration value cannot be used; the message names the key."""

    __module__ = "clmdetour.config"  # its public home (tracebacks name it so): ``from clmdetour.config import ConfigError``


def key_path(path) -> str:
    """A key path in the config's own spelling: ``("pretraining", "phase1", "freeze", 0)`` ->
    ``pretraining.phase1.freeze[0]`` (``<root>`` for the empty path)."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


def deep_merge(base: dict, over: dict) -> dict:
    """``base`` overlaid by ``over`` key by key, as Snakemake merges ``--configfiles`` (mappings merge, any other
    value, lists included, replaces); neither argument is modified."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def drop_removed_variants(config: dict) -> list[str]:
    """Remove the variants an overlay sets to ``null``, in place; return their names.

    Snakemake deep-merges ``--configfile`` overlays over ``config/config.yaml``, so
    an overlay inherits every variant of the paper config. ``clm-freeze-low-emb:
    null`` under ``pretraining.variants`` takes one out (the demo and real-small
    drop the paper-only ablations this way). A removed variant named by another
    variant's ``phase1_from`` is then reported by the cross-checks.
    """
    variants = (config.get("pretraining") or {}).get("variants")
    if not isinstance(variants, dict):
        return []
    removed = [name for name, v in variants.items() if v is None]
    for name in removed:
        del variants[name]
    return removed


REMOVABLE_SECTIONS = ("tasks", "reference_models")


def drop_removed_entries(config: dict) -> dict[str, list[str]]:
    """Remove the tasks and reference models an overlay sets to ``null``, in place; return their names.

    The same rule as :func:`drop_removed_variants`, for the other named sections an overlay inherits
    from ``config/config.yaml`` by Snakemake's deep merge: ``tasks: {emea: null}`` takes the task out
    of the configuration (it is then neither fetched, prepared, decontaminated against nor evaluated),
    ``reference_models: {drbert-7gb: null}`` a reference row (``config/english.yaml`` replaces the
    French grid this way). ``evaluation.tasks`` / ``evaluation.models`` only choose what enters the grid.

    Returns:
        ``{section: [removed names]}`` for the sections in :data:`REMOVABLE_SECTIONS` that had any.
    """
    removed = {}
    for section in REMOVABLE_SECTIONS:
        entries = config.get(section)
        if not isinstance(entries, dict):
            continue
        names = [name for name, v in entries.items() if v is None]
        for name in names:
            del entries[name]
        if names:
            removed[section] = names
    return removed


#: Nodes that aliases may add to one YAML file's tree: a config needs few; 8 nested levels of 10 aliases
#: (an "alias bomb" of 90 lines) would add 10^8, and walking them took minutes and gigabytes.
MAX_ALIAS_NODES = 10_000


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (plain YAML keeps the last value silently),
    and refusing, while it composes, aliases that expand to more than :data:`MAX_ALIAS_NODES` nodes (or an
    alias inside its own anchor): the tree is never built, so reading a file costs time and memory in
    proportion to its text and the limit."""

    def __init__(self, stream):
        super().__init__(stream)
        self._expanded: dict[int, int] = {}  # id(node) -> nodes of its tree once every alias is expanded
        self._alias_nodes = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias: PyYAML's own error follows
                self._count_alias(event, node)
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        children = node.value if isinstance(node, yaml.SequenceNode) else (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
        self._expanded[id(node)] = 1 + sum(self._expanded[id(child)] for child in children)
        return node

    def _count_alias(self, event, node) -> None:
        """Add the nodes alias ``event`` stands for; refuse past the limit, naming the line."""
        size = self._expanded.get(id(node))
        if size is None:
            raise yaml.composer.ComposerError(None, None, f"alias *{event.anchor} is inside its own anchor (a "
                                              "recursive structure, which no config key takes)", event.start_mark)
        self._alias_nodes += size
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (at *{event.anchor}), more than "
                "any config needs: refused before the file is built. Snakemake loads --configfiles without such a "
                "bound: check an overlay you did not write with `python -m clmdetour.pipeline.check_config FILES...` "
                "before giving it to snakemake", event.start_mark)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                break
            if first is not None:
                where = f"line {line}" if first == line else f"lines {first} and {line}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping ({where}); YAML would keep only the "
                    "last value", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


#: The key that makes Snakemake render a config file with yte (Python expressions run while it plans).
YTE_KEY = "__use_yte__"


def load_yaml(path: str | Path) -> dict:
    """Read a config YAML file; errors name the file and line.

    Raises:
        ConfigError: the file is missing, is not valid YAML, repeats a key in one mapping, has aliases that
            expand past :data:`MAX_ALIAS_NODES` nodes (refused while reading, in bounded time and memory), or
            does not hold a mapping at its top level.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
        try:  # JSON first, as Snakemake reads config files (a tab-indented JSON file is valid JSON, not YAML)
            data = json.loads(text, object_pairs_hook=lambda pairs: _unique_json_object(pairs, path))
        except json.JSONDecodeError:
            data = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{where} invalid YAML: {getattr(e, 'problem', e)}") from None
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text (byte {e.start}); "
                          "save the file as UTF-8") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file holds a mapping of keys at its top level, not a "
                          f"{type(data).__name__}")
    return data


def _unique_json_object(pairs: list, path: Path) -> dict:
    """``json.loads``'s object hook: a dict, refusing a key repeated in one object."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{path}: key {key!r} appears twice in one JSON object; JSON readers keep only the "
                              "last value")
        out[key] = value
    return out


def check_config_files(paths: list[str | Path], allow_yte: bool = False) -> None:
    """Check the config files Snakemake merged (``workflow.configfiles``), which it reads without these checks.

    Each file is read again with :func:`load_yaml` (a key repeated in one mapping is refused: Snakemake
    keeps the last value silently). A file with ``__use_yte__: true`` is a yte template: Snakemake runs
    its Python expressions while it plans, before this check can stop anything, so such a file is code
    and this workflow refuses it unless ``allow_yte_configs: true`` (README, "Config files are code").

    Raises:
        ConfigError: naming the file (and line) of the first problem.
    """
    for path in paths:
        data = load_yaml(path)
        if data.get(YTE_KEY) and not allow_yte:
            raise ConfigError(f"{path}: {YTE_KEY}: true makes Snakemake run the file's Python expressions (yte) "
                              "whenever it plans, like a script: under snakemake, its expressions have already been "
                              "evaluated by Snakemake (it renders config files before the workflow starts, so before "
                              "this check); this workflow refuses templated config files unless a config file sets "
                              "allow_yte_configs: true. Before using an overlay you did not write, run "
                              "`python -m clmdetour.pipeline.check_config FILES...` (it reads templates as plain "
                              "YAML and runs nothing)")


def canonical(value: Any) -> Any:
    """A rule param in canonical form: mappings with sorted keys, only JSON's plain types.

    Snakemake decides that a finished job's "params have changed" by comparing
    the ``repr`` of each param with the one recorded when the job ran; the
    ``repr`` of a dict follows its insertion order, which for config sections
    follows the order in which config files were merged. Every rule param goes
    through this function, so that order never reschedules a job. Tuples become lists; numbers, strings, booleans and None stay.

    Raises:
        TypeError: a value JSON cannot represent (e.g. a set or a Path object);
            the message is ``json``'s, naming the type.
    """
    return json.loads(json.dumps(value, sort_keys=True))
