"""The variation axes live in one registry each: task types, pretraining objectives, attention back-ends.

These tests fail when a module outside a registry branches on a task type's or an
objective's name (in ``src/``, ``benchmarks/`` or ``workflow/scripts/``), or when a config schema's
enum and its registry disagree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from clmdetour.modeling.attention import BACKENDS, CHOICES, select_attn_implementation
from clmdetour.objectives import DECAY_OBJECTIVE, OBJECTIVES, get_objective
from clmdetour.tasktypes import TASK_TYPES, get_task_type

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "clmdetour"
SCHEMAS = ROOT / "workflow" / "schemas"
CODE = (SRC, ROOT / "benchmarks", ROOT / "workflow" / "scripts")  # the folders the registry rule covers



def _compared_literals(path: Path, names: set[str], shown: str | None = None) -> list[str]:
    """Where a string literal in ``names`` is compared, tested for membership, or used as a key
    (``shown:line: 'name'``; ``shown`` defaults to the file name)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    hits = []
    for node in ast.walk(tree):
        consts = []
        if isinstance(node, ast.Compare):
            for part in [node.left, *node.comparators]:
                if isinstance(part, ast.Constant):
                    consts.append(part)
                elif isinstance(part, (ast.Tuple, ast.List, ast.Set)):
                    consts += [e for e in part.elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Dict):
            consts += [k for k in node.keys if isinstance(k, ast.Constant)]
        hits += [f"{shown or path.name}:{c.lineno}: {c.value!r}" for c in consts if c.value in names]
    return hits


def registry_branches(folders=CODE, src: Path = SRC, root: Path = ROOT) -> list[str]:
    """Where a module of ``folders`` branches on a task type's name (outside ``src``'s ``tasktypes/``)
    or an objective's name (outside ``src``'s ``objectives.py``): :func:`_compared_literals`, each
    file shown by its path relative to ``root``."""
    bad = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(src).as_posix() if path.is_relative_to(src) else None
            shown = path.relative_to(root).as_posix()
            if rel is None or not rel.startswith("tasktypes/"):
                bad += _compared_literals(path, set(TASK_TYPES), shown)
            if rel != "objectives.py":
                bad += _compared_literals(path, set(OBJECTIVES), shown)
    return bad


def test_no_module_outside_the_registries_branches_on_a_task_type_or_objective_name():
    bad = registry_branches()
    assert not bad, "branches on a registry name outside its registry:\n" + "\n".join(bad)


def test_the_registry_rule_reads_benchmarks_and_scripts(tmp_path):
    """Planted in a tmp copy of the three folders: a branch on a name inside each registry is allowed,
    the same branch in a library module, a benchmark or a job script is found."""
    branch = 'def f(t):\n    return t == "{}"\n'
    files = {"src/clmdetour/tasktypes/x.py": branch.format("ner"), "src/clmdetour/objectives.py": branch.format("clm"),
             "src/clmdetour/lib.py": branch.format("multiclass"), "benchmarks/bench.py": branch.format("multilabel"),
             "workflow/scripts/job.py": branch.format("mlm")}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    src = tmp_path / "src" / "clmdetour"
    found = registry_branches((src, tmp_path / "benchmarks", tmp_path / "workflow" / "scripts"), src, tmp_path)
    assert found == ["src/clmdetour/lib.py:2: 'multiclass'", "benchmarks/bench.py:2: 'multilabel'",
                     "workflow/scripts/job.py:2: 'mlm'"]


def test_the_literal_search_finds_a_branch(tmp_path):
    # the search above must be able to fail: planted branches are found, a mere mention is not
    planted = tmp_path / "planted.py"
    planted.write_text('def f(t):\n    """ner here"""\n    x = "mlm"\n'
                       '    return 1 if t == "multilabel" else {"clm": 2} if t in ("ner", "a") else x\n')
    hits = _compared_literals(planted, set(TASK_TYPES) | set(OBJECTIVES))
    assert sorted(h.split(": ")[1] for h in hits) == ["'clm'", "'multilabel'", "'ner'"]


