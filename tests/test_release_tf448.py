"""The staged release loads with transformers 4.48.0 (the card's promise), checked in a separate venv.

tests/make_tf448_venv.sh builds ``.venv-tf448`` (transformers 4.48.0 layered over
the main venv's torch); a probe script runs there through ``subprocess``,
loads the staged folder with AutoTokenizer / AutoModelForMaskedLM / AutoModel
and runs the card's snippets; its token ids and outputs must match the current
transformers within 1e-5. A copy of the folder without the legacy config keys
must NOT match, which shows the keys are what makes 4.48 right.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers_release import build_model, stage_kwargs, write_records

from clmdetour.release.stage import stage_release

torch.set_num_threads(1)
REPO_ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["Le patient présente une [MASK] thoracique irradiant vers le bras gauche depuis trois jours.",
         ("Patiente de 67 ans adressée pour altération de l'état général. Le scanner thoraco-abdominal montre "
          "une masse pulmonaire droite avec adénopathies médiastinales et une lésion hépatique.")]
LEGACY_KEYS = ("global_rope_theta", "local_rope_theta", "global_attn_every_n_layers")

# Runs inside .venv-tf448. argv: JSON list of jobs [folder, texts, output .npz, README path or ""].
PROBE = r"""
import contextlib, io, json, re, sys
import numpy as np, torch
torch.set_num_threads(1)
import transformers
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer
report = {"transformers": transformers.__version__, "folders": []}
for folder, texts, out, readme in json.loads(sys.argv[1]):
    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok(texts, padding=True, return_tensors="pt")
    mlm = AutoModelForMaskedLM.from_pretrained(folder).eval()
    encoder = AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = mlm(**enc).logits
        hidden = encoder(**enc).last_hidden_state
    np.savez(out, input_ids=enc["input_ids"].numpy(), attention_mask=enc["attention_mask"].numpy(),
             logits=logits.numpy(), hidden=hidden.numpy())
    snippet_out = []
    if readme:
        for code in re.findall(r"```python\n(.*?)```", open(readme, encoding="utf-8").read(), flags=re.S):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(code, "README.md snippet", "exec"), {"__name__": "__snippet__"})
            snippet_out.append(buf.getvalue().splitlines())
    report["folders"].append({"keys": sorted(enc.keys()), "mask_token": tok.mask_token, "snippets": snippet_out})
print("PROBE " + json.dumps(report))
"""


def _venv_python() -> Path:
    script = REPO_ROOT / "tests" / "make_tf448_venv.sh"
    env = dict(os.environ, MAIN_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        reason = f"could not build .venv-tf448 with {script.name} (needs the package index): {proc.stderr[-600:]}"
        if os.environ.get("CLMDETOUR_REQUIRE_TF448"):
            pytest.fail(reason)
        pytest.skip(reason)
    return Path(proc.stdout.strip().splitlines()[-1])


def _current(folder: Path) -> dict:
    """The same outputs with the installed (current) transformers, in this process."""
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = AutoModelForMaskedLM.from_pretrained(folder).eval()(**enc).logits
        hidden = AutoModel.from_pretrained(folder).eval()(**enc).last_hidden_state
    return {"input_ids": enc["input_ids"].numpy(), "attention_mask": enc["attention_mask"].numpy(),
            "logits": logits.numpy(), "hidden": hidden.numpy(), "mask_token": tok.mask_token}


@pytest.fixture(scope="module")
def tf448(tmp_path_factory):
    """Stage the fixture model, copy it without the legacy keys, probe both in one 4.48 process."""
    python = _venv_python()
    root = tmp_path_factory.mktemp("tf448")
    model = build_model(root / "final_model")
    staged = root / "release" / "clm-detour"
    stage_release("clm-detour", **stage_kwargs(write_records(root / "records"), model, staged))
    bare = root / "no-legacy-keys"
    shutil.copytree(staged, bare)
    cfg = json.loads((bare / "config.json").read_text())
    for key in LEGACY_KEYS:
        cfg.pop(key)
    (bare / "config.json").write_text(json.dumps(cfg))

    jobs = [[str(staged), TEXTS, str(root / "staged.npz"), str(staged / "README.md")],
            [str(bare), TEXTS, str(root / "bare.npz"), ""]]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(python), "-c", PROBE, json.dumps(jobs)], capture_output=True, text=True, env=env,
                          cwd=root, timeout=600, check=False)
    assert proc.returncode == 0, f"probe failed in {python}:\n{proc.stderr[-3000:]}"
    report = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("PROBE "))[len("PROBE "):])
    old = [{**meta, **dict(np.load(job[2]))} for meta, job in zip(report["folders"], jobs)]
    return SimpleNamespace(version=report["transformers"], staged=old[0], bare=old[1], new=_current(staged))


def test_staged_folder_matches_under_transformers_4_48(tf448):
    old, new = tf448.staged, tf448.new
    assert tf448.version == "4.48.0"
    assert old["keys"] == ["attention_mask", "input_ids"]  # no token_type_ids in 4.48 either
    assert old["mask_token"] == new["mask_token"] == "[MASK]"
    np.testing.assert_array_equal(old["input_ids"], new["input_ids"])
    real = new["attention_mask"].astype(bool)
    assert real.sum(axis=1).max() > 2 * 16  # longer than the sliding window: local attention is exercised
    assert np.abs(old["logits"] - new["logits"])[real].max() <= 1e-5
    assert np.abs(old["hidden"] - new["hidden"])[real].max() <= 1e-5
    fill, embed = old["snippets"]  # the card's snippets ran as written under 4.48
    assert len(fill) == 5 and embed == ["torch.Size([1, 64])"]


def test_without_legacy_keys_4_48_computes_another_model(tf448):
    """Guard on the test above: drop the keys recent transformers omit, and 4.48's logits change."""
    real = tf448.new["attention_mask"].astype(bool)
    assert np.abs(tf448.bare["logits"] - tf448.new["logits"])[real].max() > 1e-3
