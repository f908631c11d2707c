"""Generate config/README.md from the JSON schema (one source of truth for keys, units, defaults).

Usage: ``python -m clmdetour.config_docs > config/README.md`` (a test checks it is up to date).
"""

from __future__ import annotations

import json
import sys

from clmdetour.config import SCHEMA_DIR, load_schema_registry

HEADER = """# Configuration keys

Generated from `workflow/schemas/*.schema.yaml` by `python -m clmdetour.config_docs > config/README.md`
(do not edit by hand; `tests/test_config_docs.py` checks it is current).

`config/config.yaml` is the paper's recipe at full scale. Overlays change sizes only:
`config/demo.yaml` (embedded demo on CPU, used by `profiles/local`), `config/real-small.yaml`
(real French data from `../shared/data`, small model), `config/large.yaml` (the Large size); or the
language: `config/english.yaml` (the English half: `language: en`, ModernBERT-base, Biomed-Enriched,
the ModernBERT-bio card's tasks), `config/english-large.yaml` (merged after `config/large.yaml`) and
`config/real-small-en.yaml` (merged after `config/english.yaml`: real English data from
`../shared/data/english`, small model, `profiles/real-small-en`); or the models compared:
`config/peers.yaml` (the newest French biomedical encoders as reference models).
Overlays merge key by key; lists are replaced; in `tasks`, `reference_models` and
`pretraining.variants`, a `null` entry removes that name.
The whole config is validated when the workflow loads: an unknown key, a wrong type or an impossible
value stops the run with a one-line message naming the key. Units: tokens are tokens, times are in the
unit the key names (`_s`, `_min`), memory in MB.

| key | type | default | description |
|---|---|---|---|
"""


def _type(schema: dict) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    t = schema.get("type", "object" if "properties" in schema else "")
    return " or ".join(t) if isinstance(t, list) else str(t)


def _resolve(schema: dict, registry, base: str) -> tuple[dict, str]:
    """Follow ``$ref`` (``file#/pointer`` or ``#/pointer`` within ``base``); returns (schema, its file)."""
    while "$ref" in schema:
        file, _, frag = schema["$ref"].partition("#")
        file = file or base
        target = registry.contents(file)
        for part in [p for p in frag.split("/") if p]:
            target = target[part]
        schema, base = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}, file
    for sub in schema.get("allOf", []):
        inner, inner_base = _resolve(sub, registry, base)
        schema = {**inner, **{k: v for k, v in schema.items() if k != "allOf"}}
        base = inner_base
    return schema, base


def _rows(schema: dict, registry, path: str, out: list[str], base: str = "config.schema.yaml") -> None:
    schema, base = _resolve(schema, registry, base)
    props = schema.get("properties")
    if path:
        default = json.dumps(schema["default"], ensure_ascii=False).replace("|", "\\|") if "default" in schema and not props else ""
        desc = " ".join(str(schema.get("description", "")).split()).replace("|", "\\|")
        out.append(f"| `{path}` | {_type(schema)} | {default} | {desc} |")
    for name, sub in (props or {}).items():
        _rows(sub, registry, f"{path}.{name}" if path else name, out, base)
    items = schema.get("items")
    if isinstance(items, dict):
        items_r, items_base = _resolve(items, registry, base)
        if items_r.get("properties"):
            _rows(items_r, registry, f"{path}[]", out, items_base)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        extra_r, extra_base = _resolve(extra, registry, base)
        if extra_r.get("properties"):
            _rows(extra_r, registry, f"{path}.<name>", out, extra_base)


def render() -> str:
    """The Markdown text of config/README.md."""
    registry = load_schema_registry(SCHEMA_DIR)
    rows: list[str] = []
    _rows(registry.contents("config.schema.yaml"), registry, "", rows)
    return HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
