"""Issue 59 items 1 and 6: docs/extending.md's lists of the files an extension takes are true.

Each extension (an objective with a knob, a task file format, an attention back-end, a relation type) is added in
a temporary copy of the checkout by writing only the files its table lists; then, in the copy, its own check
passes and the demo's dry run on the finished demo plans nothing: no finished job (pretraining included) moves
when a thing is added.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, clean_env, jobs
from test_task_formats_registry import LINES_MODULE

pytestmark = pytest.mark.slow

DOC = REPO / "docs" / "extending.md"
#: The table rows that are not files of the checkout (the extension's own test, its docs section).
NOT_FILES = ("a test", "`docs/tasks.md`")


def listed_files(heading: str) -> set[str]:
    """The files of the first table under ``heading`` in docs/extending.md (first column, each in backticks)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(heading)
    files = set()
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if not line.startswith("| ") or line.startswith(("| file", "|---", *(f"| {n}" for n in NOT_FILES))):
            continue
        cell = line.split("|")[1]
        files.update(f for f in re.findall(r"`([^`]+)`", cell) if "<" not in f)
        files.update(re.sub(r"<[^>]+>", "*", f) for f in re.findall(r"`([^`]+)`", cell) if "<" in f)
    return files


def copy_checkout(dest: Path) -> Path:
    """The checkout's tracked and untracked-not-ignored files, copied to ``dest`` (no .git, no .venv)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\n")
    for name in filter(None, names):
        if name.startswith((".gpu-wheels/", ".git/")) or not (REPO / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
    return dest


class Copy:
    """A copy of the checkout in which an extension writes files (each write recorded)."""

    def __init__(self, root: Path):
        self.root = copy_checkout(root)
        self.written: set[str] = set()

    def edit(self, rel: str, old: str, new: str, count: int = 1) -> None:
        path = self.root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) >= count, (rel, old)
        path.write_text(text.replace(old, new), encoding="utf-8")
        self.written.add(rel)

    def write(self, rel: str, text: str) -> None:
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.root / rel).write_text(text, encoding="utf-8")
        self.written.add(rel)

    def env(self) -> dict:
        return dict(clean_env(), PYTHONPATH=str(self.root / "src"))

    def python(self, code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], cwd=self.root, env=self.env(), capture_output=True,
                              text=True, timeout=300, check=False)

    def regenerate_config_readme(self) -> None:
        r = subprocess.run([sys.executable, "-m", "clmdetour.config_docs"], cwd=self.root, env=self.env(),
                           capture_output=True, text=True, timeout=120, check=True)
        self.write("config/README.md", r.stdout)

    def demo_dry_run(self, demo_dir: Path) -> str:
        """``snakemake -n all`` of the copy's Snakefile and config on the finished demo; its output."""
        cmd = [sys.executable, "-m", "snakemake", "-n", "all", "--cores", "2", "--snakefile", str(self.root / "Snakefile"),
               "--directory", str(demo_dir), "--configfiles", str(self.root / "config/config.yaml"),
               str(self.root / "config/demo.yaml")]
        r = subprocess.run(cmd, cwd=demo_dir, env=self.env(), capture_output=True, text=True, timeout=600, check=False)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return r.stdout + r.stderr

    def check_written_against(self, heading: str) -> None:
        listed = listed_files(heading)
        unlisted = {w for w in self.written if not any(Path(w).match(pat) for pat in listed)}
        assert not unlisted, f"written but not in docs/extending.md '{heading}': {sorted(unlisted)}"


def _assert_nothing_planned(out: str) -> None:
    assert "Nothing to be done" in out, out[-3000:]


SPAN_OBJECTIVE = '''

@dataclass(frozen=True)
class SpanSettings(ObjectiveSettings):
    """Span masking's own settings: ``span_length``, tokens per masked span."""

    span_length: int

    def labelled_fraction(self) -> float:
        return 0.15


OBJECTIVES: dict[str, Objective] = {'''