def _enum(schema: str, *keys: str) -> list:
    node = yaml.safe_load((SCHEMAS / schema).read_text())
    found = []

    def walk(n):
        if isinstance(n, dict):
            for k, v in n.items():
                if k in keys and isinstance(v, dict) and "enum" in v:
                    found.append([x for x in v["enum"] if x is not None])
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(node)
    return found


def test_schema_enums_match_the_registries():
    assert _enum("tasks.schema.yaml", "type") == [list(TASK_TYPES)]
    assert _enum("pretrain.schema.yaml", "objective") == [list(OBJECTIVES)]
    attn = _enum("pretrain.schema.yaml", "attn_implementation") + _enum("tasks.schema.yaml", "attn_implementation")
    assert attn and all(e == list(CHOICES) for e in attn)
    # the analysis forward passes run on CPU: its enum is the back-ends that need no GPU
    assert _enum("analysis.schema.yaml", "attn_implementation") == [[n for n, b in BACKENDS.items() if not b.needs_gpu]]
    metrics = _enum("tasks.schema.yaml", "metric")
    assert metrics and all(set(m) <= {x for t in TASK_TYPES.values() for x in t.metrics} for m in metrics)


def test_registry_lookups_name_the_key_on_an_unknown_name():
    with pytest.raises(ValueError, match=r"tasks\.x\.type: 'regression' is not one of"):
        get_task_type("regression", "tasks.x.type")
    with pytest.raises(ValueError, match=r"pretraining\.phase1\.objective: unknown objective 'ar'"):
        get_objective("ar", "pretraining.phase1.objective")
    with pytest.raises(ValueError, match="is not one of"):
        select_attn_implementation("flex_attentionx", on_gpu=False)


def test_objectives_say_what_differs():
    assert get_objective("clm").causal and not get_objective("mlm").causal
    assert get_objective(DECAY_OBJECTIVE) is OBJECTIVES["mlm"]
    assert get_objective("clm").predicted_fraction({"masking_rate": 0.15}) == 1.0
    assert get_objective("mlm").predicted_fraction({"masking_rate": 0.15}) == 0.15
    text = get_objective("mlm").card_text({"masking_rate": 0.3}, "sdpa")
    assert "30 %" in text and "bidirectional" in text
    assert "causal" in get_objective("clm").card_text({}, "eager")


def test_each_task_type_states_its_contract_and_wording():
    for name, t in TASK_TYPES.items():
        assert t.name == name
        assert t.default_metric in t.metrics
        assert t.hub_task and t.description and "F1" in t.averaging
        cols = list(t.features())
        assert cols[:2] == ["id", "text"] and len(cols) > 2
        rec = t.labels_record("demo", ["a", "b"], None)
        assert rec["type"] == name and rec["metric"] == t.default_metric
        assert t.model_labels(rec, "labels.json")
    assert TASK_TYPES["ner"].model_labels(TASK_TYPES["ner"].labels_record("d", ["X"], None), "w") == ["O", "B-X", "I-X"]
    with pytest.raises(ValueError, match="labels.json: ner task needs 'tags'"):
        TASK_TYPES["ner"].model_labels({"labels": ["X"]}, "labels.json")


def test_attention_auto_on_cpu_is_sdpa_and_named_backends_pass_through():
    assert select_attn_implementation("auto", on_gpu=False) == "sdpa"
    assert select_attn_implementation("eager", on_gpu=False) == "eager"
    with pytest.raises(RuntimeError, match="flash_attention_2 needs a CUDA GPU"):
        select_attn_implementation("flash_attention_2", on_gpu=False)



def test_every_objective_names_a_collator_class():
    from clmdetour.objectives import OBJECTIVES
    from clmdetour.training.collators import COLLATORS

    assert {o.collator for o in OBJECTIVES.values()} <= set(COLLATORS)
