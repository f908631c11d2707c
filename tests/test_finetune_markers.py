"""Relation-argument markers as special tokens (``marker_tokens: true``): the job's tokenizer and the
fine-tuned task model change; the model folder (a pretrained or released model) never does."""

from __future__ import annotations

import hashlib

from helpers import tiny_modernbert, train_tokenizer
from helpers_finetune import job_settings, write_task_folder

from clmdetour.finetune import run as R
from clmdetour.finetune.model import init_marker_embeddings, load_classifier
from clmdetour.io import atomic_write_json, read_json
from clmdetour.settings import FinetuneSettings

MARKERS = ["<<", ">>", "[[", "]]"]


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"<< drug{i} >> blocks the [[ receptor{i} ]] in cells",
             "label": "CPR:4" if i % 2 else "CPR:6"} for i in range(n)]


def _digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_marker_tokens_grow_the_task_model_only(tmp_path):
    plain = [r["text"].replace("<< ", "").replace(" >>", "").replace("[[ ", "").replace(" ]]", "") for r in _rows("t", 40)]
    tok = train_tokenizer(plain, vocab_size=300)  # never saw a marker: "<<" is two byte tokens
    model_dir = tiny_modernbert(tok, tmp_path / "model", hidden_size=16, num_layers=1)
    before = _digest(model_dir)
    folder = write_task_folder(tmp_path / "task", "rel", "multiclass",
                               {"train": _rows("t", 6), "dev": _rows("d", 2), "test": _rows("e", 2)}, "f1_micro")
    labels = read_json(folder / "labels.json")
    atomic_write_json(folder / "labels.json", dict(labels, marker_tokens=MARKERS))
    config = {"type": "multiclass", "metric": "f1_micro", "max_length": 64, "finetune": {}}
    settings = FinetuneSettings.from_dict(job_settings(attn_implementation="auto"))
    prepared = R.prepare_task_inputs("rel", folder, config, model_dir, settings)
    assert len(prepared.marker_ids) == 4 and list(prepared.info["marker_tokens"]) == MARKERS
    ids = list(prepared.info["marker_tokens"].values())
    assert prepared.marker_ids == ids and not set(ids) & set(tok.get_vocab().values())  # new to the vocabulary
    body = prepared.encoded["train"].examples[0]["input_ids"]
    assert all(body.count(i) == 1 for i in ids)  # each marker one token, once
    hf = load_classifier(model_dir, "multiclass", ["CPR:4", "CPR:6"])
    emb = hf.get_input_embeddings().weight
    ref = sorted(tok.get_vocab().values())
    rows_before, mean = emb.shape[0], emb[ref].mean(dim=0).detach().clone()
    other = emb[0].detach().clone()
    rows_after = init_marker_embeddings(hf, prepared.tokenizer, prepared.marker_ids)
    new = hf.get_input_embeddings().weight
    assert rows_after == max(rows_before, max(ids) + 1)
    for i in ids:
        assert (new[i] - mean).abs().max().item() < 1e-6
    assert (new[0] - other).abs().max().item() == 0  # trained rows unchanged
    assert _digest(model_dir) == before  # the pretrained / released folder is untouched