def test_an_objective_with_a_knob_takes_the_listed_files_and_moves_no_finished_job(demo_run, tmp_path):
    c = Copy(tmp_path / "repo")
    c.edit("src/clmdetour/objectives.py", "\n\nOBJECTIVES: dict[str, Objective] = {", SPAN_OBJECTIVE)
    c.edit("src/clmdetour/objectives.py", '''plot_style={"linestyle": ":", "linewidth": 2.0}),
''', '''plot_style={"linestyle": ":", "linewidth": 2.0}),
        Objective("span", causal=False, collator="MLMCollator", settings=SpanSettings,
                  describe=lambda section, impl: "span masking", plot_style={"linestyle": "-."}),
''')
    schema = "workflow/schemas/pretrain.schema.yaml"
    c.edit(schema, "objective: {enum: [clm, mlm],", "objective: {enum: [clm, mlm, span],")
    c.edit(schema, "      freeze: {$ref: \"#/$defs/freeze\"}\n",
           "      span_length: {type: integer, minimum: 1, description: \"span: tokens per masked span\"}\n"
           "      freeze: {$ref: \"#/$defs/freeze\"}\n")
    c.edit(schema, "          warmup_tokens: {default: 0}\n",
           "          warmup_tokens: {default: 0}\n          span_length: {default: 3}\n", count=2)
    c.regenerate_config_readme()
    c.check_written_against("## A pretraining objective")
    probe = c.python(
        "from clmdetour.config import load_yaml, validate_config, deep_merge, resolve_phase\n"
        "from clmdetour.objectives import get_objective\n"
        "cfg = validate_config(deep_merge(load_yaml('config/config.yaml'), load_yaml('config/demo.yaml')))\n"
        "cfg['pretraining']['variants']['clm-detour']['phase1']['objective'] = 'span'\n"
        "section = resolve_phase(cfg, 'clm-detour', 'phase1')\n"
        "other = resolve_phase(cfg, 'mlm-baseline', 'phase1')\n"
        "print(get_objective('span').settings_of(section).span_length, 'span_length' in other)\n")
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split() == ["3", "False"]  # its knob reaches its phase, and no other phase
    # its knob's default is written in every phase section of the config: only the record of the config used
    # (results/config_used.yaml) is written again; no phase's params move, so no pretraining job is planned
    planned = jobs(c.demo_dry_run(demo_run))
    assert set(planned) <= {"config_used", "all"}, planned




def test_a_file_format_takes_the_listed_files_and_moves_no_finished_job(demo_run, tmp_path):
    c = Copy(tmp_path / "repo")
    c.write("src/clmdetour/tasks/fileformats/lines.py", LINES_MODULE)
    c.edit("src/clmdetour/tasks/fileformats/__init__.py", "for _module in (folders, words, tables, hub):",
           "from clmdetour.tasks.fileformats import lines  # noqa: E402\n\nfor _module in (folders, words, tables, hub, lines):")
    schema = "workflow/schemas/tasks.schema.yaml"
    c.edit(schema, "enum: [brat, fracco, conll, iob_tsv, jsonl, tsv, csv, bigbio_kb, bigbio_text, hub, url, user]",
           "enum: [brat, fracco, conll, iob_tsv, jsonl, tsv, csv, bigbio_kb, bigbio_text, lines, hub, url, user]")
    c.edit(schema, "format: {enum: [brat, fracco, conll, iob_tsv, jsonl, tsv, csv, bigbio_kb, bigbio_text, null]",
           "format: {enum: [brat, fracco, conll, iob_tsv, jsonl, tsv, csv, bigbio_kb, bigbio_text, lines, null]")
    c.regenerate_config_readme()
    c.check_written_against("## A task file format")
    src = tmp_path / "lines"
    src.mkdir()
    for split, rows in {"train": ["a\tla toux", "b\tle bras", "a\tune toux", "b\tun bras"], "dev": ["a\ttoux"],
                        "test": ["b\tbras"]}.items():
        (src / f"{split}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    probe = c.python(
        "from clmdetour.tasks.prepare import prepare_task\n"
        f"m = prepare_task('toy', {{'type': 'multiclass', 'source': 'lines', 'path': {str(src)!r}}}, {str(tmp_path / 'out')!r})\n"
        "print(m['counts'])\n")
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert "{'train': 4, 'dev': 1, 'test': 1}" in probe.stdout
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_task_formats_registry.py", "-k", "schema_enums or compares"],
                          cwd=c.root, env=c.env(), capture_output=True, text=True, timeout=300, check=False)
    assert test.returncode == 0, test.stdout[-3000:]  # the registry's own tests hold with the format in
    _assert_nothing_planned(c.demo_dry_run(demo_run))


