"""Issue 59 item 2: task file formats have one registry (clmdetour.tasks.fileformats); no module of tasks/ compares
a format's name; a format added through the registry only is read, checked and prepared like the others."""
import json
from pathlib import Path

import pytest
import yaml
from test_registries import _compared_literals

from clmdetour.tasks import fileformats
from clmdetour.tasks.fileformats import FILES, FORMATS, TaskFormat, get_format, hub_formats, local_formats
from clmdetour.tasks.prepare import prepare_task
from clmdetour.tasks.spec import TaskError, format_description, resolve_task_spec, sources
from clmdetour.tasktypes import TASK_TYPES

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "src" / "clmdetour" / "tasks"
#: The readers, which tell their own dialects apart (a table's quoting, a BigBIO export's columns), and the registry.
READERS = {"formats.py", "bigbio.py"}


def format_branches(tasks: Path = TASKS) -> list[str]:
    """Where a module of ``tasks/`` (outside ``fileformats/`` and the readers) compares a format's name."""
    bad = []
    for path in sorted(tasks.rglob("*.py")):
        rel = path.relative_to(tasks).as_posix()
        if rel.startswith("fileformats/") or rel in READERS:
            continue
        bad += _compared_literals(path, set(FORMATS), rel)
    return bad


def test_no_module_of_tasks_compares_a_format_name():
    assert format_branches() == []


def test_the_search_finds_a_planted_comparison(tmp_path):
    (tmp_path / "fileformats").mkdir()
    (tmp_path / "fileformats" / "x.py").write_text('def f(s):\n    return s["format"] == "brat"\n')
    (tmp_path / "manifest.py").write_text('def f(s):\n    return s["format"] in ("conll", "iob_tsv")\n')
    assert format_branches(tmp_path) == ["manifest.py:2: 'conll'", "manifest.py:2: 'iob_tsv'"]


def _enum(key: str) -> list:
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "tasks.schema.yaml").read_text())
    props = schema["$defs"]["tasks"]["additionalProperties"]["properties"]
    return [v for v in props[key]["enum"] if v is not None]


def test_the_schema_enums_are_the_registry():
    assert _enum("format") == list(local_formats())
    assert _enum("source") == list(sources())
    assert hub_formats()[0] == "hub" and not FORMATS["hub"].local  # a hub task's format null is read with datasets


def test_every_format_describes_its_files_and_a_bad_entry_is_refused():
    for name, fmt in FORMATS.items():
        spec = {"format": name, "type": fmt.gives(TASK_TYPES)[0],
                "text_field": "text", "label_field": "label", "tag_column": -1, "tag_scheme": "iob2",
                "words_field": "words", "tags_field": "tags"}
        assert format_description(spec).strip(), name
    with pytest.raises(ValueError, match="a files format needs its extension"):
        TaskFormat("x", FILES, describe=str, read_unit=lambda r, p, s: [])
    with pytest.raises(ValueError, match="registered twice"):
        fileformats.register(FORMATS["csv"])
    with pytest.raises(KeyError, match="tasks.t.format: unknown task format 'xml'"):
        get_format("xml", "tasks.t.format")


#: The toy ``lines`` format (one ``label<TAB>text`` a line) as a module of ``fileformats/``: loaded here, and
#: written into a copy of the checkout by tests/test_extending_recipes.py.
LINES_MODULE = '''"""A toy format: one ``label<TAB>text`` a line."""

from clmdetour.tasks.fileformats.base import FILES, TaskFormat


def _read(reader, path, sub):
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        label, text = line.split("\\t", 1)
        rows.append({"id": f"{path.stem}-{n}", "text": text, "label": label, "where": f"{path}:{n}",
                     "doc": f"{path.stem}-{n}", "raw_label": label})
    return rows


ENTRIES = (TaskFormat("lines", FILES, extension="txt", describe=lambda spec: "label<TAB>text lines",
                      read_unit=_read, types=("multiclass",)),)
'''


