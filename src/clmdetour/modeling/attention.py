"""The attention back-ends, one registry entry each, and the one meaning of ``attn_implementation: auto``.

Each :class:`AttentionBackend` says what a back-end needs (a CUDA device, a
package, a half-precision dtype) and how its masks are built; the choice rule
:func:`select_attn_implementation` serves ``pretraining.attn_implementation``
and ``evaluation.attn_implementation`` alike. A CLM phase proves causality
on its first batch whatever the back-end (:func:`clmdetour.modeling.causal.check_causality`).
The config schema's enums are checked against :data:`BACKENDS` by the test suite.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

AUTO = "auto"


@dataclass(frozen=True)
class AttentionBackend:
    """One transformers ``attn_implementation``.

    Attributes:
        name: the transformers (and config) name.
        needs_gpu: usable only on a CUDA device.
        package: a module that must be importable (None: torch alone).
        half_precision_only: computes in bf16/fp16 only (flash-attn kernels).
        masks: how the causal / bidirectional and sliding-window masks reach it
            (the forward of :func:`clmdetour.modeling.causal.forward_encoder`).
    """

    name: str
    needs_gpu: bool = False
    package: str | None = None
    half_precision_only: bool = False
    masks: str = "dense 4-D additive masks from transformers' masking_utils (causal_mask_mapping)"

    def available(self, on_gpu: bool) -> bool:
        """Whether the back-end can run here (``on_gpu``: the model runs on a CUDA device)."""
        if self.needs_gpu and not on_gpu:
            return False
        if self.package is None:
            return True
        try:  # an import, not a find_spec: a package that is installed but fails to import is not usable
            importlib.import_module(self.package)
        except ImportError:
            return False
        return True


BACKENDS: dict[str, AttentionBackend] = {b.name: b for b in (
    AttentionBackend("sdpa"),
    AttentionBackend("eager"),
    AttentionBackend("flash_attention_2", needs_gpu=True, package="flash_attn", half_precision_only=True,
                     masks="no mask tensor: unpadded sequences with the kernel's causal flag and window size"),
)}
#: The config values of ``attn_implementation`` (the schema enums): ``auto`` then every back-end.
CHOICES = (AUTO, *BACKENDS)
#: ``auto``'s order of preference on a CUDA device; the last entry is the fallback everywhere.
AUTO_PREFERENCE = ("flash_attention_2", "sdpa")


def select_attn_implementation(requested: str, on_gpu: bool) -> str:
    """The transformers ``attn_implementation`` to load a model with.

    ``auto`` is the first of :data:`AUTO_PREFERENCE` available here:
    ``flash_attention_2`` on a CUDA GPU when the flash-attn package is
    importable, else ``sdpa`` (always ``sdpa`` on CPU); a named back-end
    passes through when it is available.

    Args:
        requested: the config value (one of :data:`CHOICES`).
        on_gpu: whether the model runs on a CUDA device.

    Raises:
        ValueError: an unknown back-end name.
        RuntimeError: a named back-end not usable here (flash_attention_2 without CUDA or flash-attn).
    """
    if requested == AUTO:
        return next(n for n in AUTO_PREFERENCE if BACKENDS[n].available(on_gpu))
    if requested not in BACKENDS:
        raise ValueError(f"attn_implementation {requested!r} is not one of {CHOICES}")
    if not BACKENDS[requested].available(on_gpu):
        raise RuntimeError(f"attn_implementation={requested} needs a CUDA GPU and the flash-attn package; "
                           "use 'auto' or 'sdpa'")
    return requested
