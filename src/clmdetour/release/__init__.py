"""Hub release of a variant's final model: export, model card, push.

- ``compat``: config / tokenizer patches so ``transformers >= 4.48`` loads the folder;
- ``records``: reads the run records, corpus manifest and evaluation table the card cites;
- ``licence``: which corpus licences restrict a release;
- ``card``: the generated model card (front matter + body);
- ``stage``: builds ``results/release/{variant}/``;
- ``push``: uploads a staged folder with ``huggingface_hub`` and writes a receipt.
"""

from clmdetour.errors import ExpectedError


class ReleaseError(ExpectedError, RuntimeError):
    """A release cannot be staged or pushed; the message names the file or config key."""
