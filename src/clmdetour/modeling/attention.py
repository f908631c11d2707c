"""The attention kernel: one meaning of ``attn_implementation: auto`` for pretraining and fine-tuning."""

from __future__ import annotations


def select_attn_implementation(requested: str, on_gpu: bool) -> str:
    """The transformers ``attn_implementation`` to load a model with.

    ``auto`` is ``flash_attention_2`` on a CUDA GPU when the flash-attn package
    is importable, else ``sdpa`` (always ``sdpa`` on CPU); ``sdpa``, ``eager``
    and ``flash_attention_2`` pass through. The same rule serves
    ``pretraining.attn_implementation`` and ``evaluation.attn_implementation``.

    Args:
        requested: the config value (``auto``, ``sdpa``, ``eager``, ``flash_attention_2``).
        on_gpu: whether the model runs on a CUDA device.

    Raises:
        RuntimeError: flash_attention_2 requested but not usable here.
    """
    fa2 = False
    if on_gpu:
        try:
            import flash_attn  # noqa: F401

            fa2 = True
        except ImportError:
            fa2 = False
    if requested == "auto":
        return "flash_attention_2" if fa2 else "sdpa"
    if requested == "flash_attention_2" and not fa2:
        raise RuntimeError("attn_implementation=flash_attention_2 needs a CUDA GPU and the flash-attn package; "
                           "use 'auto' or 'sdpa'")
    return requested
