"""Rule random_init: the base model's architecture and tokenizer with fresh, seeded weights."""
import argparse
import logging

from clmdetour.finetune.reference import build_random_init

p = argparse.ArgumentParser(description=__doc__)
p.add_argument("--base", required=True)
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()
logging.basicConfig(level=logging.INFO)
build_random_init(a.base, a.out, a.seed)
logging.getLogger(__name__).info("wrote %s (random init of %s, seed %d)", a.out, a.base, a.seed)
