"""Relation-argument markers as special tokens (``marker_tokens: true``): the job's tokenizer and the
fine-tuned task model change; the model folder (a pretrained or released model) never does. The type does it
through its hooks (``TaskType.prepare_tokenizer``, ``TaskType.init_head``; ``clmdetour.tasktypes.markers``)."""

from __future__ import annotations

import hashlib

from helpers import tiny_modernbert, train_tokenizer
from helpers_finetune import job_settings, task_settings, write_task_folder

from clmdetour.finetune import inputs, loop
from clmdetour.finetune.model import load_classifier
from clmdetour.io import atomic_write_json, read_json
from clmdetour.settings import FinetuneSettings
from clmdetour.tasks.contract import TaskData
from clmdetour.tasktypes import TASK_TYPES, TokenizerAdditions
from clmdetour.tasktypes.markers import EntityMarkers, init_marker_embeddings
from clmdetour.tasktypes.multiclass import Multiclass

MARKERS = ["<<", ">>", "[[", "]]"]


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}{i}", "text": f"<< drug{i} >> blocks the [[ receptor{i} ]] in cells",
             "label": "CPR:4" if i % 2 else "CPR:6"} for i in range(n)]


def _digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _plain_tokenizer():
    plain = [r["text"].replace("<< ", "").replace(" >>", "").replace("[[ ", "").replace(" ]]", "") for r in _rows("t", 40)]
    return train_tokenizer(plain, vocab_size=300)  # never saw a marker: "<<" is two byte tokens


def test_marker_tokens_grow_the_task_model_only(tmp_path):
    tok = _plain_tokenizer()
    model_dir = tiny_modernbert(tok, tmp_path / "model", hidden_size=16, num_layers=1)
    before = _digest(model_dir)
    folder = write_task_folder(tmp_path / "task", "rel", "multiclass",
                               {"train": _rows("t", 6), "dev": _rows("d", 2), "test": _rows("e", 2)}, "f1_micro")
    labels = read_json(folder / "labels.json")
    atomic_write_json(folder / "labels.json", dict(labels, marker_tokens=MARKERS))
    settings = FinetuneSettings.from_dict(job_settings(attn_implementation="auto"))
    prepared = inputs.prepare_task_inputs("rel", folder, task_settings("multiclass", "f1_micro"), model_dir, settings)
    assert len(prepared.additions.new_ids) == 4 and list(prepared.info["marker_tokens"]) == MARKERS
    ids = list(prepared.info["marker_tokens"].values())
    assert list(prepared.additions.new_ids) == ids and not set(ids) & set(tok.get_vocab().values())  # new to the vocabulary
    body = prepared.encoded["train"].examples[0]["input_ids"]
    assert all(body.count(i) == 1 for i in ids)  # each marker one token, once
    hf = load_classifier(model_dir, TASK_TYPES["multiclass"], ["CPR:4", "CPR:6"])
    emb = hf.get_input_embeddings().weight
    ref = sorted(tok.get_vocab().values())
    rows_before, mean = emb.shape[0], emb[ref].mean(dim=0).detach().clone()
    other = emb[0].detach().clone()
    rows_after = init_marker_embeddings(hf, prepared.tokenizer, list(prepared.additions.new_ids))
    new = hf.get_input_embeddings().weight
    assert rows_after == max(rows_before, max(ids) + 1)
    for i in ids:
        assert (new[i] - mean).abs().max().item() < 1e-6
    assert (new[0] - other).abs().max().item() == 0  # trained rows unchanged
    assert _digest(model_dir) == before  # the pretrained / released folder is untouched


def test_the_types_that_add_markers_are_those_that_accept_entity_markers():
    """Planning accepts ``entity_markers`` for the class-label types only (tasks.spec); those and no other
    registered type add a task's markers to the tokenizer."""
    adding = sorted(n for n, t in TASK_TYPES.items() if isinstance(t, EntityMarkers))
    assert adding == sorted(n for n, t in TASK_TYPES.items() if t.class_labels) == ["multiclass", "multilabel"]


def test_a_type_without_markers_leaves_the_tokenizer_as_it_is():
    tok = _plain_tokenizer()
    size = len(tok)
    task = TaskData("t", TASK_TYPES["ner"], ["O", "B-X", "I-X"], "f1_micro", {}, marker_tokens=list(MARKERS))
    assert TASK_TYPES["ner"].prepare_tokenizer(tok, task) == TokenizerAdditions()
    assert len(tok) == size


class MarkerHeadRelation(Multiclass):
    """A toy relation type whose head reads the entity-marker tokens: one module, no change elsewhere.

    Its ``init_head`` keeps the markers' own initialisation and tells the head which ids to pool
    (here recorded on the model's config, where such a head would read them)."""

    name = "toy-marker-relation"

    def init_head(self, model, tokenizer, additions):
        super().init_head(model, tokenizer, additions)
        model.config.marker_token_ids = [additions.tokens[m] for m in MARKERS]


def test_a_toy_marker_type_gets_its_tokens_and_its_head_through_the_hooks(tmp_path):
    tok = _plain_tokenizer()
    model_dir = tiny_modernbert(tok, tmp_path / "model", hidden_size=16, num_layers=1)
    toy = MarkerHeadRelation()
    task = TaskData("rel", toy, ["CPR:4", "CPR:6"], "f1_micro",
                    {"train": _rows("t", 4), "dev": _rows("d", 2), "test": _rows("e", 2)}, marker_tokens=list(MARKERS))
    additions = toy.prepare_tokenizer(tok, task)
    assert list(additions.tokens) == MARKERS and additions.record_key == "marker_tokens"
    ids = [additions.tokens[m] for m in MARKERS]
    assert list(additions.new_ids) == ids and all(tok(m, add_special_tokens=False)["input_ids"] == [i]
                                                  for m, i in zip(MARKERS, ids))
    encoded = toy.encode(task.splits["train"], task.labels, tok, 64, None, task.name)
    assert all(encoded.examples[0]["input_ids"].count(i) == 1 for i in ids)  # the type's encode sees the markers
    settings = FinetuneSettings.from_dict(job_settings(attn_implementation="sdpa"))
    hf, _model, collator, _attention = loop.task_model(str(model_dir), tok, task, encoded.examples, settings, "cpu",
                                                    "fp32", additions)
    assert hf.config.marker_token_ids == ids and collator.task is toy  # the head set up by the type's init_head
    emb = hf.get_input_embeddings().weight
    mean = emb[sorted(i for i in tok.get_vocab().values() if i not in set(ids))].mean(dim=0)
    assert max((emb[i] - mean).abs().max().item() for i in ids) < 1e-6  # the markers' rows, through the mixin

