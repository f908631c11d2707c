"""A training process's start-up (issue 31, item 8): what it no longer does, and that the results stay the same."""

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO, tiny_modernbert_config

from clmdetour.runtime.composer_setup import (
    causal_lm_check_by_name,
    cheap_cpu_model,
    cpu_model_name,
    is_causal_lm_by_name,
)
from clmdetour.tasks.contract import read_split_rows, write_task

# a ModernBERT of 8 dimensions with transformers' default windows (128 tokens) and positions (8192)
FIXED_COST_BERT = {"hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 8, "local_attention": 128,
                   "max_position_embeddings": 8192}


def _task(tmp_path, kind):
    from helpers_finetune import demo_task_rows

    from clmdetour.tasktypes import TASK_TYPES

    rows = demo_task_rows(kind, 12, seed=5)
    if kind == "ner":
        for r in rows:  # the contract's NER rows carry each word's character span
            r["word_offsets"] = [[0, len(w)] for w in r["words"]]
    labels = (sorted({t[2:] for r in rows for t in r["tags"] if t != "O"}) if kind == "ner" else
              sorted({r["label"] for r in rows}) if kind == "multiclass" else sorted({l for r in rows for l in r["labels"]}))
    out = tmp_path / kind
    write_task(out, {"train": rows[:6], "dev": rows[6:9], "test": rows[9:]}, TASK_TYPES[kind].labels_record(kind, labels, None),
               {"task": kind})
    return out


@pytest.mark.parametrize("kind", ["ner", "multiclass", "multilabel"])
def test_split_rows_read_without_datasets_equal_datasets_rows(tmp_path, kind):
    import datasets

    folder = _task(tmp_path, kind)
    for split in ("train", "dev", "test"):
        ours = read_split_rows(folder / split)
        ref = datasets.load_from_disk(str(folder / split)).to_list()
        assert ours == ref and len(ours) > 0
        assert [type(v) for v in ours[0].values()] == [type(v) for v in ref[0].values()]


def test_split_with_a_format_is_read_by_datasets(tmp_path):
    """A layout the pyarrow reader does not vouch for (a format set on the dataset) goes through datasets."""
    import datasets

    ds = datasets.Dataset.from_list([{"id": "a", "x": [1, 2]}, {"id": "b", "x": [3]}]).with_format("numpy")
    ds.save_to_disk(str(tmp_path / "s"))
    assert json.loads((tmp_path / "s" / "state.json").read_text())["_format_type"] == "numpy"
    assert read_split_rows(tmp_path / "s") == datasets.load_from_disk(str(tmp_path / "s")).to_list()


def test_cpu_model_patch_is_scoped():
    from composer.utils import collect_env

    original = collect_env.get_cpu_model
    with cheap_cpu_model():
        assert collect_env.get_cpu_model is cpu_model_name
        assert collect_env.get_composer_env_dict()["cpu_model"] == cpu_model_name() != ""
    assert collect_env.get_cpu_model is original


def test_causal_lm_check_by_name_agrees_on_known_classes():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, ModernBertForMaskedLM

    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=16, n_positions=8))

    class MyCausal(GPT2LMHeadModel):  # a subclass counts, as in Composer's isinstance check
        pass

    bert = ModernBertForMaskedLM(tiny_modernbert_config(16, **FIXED_COST_BERT))
    assert is_causal_lm_by_name(gpt2) and is_causal_lm_by_name(MyCausal(gpt2.config))
    assert not is_causal_lm_by_name(bert)
    import composer.models.huggingface as hf

    original = hf._is_registered_causal_lm
    with causal_lm_check_by_name():
        assert hf._is_registered_causal_lm is is_causal_lm_by_name
    assert hf._is_registered_causal_lm is original


def test_a_job_start_imports_neither_datasets_nor_every_causal_lm(tmp_path):
    """In a fresh interpreter: reading a task and wrapping a model for pretraining import no ``datasets``
    (nor pandas) and none of the ~200 causal-LM model modules that Composer's check would import."""
    _task(tmp_path, "multiclass")
    code = f"""
import sys
import torch
from transformers import ModernBertForMaskedLM, PreTrainedTokenizerFast
from helpers import tiny_modernbert_config
from clmdetour.tasks.contract import load_task_data
from clmdetour.training.composer_model import PretrainingModel
data = load_task_data({str(tmp_path / "multiclass")!r}, "multiclass")
assert len(data.splits["train"]) == 6
cfg = tiny_modernbert_config(16, **{FIXED_COST_BERT!r})
model = PretrainingModel(ModernBertForMaskedLM(cfg), None, "clm")
assert model.shift_labels is False
loaded = [m for m in ("datasets", "pandas", "transformers.models.llama.modeling_llama",
                      "transformers.models.gpt2.modeling_gpt2") if m in sys.modules]
print("LOADED", loaded)
"""
    env = {"PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO / 'tests'}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LOADED []" in proc.stdout
