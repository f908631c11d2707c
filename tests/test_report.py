"""The run report (`snakemake --report`) built from a finished demo run.

Needs a repository copy where the demo DAG has run (``results/`` filled): set
``CLMDETOUR_DEMO_RESULTS`` to its root. The test then builds the report there,
as ``report.html`` and as ``report.zip``, opens it and checks that it contains
the evaluation table, every plot under ``results/plots/`` with its caption
text, and the configuration the run used. The Snakemake arguments that select
the run's config default to ``--profile profiles/local`` when that profile has
a ``config.yaml``, else ``--configfile config/demo.yaml``; override them with
``CLMDETOUR_DEMO_SNAKEMAKE_ARGS`` (shell syntax).
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shlex
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers import REPO

DEMO_ENV = "CLMDETOUR_DEMO_RESULTS"
ARGS_ENV = "CLMDETOUR_DEMO_SNAKEMAKE_ARGS"
# Figure stem -> caption file in workflow/report (workflow/rules/analysis.smk).
FIGURE_CAPTIONS = {
    "layer_drift": "layer_drift.rst",
    "layer_drift_modules": "layer_drift_modules.rst",
    "training_curves": "training_curves.rst",
    "eval_scores": "eval_scores.rst",
}
EVAL_TABLES = ("results/eval_table.md", "results/eval_table.tsv")
CONFIG_RECORD = "results/config_used.yaml"

pytestmark = pytest.mark.slow


def _snakemake_args(root: Path) -> list[str]:
    if os.environ.get(ARGS_ENV) is not None:
        return shlex.split(os.environ[ARGS_ENV])
    if not (root / "Snakefile").is_file():  # the shared demo run: a scratch working directory
        return ["--snakefile", str(REPO / "Snakefile"), "--directory", str(root),
                "--configfiles", str(REPO / "config/config.yaml"), str(REPO / "config/demo.yaml")]
    if (root / "profiles" / "local" / "config.yaml").is_file():
        return ["--profile", "profiles/local"]
    return ["--configfile", "config/demo.yaml"]


def _text_of_html(fragment: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _rendered_caption(path: Path) -> str:
    """Text of a caption file as Snakemake renders it (reStructuredText through docutils)."""
    from docutils.core import publish_parts

    with warnings.catch_warnings():  # same call as snakemake.report (writer_name is deprecated in docutils 2)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        return _text_of_html(publish_parts(path.read_text(encoding="utf-8"), writer_name="html")["body"])


def _js_value(page: str, name: str):
    """The JSON literal assigned by ``var {name} = ...;`` in the report page."""
    m = re.search("var " + re.escape(name) + r" = (?=[{\[\"])", page)  # the embedded JS libraries have other 'var results'
    if m is None:
        raise AssertionError(f"the report has no 'var {name} = <JSON>' block")
    value, _ = json.JSONDecoder().raw_decode(page, m.end())
    return value


class Report:
    """A built report: its result entries (path -> caption, data) and its main page."""

    def __init__(self, path: Path):
        self.path = path
        self._zip = None
        if path.suffix == ".zip":
            self._zip = zipfile.ZipFile(path)
            self._folder = path.stem
            page = self._zip.read(f"{self._folder}/report.html").decode("utf-8")
        else:
            page = path.read_text(encoding="utf-8")
        self.results: dict = _js_value(page, "results")
        self.workflow_desc: str = _js_value(page, "workflow_desc")

    def data(self, key: str) -> bytes:
        uri = self.results[key]["data_uri"]
        if self._zip is None:
            assert uri.startswith("data:") and ";base64," in uri, f"{key}: not embedded in the HTML report"
            return base64.b64decode(uri.split(";base64,", 1)[1])
        return self._zip.read(f"{self._folder}/{uri}")

    def caption(self, key: str) -> str:
        return _text_of_html(self.results[key]["caption"] or "")


@pytest.fixture(scope="module")
def demo_root(demo_run) -> Path:
    """The shared demo run (tests/conftest.py), or CLMDETOUR_DEMO_RESULTS when set."""
    return Path(demo_run).resolve()


@pytest.fixture(scope="module", params=["html", "zip"])
def report(request, demo_root, tmp_path_factory) -> Report:
    out = tmp_path_factory.mktemp("report") / f"report.{request.param}"
    cmd = [sys.executable, "-m", "snakemake", "--report", str(out), *_snakemake_args(demo_root)]
    proc = subprocess.run(cmd, cwd=demo_root, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0 and out.is_file(), (
        f"{shlex.join(cmd)} failed in {demo_root} (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return Report(out)


def test_report_contains_the_evaluation_table(report, demo_root):
    present = [k for k in EVAL_TABLES if k in report.results]
    assert present, f"no evaluation table ({' or '.join(EVAL_TABLES)}) in the report; entries: {sorted(report.results)}"
    for key in present:
        assert report.data(key) == (demo_root / key).read_bytes(), f"{key} in the report differs from the file"
        assert report.caption(key), f"{key} has no caption in the report"


def test_report_contains_every_plot_with_its_caption(report, demo_root):
    plots = sorted(p.relative_to(demo_root).as_posix() for p in (demo_root / "results" / "plots").glob("*")
                   if p.suffix in (".png", ".svg"))
    expected = {"layer_drift", "layer_drift_modules", "training_curves"}
    if (demo_root / "results" / "eval_runs.tsv").exists():
        expected.add("eval_scores")
    stems = {Path(p).stem for p in plots}
    assert expected <= stems, f"plots missing from results/plots: {sorted(expected - stems)}"
    for key in plots:
        assert key in report.results, f"plot {key} is not in the report"
        assert report.data(key) == (demo_root / key).read_bytes(), f"{key} in the report differs from the file"
        caption = report.caption(key)
        assert caption, f"{key} has no caption in the report"
        stem = Path(key).stem
        if stem in FIGURE_CAPTIONS:
            want = _rendered_caption(REPO / "workflow" / "report" / FIGURE_CAPTIONS[stem])
            assert caption == want, f"{key}: caption differs from workflow/report/{FIGURE_CAPTIONS[stem]}"


def test_report_contains_the_config_used(report, demo_root):
    from clmdetour.config import validate_config

    assert CONFIG_RECORD in report.results, f"{CONFIG_RECORD} is not in the report"
    raw = report.data(CONFIG_RECORD)
    assert raw == (demo_root / CONFIG_RECORD).read_bytes()
    used = yaml.safe_load(raw)
    validate_config(used)  # the record is a complete, valid configuration
    assert {"base_model", "corpus", "pretraining", "analysis"} <= set(used)
    # The main page describes this run: base model and every variant.
    page = _text_of_html(report.workflow_desc)
    assert used["base_model"]["key"] in page
    for variant in used["pretraining"]["variants"]:
        assert variant in page, f"variant {variant} is not on the report's main page"


def test_every_report_entry_has_a_caption(report):
    missing = [k for k in report.results if not report.caption(k)]
    assert not missing, f"report entries without a caption: {missing}"
