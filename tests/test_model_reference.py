"""Reference models: the seeded random-init copy, and fetching (Hub calls replaced by local files)."""
import pytest

from clmdetour.modeling import reference


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    from helpers import tiny_modernbert, train_tokenizer

    from clmdetour.demo.generator import generate_corpus

    tok = train_tokenizer([r["text"] for r in generate_corpus(100, seed=3)], vocab_size=350)
    return tiny_modernbert(tok, tmp_path_factory.mktemp("b") / "model", seed=1)


def test_random_init_is_seeded_and_differs_from_base(base_dir, tmp_path):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    a = reference.build_random_init(base_dir, tmp_path / "a", seed=0)
    b = reference.build_random_init(base_dir, tmp_path / "b", seed=0)
    c = reference.build_random_init(base_dir, tmp_path / "c", seed=1)
    wa, wb, wc, wbase = (AutoModelForMaskedLM.from_pretrained(str(p)).state_dict() for p in (a, b, c, base_dir))
    key = next(k for k in wa if k.endswith("attn.Wqkv.weight"))
    assert torch.equal(wa[key], wb[key]) and not torch.equal(wa[key], wc[key]) and not torch.equal(wa[key], wbase[key])
    assert AutoTokenizer.from_pretrained(str(a)).get_vocab() == AutoTokenizer.from_pretrained(str(base_dir)).get_vocab()


def test_fetch_pins_the_commit_and_skips_bin_when_safetensors_exist(base_dir, tmp_path, monkeypatch):
    import shutil
    import types

    import huggingface_hub

    sha = "a" * 40
    calls = {}

    class FakeApi:
        def __init__(self, token=None):
            pass

        def model_info(self, repo_id, revision=None, files_metadata=False):
            assert (repo_id, revision) == ("org/model", "main")
            return types.SimpleNamespace(sha=sha, siblings=[types.SimpleNamespace(rfilename=f) for f in
                                                             ("config.json", "model.safetensors", "pytorch_model.bin")])

    def fake_download(repo_id, revision, local_dir, ignore_patterns, token=None):
        calls.update(revision=revision, ignore=ignore_patterns)
        shutil.copytree(base_dir, local_dir, dirs_exist_ok=True)

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    out = tmp_path / "resources/models/ref"
    assert reference.fetch_model("org/model", "main", out) == sha
    assert calls["revision"] == sha and "*.bin" in calls["ignore"]
    assert (out / "revision.txt").read_text().strip() == f"org/model@{sha}"
    assert (out / "config.json").exists()

    def failing(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", failing)
    with pytest.raises(OSError):
        reference.fetch_model("org/model", "main", tmp_path / "resources/models/other")
    assert not (tmp_path / "resources/models/other").exists()  # nothing half-written
