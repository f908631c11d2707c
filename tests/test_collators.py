import torch
from transformers import AutoTokenizer

from clmdetour.training.collators import CLMCollator, MLMCollator, clm_labels


def test_mlm_masking_rate_and_80_10_10(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    ids = torch.randint(5, len(tok), (256, 128))
    ids[:, 0] = tok.cls_token_id
    ids[:, 64] = tok.sep_token_id
    rows = [{"input_ids": r.tolist(), "attention_mask": [1] * 128} for r in ids]
    batch = MLMCollator(tok, 0.15, seed=1)(rows)
    selected = batch["labels"] != -100
    special = (ids == tok.cls_token_id) | (ids == tok.sep_token_id)
    assert not selected[special].any()
    rate = selected.sum().item() / (~special).sum().item()
    assert abs(rate - 0.15) < 0.005
    n = selected.sum().item()
    as_mask = (batch["input_ids"][selected] == tok.mask_token_id).sum().item() / n
    unchanged = (batch["input_ids"][selected] == ids[selected]).sum().item() / n
    assert abs(as_mask - 0.8) < 0.015
    assert abs(unchanged - 0.1) < 0.015  # 10 % kept (+ random draws equal to the original: negligible)
    assert torch.equal(batch["labels"][selected], ids[selected])


def test_mlm_seeded_masks_repeat(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [{"input_ids": list(range(5, 69)), "attention_mask": [1] * 64}] * 4
    a, b = MLMCollator(tok, 0.15, seed=3)(rows), MLMCollator(tok, 0.15, seed=3)(rows)
    assert torch.equal(a["input_ids"], b["input_ids"])


def test_clm_labels_shift_and_stop_at_document_boundaries():
    CLS, SEP, PAD = 1, 2, 3
    ids = torch.tensor([[CLS, 10, 11, SEP, CLS, 20, 21, SEP, PAD, PAD]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 1, 0, 0]])
    labels = clm_labels(ids, mask, SEP)
    assert labels.tolist() == [[10, 11, SEP, -100, 20, 21, SEP, -100, -100, -100]]
    batch = CLMCollator(SEP)([{"input_ids": ids[0].tolist(), "attention_mask": mask[0].tolist()}])
    assert torch.equal(batch["labels"], labels)


def test_heldout_loss_scores_identical_masks_on_every_call(tiny_model_dir):
    """Start and end of a phase must be scored on the same masks: two calls on one model agree exactly."""
    from transformers import AutoModelForMaskedLM

    from clmdetour.training.phase import heldout_loss

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForMaskedLM.from_pretrained(tiny_model_dir)
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(5, len(tok), (32,), generator=g).tolist(), "attention_mask": [1] * 32}
            for _ in range(6)]
    coll = MLMCollator(tok, 0.3, seed=3)
    first = heldout_loss(model, rows, coll, "mlm", batch_size=4)
    assert heldout_loss(model, rows, coll, "mlm", batch_size=4) == first
    other_seed = MLMCollator(tok, 0.3, seed=4)
    assert heldout_loss(model, rows, other_seed, "mlm", batch_size=4) != first  # other masks, other loss
