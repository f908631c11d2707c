"""Reference models: fetching a Hub model folder, and the untrained ``random-init`` model.

Only :func:`fetch_model` touches the network (the ``fetch_model`` rule); it
pins the requested revision (branch or tag) to its commit sha, downloads that
commit into a temporary folder and renames it into place with
``revision.txt`` holding the sha, so a half-finished download never looks
like a model.
"""

from __future__ import annotations

import re
from pathlib import Path

from clmdetour.io import atomic_output_dir

# Framework-specific or export formats that fine-tuning never reads.
_IGNORED = ["*.h5", "*.msgpack", "*.ot", "*.onnx", "onnx/*", "*.tflite", "*.mlmodel", "coreml/*", "flax_model*", "tf_model*"]


def fetch_model(hub_id: str, revision: str, out_dir: str | Path, token: str | None = None) -> str:
    """Download ``hub_id`` at ``revision`` into ``out_dir`` (atomically) and write ``revision.txt``.

    Weights: safetensors when the repository has them, else ``pytorch_model.bin``.

    Args:
        hub_id: Hub repository id (``Dr-BERT/DrBERT-7GB``).
        revision: branch, tag or commit sha.
        out_dir: destination folder (``resources/models/{model}``).
        token: Hub token (None = the environment's).

    Returns:
        The commit sha that was downloaded.

    Raises:
        huggingface_hub errors (repository or revision not found, no network),
        with ``out_dir`` left as it was.
    """
    from huggingface_hub import HfApi, snapshot_download

    api = HfApi(token=token)
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        sha = revision
        files = api.list_repo_files(hub_id, revision=sha)
    else:
        info = api.model_info(hub_id, revision=revision, files_metadata=False)
        sha = info.sha
        files = [s.rfilename for s in (info.siblings or [])]
    ignore = list(_IGNORED)
    if any(f.endswith(".safetensors") for f in files):
        ignore.append("*.bin")
    with atomic_output_dir(out_dir) as tmp:
        snapshot_download(hub_id, revision=sha, local_dir=str(tmp), ignore_patterns=ignore, token=token)
        (Path(tmp) / "revision.txt").write_text(f"{hub_id}@{sha}\n", encoding="utf-8")
    return sha


def build_random_init(base_dir: str | Path, out_dir: str | Path, seed: int = 0) -> Path:
    """Save an untrained copy of the base model's architecture, with its tokenizer.

    The ``random-init`` reference row: same config and tokenizer as
    ``base_dir``, weights drawn by the model's own initialiser after
    ``torch.manual_seed(seed)`` (same seed, same weights).

    Raises:
        clmdetour.modeling.folders.ModelFolderError: ``base_dir`` is not a model folder with its
            tokenizer (one line naming it).
    """
    import torch
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    from clmdetour.modeling.folders import check_model_folder

    check_model_folder(base_dir)
    config = AutoConfig.from_pretrained(str(base_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    torch.manual_seed(seed)
    model = AutoModelForMaskedLM.from_config(config)
    with atomic_output_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (Path(tmp) / "revision.txt").write_text(f"random-init of {base_dir} (seed {seed})\n", encoding="utf-8")
    return Path(out_dir)
