import hashlib
import subprocess
import sys

from helpers import REPO

SCRIPT = """
import sys
from clmdetour.demo.generator import generate_corpus
from clmdetour.tokenizer import train_tokenizer
texts = [r["text"] for r in generate_corpus(300, seed=5)]
train_tokenizer(texts, 800).save_pretrained(sys.argv[1])
"""


def test_tokenizer_training_is_byte_identical_across_processes(tmp_path):
    digests = []
    for i in range(2):
        out = tmp_path / f"tok{i}"
        subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=True, cwd=REPO)
        digests.append(hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_tokenizer_frames_documents_and_has_no_token_type_ids(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    enc = tok("Le patient présente une fièvre.")
    assert enc["input_ids"][0] == tok.cls_token_id and enc["input_ids"][-1] == tok.sep_token_id
    assert "token_type_ids" not in enc
    assert tok.decode(enc["input_ids"], skip_special_tokens=True) == "Le patient présente une fièvre."
