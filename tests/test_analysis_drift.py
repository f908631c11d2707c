"""Layer drift: relative weight change per layer / module type, and per-layer CKA against the base model."""

import json

import pandas as pd
import pytest
import torch
from helpers import tiny_modernbert_config

from clmdetour.analysis import drift
from clmdetour.analysis.drift import (
    COLUMNS,
    PhaseModel,
    attention_mode,
    combine_drift_tables,
    layer_drift,
    named_parameter_tensors,
    parameter_group,
    read_drift_table,
    relative_weight_change,
    sample_sequences,
    write_tsv,
)

torch.set_num_threads(1)
VOCAB, LAYERS, SEQ = 300, 3, 24


def tiny_model(seed=0, initializer_range=0.02):
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(seed)
    cfg = tiny_modernbert_config(VOCAB, num_hidden_layers=LAYERS, global_attn_every_n_layers=3, local_attention=8,
                                 max_position_embeddings=64, attn_implementation="sdpa",
                                 initializer_range=initializer_range)
    return ModernBertForMaskedLM(cfg).eval()


def forward_fn():
    """clmdetour.modeling.causal.forward_encoder (an import error fails the test)."""
    from clmdetour.modeling.causal import forward_encoder

    return forward_encoder


def train_steps(model, steps=3, frozen_prefixes=()):
    """A few real AdamW steps of MLM-style training; parameters under ``frozen_prefixes`` are frozen."""
    for name, p in model.named_parameters():
        if any(name.startswith(f) for f in frozen_prefixes):
            p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(steps):
        ids = torch.randint(3, VOCAB, (4, SEQ), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_parameter_groups_cover_every_modernbert_parameter():
    groups = {parameter_group(n) for n, _ in tiny_model().named_parameters()}
    assert ("0", "attention") in groups and ("2", "mlp") in groups and ("1", "norm") in groups
    assert ("embeddings", "embedding") in groups and ("head", "decoder") in groups
    with pytest.raises(ValueError, match="bert.encoder.layer.0"):
        parameter_group("bert.encoder.layer.0.attention.self.query.weight")


def test_unchanged_model_has_zero_change_everywhere():
    base = named_parameter_tensors(tiny_model())
    same = {k: v.clone() for k, v in base.items()}
    out = relative_weight_change(base, same)
    assert (out["value"] == 0.0).all()
    assert set(out["layer"]) == {"embeddings", "head"} | {str(i) for i in range(LAYERS)}
    assert set(out.loc[out["layer"] == "1", "module_type"]) == {"all", "attention", "mlp", "norm"}


def test_frozen_layer_is_exactly_zero_and_trained_layers_moved():
    base_model = tiny_model()
    base = {k: v.clone() for k, v in named_parameter_tensors(base_model).items()}
    tuned = train_steps(base_model, frozen_prefixes=("model.layers.1.",))
    out = relative_weight_change(base, named_parameter_tensors(tuned)).set_index(["layer", "module_type"])["value"]
    for mtype in ("all", "attention", "mlp", "norm"):
        assert out[("1", mtype)] == 0.0
    for layer in ("0", "2"):
        assert out[(layer, "attention")] > 1e-4
        assert out[(layer, "mlp")] > 1e-4


def test_relative_change_value_and_grouping():
    base = named_parameter_tensors(tiny_model())
    tuned = {k: v.clone() for k, v in base.items()}
    tuned["model.layers.2.attn.Wqkv.weight"] *= 1.25
    tuned["model.layers.2.attn.Wo.weight"] *= 1.25
    out = relative_weight_change(base, tuned).set_index(["layer", "module_type"])["value"]
    assert out[("2", "attention")] == pytest.approx(0.25, rel=1e-6)  # float32 products
    assert out[("2", "mlp")] == 0.0
    assert 0.0 < out[("2", "all")] < 0.25  # the whole layer includes the unchanged MLP


def test_mismatched_parameters_raise():
    base = named_parameter_tensors(tiny_model())
    tuned = dict(base)
    tuned.pop("model.layers.0.mlp.Wi.weight")
    with pytest.raises(ValueError, match="model.layers.0.mlp.Wi.weight.*missing from the tuned model"):
        relative_weight_change(base, tuned)
    tuned = dict(base)
    tuned["head.dense.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="head.dense.weight.*shape"):
        relative_weight_change(base, tuned)


@pytest.fixture()
def valid_dir(tmp_path):
    import datasets

    g = torch.Generator().manual_seed(5)
    ids = torch.randint(3, VOCAB, (10, SEQ), generator=g).tolist()
    mask = [[1] * SEQ for _ in range(9)] + [[1] * (SEQ - 4) + [0] * 4]
    path = tmp_path / "valid"
    datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": mask}).save_to_disk(str(path))
    return path


def test_sample_sequences_is_fixed_by_seed(valid_dir):
    ids_a, mask_a, idx_a = sample_sequences(valid_dir, 4, seed=3, max_length=16)
    ids_b, _, idx_b = sample_sequences(valid_dir, 4, seed=3, max_length=16)
    _, _, idx_c = sample_sequences(valid_dir, 4, seed=4)
    assert idx_a == idx_b and idx_a != idx_c
    assert ids_a.shape == mask_a.shape == (4, 16) and torch.equal(ids_a, ids_b)
    ids_all, _, idx_all = sample_sequences(valid_dir, 1000, seed=0)
    assert ids_all.shape == (10, SEQ) and idx_all == list(range(10))


def test_sample_sequences_errors_name_the_folder(tmp_path):
    import datasets

    path = tmp_path / "bad"
    datasets.Dataset.from_dict({"text": ["a", "b"]}).save_to_disk(str(path))
    with pytest.raises(ValueError, match=r"bad: column 'input_ids' missing"):
        sample_sequences(path, 2, seed=0)


def test_attention_mode_reads_run_json(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"objective": "clm", "attention": {"implementation": "sdpa", "causal": True}}))
    (tmp_path / "b.json").write_text(json.dumps({"objective": "mlm"}))
    assert attention_mode(tmp_path / "a.json") is True
    with pytest.raises(ValueError, match=r"b.json: key 'attention.causal' missing"):
        attention_mode(tmp_path / "b.json")


