"""Issue data-safe item 5: a source drawn far over its share of corpus.train_tokens (one document longer than the
share) was warned in the job's log only; the manifest now records each source's share and the overshoot, and the
end of a successful run prints the warning again."""

from __future__ import annotations

import io
import json

from helpers import REPO


def test_an_overshoot_is_in_the_manifest_and_in_the_summary_at_the_end(tmp_path, tiny_model_dir, demo_texts):
    from clmdetour.config import deep_merge, load_yaml, validate_config
    from clmdetour.corpus.prepare import prepare_corpus
    from clmdetour.pipeline import paths
    from clmdetour.pipeline.summary import print_run_warnings

    small = [{"text": t} for t in demo_texts[:200]]
    huge = [{"text": " ".join(demo_texts[:400])}]  # one document far longer than its source's share
    for name, rows in (("small", small), ("huge", huge)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    cfg = validate_config(deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/demo.yaml")))
    corpus = dict(cfg["corpus"], seq_len=64, num_proc=1, train_tokens=4000, valid_fraction=0.01,
                  allow_train_as_valid=True,
                  sources=[{"name": n, "format": "jsonl", "path": str(tmp_path / f"{n}.jsonl"), "weight": 1.0,
                            "licence": "x", "text_field": "text"} for n in ("small", "huge")])
    out = tmp_path / "work" / paths.CORPUS_DIR
    prepare_corpus(corpus, str(tiny_model_dir), str(out))
    manifest = json.loads((out / "manifest.json").read_text())
    huge_src = manifest["sources"]["huge"]
    assert huge_src["tokens_share"] == 2000 and huge_src["drawn_over_share"] > 1.5
    (line,) = [w for w in manifest["warnings"] if "corpus source huge" in w]
    assert "tokens drawn for its share of corpus.train_tokens (2,000 tokens)" in line
    assert manifest["sources"]["small"]["drawn_over_share"] <= 1.5
    stream = io.StringIO()
    assert print_run_warnings(tmp_path / "work", stream) >= 1
    assert "WARNING (recorded during the run): results/corpus/manifest.json: corpus source huge" in stream.getvalue()
