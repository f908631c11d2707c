"""docs/fidelity.md cannot drift: its config column is checked against the validated paper config."""
import importlib
import re

import pytest
import yaml
from helpers import REPO

from clmdetour.config import load_yaml, resolve_phase, validate_config

PAGE = REPO / "docs/fidelity.md"
PAIR = re.compile(r"`([^`]+)` = ([^;|]+?)\s*(?:;|$)")
CODE = re.compile(r"code: ([\w.]+)")
REQUIRED = ["tokens of phase 1", "data mix", "warm-up", "learning rate", "betas", "eps", "weight decay",
            "global batch", "precision", "masking rate", "freeze ranges", "input limit", "decontamination",
            "document boundaries", "licence"]


def page_rows() -> list[tuple[str, str]]:
    """``(value, config cell)`` of every table row of the page."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and line.startswith("|") and cells[0] not in ("value", "---"):
            rows.append((cells[0], cells[2]))
    return rows


def lookup(cfg: dict, key: str):
    """A validated-config value by dotted key (``a.b[0].c``), or a resolved phase key (``resolved.{variant}.{phase}.k``)."""
    if key.startswith("resolved."):
        _, variant, phase, *rest = key.split(".")
        node = resolve_phase(cfg, variant, phase)
    else:
        node, rest = cfg, key.split(".")
    for part in rest:
        m = re.fullmatch(r"([\w-]+)((?:\[\d+\])*)", part)
        assert m, f"docs/fidelity.md: cannot parse key {key!r}"
        node = node[m.group(1)]
        for i in re.findall(r"\[(\d+)\]", m.group(2)):
            node = node[int(i)]
    return node


def test_page_covers_the_recipe_and_every_row_is_checkable():
    rows = page_rows()
    values = " / ".join(v for v, _ in rows)
    for name in REQUIRED:
        assert name in values, f"docs/fidelity.md has no row for {name!r}"
    for value, cell in rows:
        assert PAIR.search(cell) or CODE.search(cell), f"docs/fidelity.md row {value!r}: nothing checkable in {cell!r}"


def test_config_column_matches_the_validated_paper_config():
    cfg = validate_config(load_yaml(REPO / "config/config.yaml"))
    checked = 0
    for value, cell in page_rows():
        for key, raw in PAIR.findall(cell):
            expected = yaml.safe_load(raw)
            actual = lookup(cfg, key)
            if isinstance(expected, float) or isinstance(actual, float):
                assert actual == pytest.approx(expected), f"docs/fidelity.md row {value!r}: {key} is {actual!r}, page says {raw}"
            else:
                assert actual == expected, f"docs/fidelity.md row {value!r}: {key} is {actual!r}, page says {raw}"
            checked += 1
        for module in CODE.findall(cell):
            importlib.import_module(module)
    assert checked >= 30


def test_the_check_fails_on_a_drifted_value():
    cfg = validate_config(load_yaml(REPO / "config/config.yaml"))
    cfg["pretraining"]["optimizer"]["betas"] = [0.9, 0.999]
    [(key, raw)] = [p for _, cell in page_rows() for p in PAIR.findall(cell) if p[0] == "pretraining.optimizer.betas"]
    assert lookup(cfg, key) != yaml.safe_load(raw)
    assert lookup(cfg, "resolved.clm-freeze-low-emb.phase1.freeze") == ["embeddings", "0-7"]