def test_an_attention_back_end_takes_the_listed_files_and_moves_no_finished_job(demo_run, tmp_path):
    c = Copy(tmp_path / "repo")
    c.edit("src/clmdetour/modeling/attention.py", '''    AttentionBackend("flex_attention", needs_gpu=True, label="FlexAttention"),
''', '''    AttentionBackend("flex_attention", needs_gpu=True, label="FlexAttention"),
    AttentionBackend("toy_attention", needs_gpu=True, package="toy_kernels", label="ToyAttention"),
''')
    for schema in ("workflow/schemas/pretrain.schema.yaml", "workflow/schemas/tasks.schema.yaml"):
        c.edit(schema, "attn_implementation: {enum: [auto, sdpa, eager, flash_attention_2, flex_attention],",
               "attn_implementation: {enum: [auto, sdpa, eager, flash_attention_2, flex_attention, toy_attention],")
    c.regenerate_config_readme()
    c.check_written_against("## An attention back-end")
    probe = c.python("from clmdetour.modeling.attention import BACKENDS, select_attn_implementation\n"
                     "b = BACKENDS['toy_attention']\n"
                     "print(b.package_importable(), select_attn_implementation('auto', on_gpu=True))\n")
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split()[0] == "False"  # its package is not installed: not usable, auto goes on
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_registries.py"],
                          cwd=c.root, env=c.env(), capture_output=True, text=True, timeout=300, check=False)
    assert test.returncode == 0, test.stdout[-3000:]
    _assert_nothing_planned(c.demo_dry_run(demo_run))


RELATION_TYPE = '''"""A toy relation type: multiclass over rows whose text marks its two arguments."""

from clmdetour.tasktypes.multiclass import Multiclass


class PairRelation(Multiclass):
    name = "pair_relation"
    description = "relation (pair)"
'''


def test_a_relation_type_takes_the_listed_files_and_moves_no_finished_job(demo_run, tmp_path):
    c = Copy(tmp_path / "repo")
    c.write("src/clmdetour/tasktypes/pair_relation.py", RELATION_TYPE)
    c.edit("src/clmdetour/tasktypes/__init__.py", "from .similarity import Similarity\n",
           "from .pair_relation import PairRelation\nfrom .similarity import Similarity\n")
    c.edit("src/clmdetour/tasktypes/__init__.py", "MultipleChoice())}", "MultipleChoice(), PairRelation())}")
    c.edit("workflow/schemas/tasks.schema.yaml", "type: {enum: [ner, multiclass, multilabel, similarity, multiple_choice],",
           "type: {enum: [ner, multiclass, multilabel, similarity, multiple_choice, pair_relation],")
    c.regenerate_config_readme()
    c.check_written_against("### Traced: a relation type")
    probe = c.python("from clmdetour.tasks.spec import resolve_task_spec\n"
                     "s = resolve_task_spec('rel', {'type': 'pair_relation', 'source': 'jsonl', 'path': 'x',\n"
                     "                              'entity_markers': [['<<', '>>'], ['[[', ']]']]})\n"
                     "print(s['format'], s['label_set']['unseen'])\n")
    assert probe.returncode == 0, probe.stderr[-3000:]
    _assert_nothing_planned(c.demo_dry_run(demo_run))


def test_the_file_lists_are_read_from_the_docs():
    assert listed_files("## A pretraining objective") == {
        "src/clmdetour/objectives.py", "src/clmdetour/training/collators.py", "workflow/schemas/pretrain.schema.yaml",
        "config/README.md"}
    assert "src/clmdetour/tasks/fileformats/*.py" in listed_files("## A task file format")