def test_layer_drift_table_end_to_end(tmp_path, valid_dir):
    base = tiny_model()
    base.save_pretrained(tmp_path / "base")
    tuned = train_steps(tiny_model(), frozen_prefixes=("model.embeddings.", "model.layers.0."))
    tuned.save_pretrained(tmp_path / "tuned")
    phases = [PhaseModel("phase1", str(tmp_path / "base"), causal=False),
              PhaseModel("decay", str(tmp_path / "tuned"), causal=False)]
    df = layer_drift("clm-x", tmp_path / "base", phases, valid_dir, n_sequences=6, seed=0, batch_size=4,
                     forward=forward_fn())
    assert list(df.columns) == COLUMNS
    cka = df[df["metric"] == "cka"]
    assert list(cka.loc[cka["phase"] == "phase1", "layer"]) == ["embeddings", "0", "1", "2"]
    # The base model against itself: CKA 1 and no weight change.
    p1 = df[df["phase"] == "phase1"]
    assert p1.loc[p1["metric"] == "cka", "value"].tolist() == pytest.approx([1.0] * 4, abs=1e-9)
    assert (p1.loc[p1["metric"] == "rel_weight_change", "value"] == 0.0).all()
    # The trained model: frozen embeddings give the same embedding output (CKA 1), later layers differ.
    dc = cka[cka["phase"] == "decay"].set_index("layer")["value"]
    assert dc["embeddings"] == pytest.approx(1.0, abs=1e-9)
    assert dc["2"] < 0.999
    assert int(cka["n_sequences"].iloc[0]) == 6 and int(cka["seed"].iloc[0]) == 0
    assert int(cka["n_tokens"].iloc[0]) in (6 * SEQ, 6 * SEQ - 4)
    assert df.loc[df["metric"] == "rel_weight_change", "n_sequences"].isna().all()
    assert set(df["attention"]) == {"bidirectional"}
    # Round trip through the TSV, and combination of per-variant tables.
    write_tsv(df, tmp_path / "a" / "layer_drift.tsv")
    write_tsv(df.assign(variant="mlm-x"), tmp_path / "b" / "layer_drift.tsv")
    back = read_drift_table(tmp_path / "a" / "layer_drift.tsv")
    assert back["value"].tolist() == pytest.approx(df["value"].tolist(), rel=1e-7)
    both = combine_drift_tables([tmp_path / "a" / "layer_drift.tsv", tmp_path / "b" / "layer_drift.tsv"])
    assert len(both) == 2 * len(df) and list(dict.fromkeys(both["variant"])) == ["clm-x", "mlm-x"]


def test_causal_mode_changes_the_representation(tmp_path, valid_dir):
    """The same weights run causally are not the base's bidirectional representation: the mode is applied."""
    base = tiny_model(initializer_range=0.5)  # large weights: attention output dominates the residual
    ids, mask, _ = sample_sequences(valid_dir, 4, seed=0)
    ck_bi = drift.hidden_state_cka(base, base, ids, mask, causal=False, forward=forward_fn())
    ck_causal = drift.hidden_state_cka(base, base, ids, mask, causal=True, forward=forward_fn())
    assert ck_bi == pytest.approx([1.0] * (LAYERS + 1), abs=1e-9)
    assert ck_causal[0] == pytest.approx(1.0, abs=1e-9)  # embeddings do not attend
    assert max(ck_causal[1:]) < 0.99


def test_read_drift_table_rejects_bad_files(tmp_path):
    p = tmp_path / "x.tsv"
    p.write_text("variant\tphase\n")
    with pytest.raises(ValueError, match=r"x.tsv: columns \['layer'"):
        read_drift_table(p)
    row = dict.fromkeys(COLUMNS, "1")
    row["metric"] = "l2"
    pd.DataFrame([row]).to_csv(p, sep="\t", index=False)
    with pytest.raises(ValueError, match="unknown metric 'l2'"):
        read_drift_table(p)
