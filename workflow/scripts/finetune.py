"""Rule finetune: one model on one task, every seed (see clmdetour.finetune.run).

Called from a shell: rule (with the offline environment); arguments are the
rule's input, params and output, passed on the command line.
"""
import os
import sys

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from clmdetour.finetune.run import main

sys.exit(main())
