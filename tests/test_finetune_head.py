"""The sequence-classification head of ModernBERT models: standardised pooled features into a fresh head."""
import pytest
import torch

from clmdetour.finetune.model import load_classifier
from clmdetour.tasktypes import TASK_TYPES
from clmdetour.tasktypes.heads import standardize_pooled_features


@pytest.fixture(scope="module")
def mlm_dir(tiny_model_dir):
    """The tiny model with a prediction head that differs from a fresh one (as after MLM pretraining)."""
    from transformers import AutoModelForMaskedLM

    model = AutoModelForMaskedLM.from_pretrained(str(tiny_model_dir))
    with torch.no_grad():
        model.head.dense.weight.add_(1.0)
        model.head.norm.weight.mul_(3.0)
    out = tiny_model_dir.parent / "mlm-like"
    model.save_pretrained(out)
    return out, model.head.dense.weight.detach().clone()


@pytest.mark.parametrize("task_type", ["multiclass", "multilabel"])
def test_sequence_classifier_standardises_pooled_features_into_a_fresh_head(mlm_dir, task_type):
    path, mlm_dense = mlm_dir
    torch.manual_seed(0)
    model = load_classifier(path, TASK_TYPES[task_type], ["a", "b", "c"])
    standardizer, head = model.head[0], model.head[1]
    assert isinstance(standardizer, torch.nn.BatchNorm1d) and standardizer.weight is None  # no affine parameters
    # fresh head: not the checkpoint's token-prediction head
    assert (head.dense.weight - mlm_dense).abs().mean() > 0.5
    assert abs(head.dense.weight.std().item() - model.config.initializer_range) < 0.005
    assert torch.equal(head.norm.weight, torch.ones_like(head.norm.weight))
    # nearly parallel pooled features (shared component 5x the specific one) come out standardised
    x = 5.0 * torch.randn(1, 32) + torch.randn(16, 32)
    model.train()
    z = standardizer(x)
    assert z.mean(0).abs().max() < 1e-5 and (z.std(0, unbiased=False) - 1).abs().max() < 1e-3
    assert torch.isfinite(standardizer(x[:1])).all()  # a last training batch of one example
    ids = torch.randint(5, 100, (4, 12))
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert logits.shape == (4, 3)
    model.eval()
    assert model(input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1])).logits.shape == (1, 3)


def test_token_classifier_keeps_the_transformers_head(mlm_dir):
    path, _ = mlm_dir
    model = load_classifier(path, TASK_TYPES["ner"], ["O", "B-X", "I-X"])
    assert not isinstance(model.head, torch.nn.Sequential)


def test_standardize_refuses_a_model_without_a_modernbert_head():
    with pytest.raises(TypeError, match="head.dense and head.norm"):
        standardize_pooled_features(torch.nn.Linear(2, 2))