def test_a_format_added_through_the_registry_only_prepares_a_task(tmp_path, monkeypatch):
    """A toy ``lines`` format (one ``label<TAB>text`` a line) registered with its reader and the type it gives:
    no other module is edited, and the task is resolved, read, checked and written with a manifest."""
    module: dict = {}
    exec(compile(LINES_MODULE, "lines.py", "exec"), module)  # noqa: S102 (the test's own source)
    (toy,) = module["ENTRIES"]
    monkeypatch.setitem(FORMATS, "lines", toy)
    src = tmp_path / "src"
    src.mkdir()
    texts = {"train": [("a", f"le patient {i} tousse") if i % 2 else ("b", f"fracture du bras {i}") for i in range(8)],
             "dev": [("a", "toux sèche persistante"), ("b", "fracture ouverte")],
             "test": [("b", "fracture du col"), ("a", "toux grasse")]}
    for split, rows in texts.items():
        (src / f"{split}.txt").write_text("".join(f"{label}\t{text}\n" for label, text in rows), encoding="utf-8")
    spec = {"type": "multiclass", "source": "user", "format": "lines", "path": str(src)}
    resolved = resolve_task_spec("toy", spec)
    assert resolved["splits"] == {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}  # its extension
    out = tmp_path / "results" / "tasks" / "toy"
    manifest = prepare_task("toy", spec, out)
    assert json.loads((out / "labels.json").read_text())["labels"] == ["a", "b"]
    assert manifest["counts"] == {"train": 8, "dev": 2, "test": 2}
    assert manifest["ids"]["train"] == "document / sentence position"  # no named fields: position ids
    with pytest.raises(TaskError, match=r"format 'lines' gives \('multiclass',\) tasks, not 'ner'"):
        resolve_task_spec("toy", dict(spec, type="ner"))
    monkeypatch.delitem(FORMATS, "lines")
    with pytest.raises(TaskError, match="tasks.toy.format: a 'user' task needs format"):
        resolve_task_spec("toy", spec)  # without its entry, the name is unknown


# ---------------------------------------------------------------- issue 59 item 4: the type object passed on


class _Counting(dict):
    """The type registry, counting the lookups of a name."""

    lookups = 0

    def __getitem__(self, key):
        type(self).lookups += 1
        return super().__getitem__(key)


def test_a_task_preparation_resolves_its_type_name_once(tmp_path, monkeypatch):
    import clmdetour.tasks.spec as spec_module
    from clmdetour.tasks import contract, reading

    counting = _Counting(TASK_TYPES)
    _Counting.lookups = 0
    monkeypatch.setattr(spec_module, "TASK_TYPES", counting)
    monkeypatch.setattr(contract, "TASK_TYPES", counting)

    def lookup(name, where="type"):
        return counting[name]

    monkeypatch.setattr(reading, "get_task_type", lookup)
    monkeypatch.setattr(contract, "get_task_type", lookup)
    src = tmp_path / "src"
    src.mkdir()
    for split, n in (("train", 6), ("dev", 2), ("test", 2)):
        (src / f"{split}.jsonl").write_text("".join(json.dumps({"id": f"{split}{i}", "text": f"texte {split} {i}",
                                                                "label": "ab"[i % 2]}) + "\n" for i in range(n)))
    from clmdetour.tasks.prepare import build_task

    rows, labels_json, _ = build_task("toy", {"type": "multiclass", "source": "jsonl", "path": str(src), "id_field": "id"})
    assert labels_json["type"] == "multiclass" and len(rows["train"]) == 6
    assert _Counting.lookups == 1  # resolve_task, then the object goes to the reader, the labels and the manifest


def test_task_settings_hold_the_type_object():
    from clmdetour.config import ConfigError
    from clmdetour.tasks.settings import TaskSettings

    block = {"lr_grid": [1e-4], "epochs": 1, "batch_size": 2, "warmup_ratio": 0.0, "betas": [0.9, 0.98],
             "eps": 1e-6, "weight_decay": 0.0}
    params = {"type": "ner", "metric": None, "max_length": 16, "finetune": block}
    settings = TaskSettings.from_dict(params, "tasks.emea")
    assert settings.type is TASK_TYPES["ner"] and settings.metric == TASK_TYPES["ner"].default_metric
    assert settings.as_dict()["type"] == "ner"
    with pytest.raises(ConfigError, match=r"tasks\.emea\.type: 'nerr' is not one of"):
        TaskSettings.from_dict(dict(params, type="nerr"), "tasks.emea")
    with pytest.raises(ConfigError, match=r"tasks\.emea\.metric: 'spearman' is not a metric of a ner task"):
        TaskSettings.from_dict(dict(params, metric="spearman"), "tasks.emea")
    with pytest.raises(ConfigError, match="not a task type object"):
        TaskSettings("ner", "f1_micro", 16, settings.finetune)
