"""Checks of a model folder before transformers reads it, so a wrong folder gets one line that names it.

transformers' own errors for these cases name no file or give a misleading hint (a folder without a
tokenizer file is reported as a Hub download failure; a BERT folder given as the base model fails on an
internal attribute deep in the training step).
"""

from __future__ import annotations

import json
from pathlib import Path

from clmdetour.errors import InputError

# Files from which transformers builds a tokenizer (fast tokenizer, byte-level BPE, SentencePiece, WordPiece).
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",),
                   ("sentencepiece.bpe.model",), ("vocab.txt",))


class ModelFolderError(InputError):
    """A model folder is missing, incomplete or of the wrong architecture; the message names it."""


def check_model_folder(folder: str | Path, *, tokenizer: bool = True, model_type: str | None = None) -> dict:
    """Check that ``folder`` is a Hugging Face model folder transformers can load.

    Args:
        folder: the model folder.
        tokenizer: also require a tokenizer file (:data:`TOKENIZER_FILES`).
        model_type: the ``model_type`` its ``config.json`` must declare (``"modernbert"`` for a
            pretraining phase's input model), or None for any architecture.

    Returns:
        The folder's ``config.json`` as a dict.

    Raises:
        ModelFolderError: the folder or its ``config.json`` is missing or unreadable, no tokenizer file
            is there, a ``*.safetensors`` file is cut short or not safetensors (:func:`check_weight_files`), or
            the model type differs; one line naming the folder or file and what is expected.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"{folder}: model folder not found (expected a Hugging Face model folder: "
                               "config.json, model weights, tokenizer files)")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ModelFolderError(f"{folder}: no config.json; expected a Hugging Face model folder "
                               "(save_pretrained writes config.json beside the weights)")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelFolderError(f"{cfg_path}: not readable as JSON ({e})") from None
    if tokenizer and not any(all((folder / f).is_file() for f in group) for group in TOKENIZER_FILES):
        wanted = ", ".join(" + ".join(g) for g in TOKENIZER_FILES)
        raise ModelFolderError(f"{folder}: no tokenizer file (one of: {wanted}); save the tokenizer into the "
                               "folder with tokenizer.save_pretrained(folder)")
    check_weight_files(folder)
    if model_type and config.get("model_type") != model_type:
        raise ModelFolderError(f"{cfg_path}: model_type {config.get('model_type')!r}, but this step needs a "
                               f"{model_type!r} checkpoint (the CLM detour trains ModernBertForMaskedLM: "
                               "base_model must be a ModernBERT model)")
    return config


def check_weight_files(folder: str | Path) -> None:
    """Read the header of every ``*.safetensors`` file of ``folder`` and check that the tensors it lists fit
    in the file (a copy cut short, a disk filled mid-write): transformers' own error for such a file,
    ``SafetensorError``, names no file. Nothing is loaded (the header only; safetensors' format: an 8-byte
    little-endian header length, a JSON header, then the data whose offsets it gives).

    Raises:
        ModelFolderError: naming the file, its size and what it lacks.
    """
    import struct

    for path in sorted(Path(folder).glob("*.safetensors")):
        size = path.stat().st_size
        try:
            with open(path, "rb") as f:
                head = f.read(8)
                n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
                header = json.loads(f.read(n)) if n is not None and 8 + n <= size else None
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ModelFolderError(f"{path}: not a readable safetensors file ({e}); copy or save the model "
                                   "again") from None
        if not isinstance(header, dict):
            raise ModelFolderError(f"{path}: {size:,} bytes, too short for its safetensors header (a copy cut "
                                   "short?); copy or save the model again")
        ends = [t["data_offsets"][1] for k, t in header.items()
                if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t]
        need = 8 + n + max(ends, default=0)
        if size < need:
            raise ModelFolderError(f"{path}: {size:,} bytes, but its header lists tensors up to byte {need:,} "
                                   "(a copy cut short, or a disk that filled while it was written); copy or "
                                   "save the model again")
