"""The attention back-ends, one registry entry each, and the one meaning of ``attn_implementation: auto``.

Each :class:`AttentionBackend` says what a back-end needs (a CUDA device, a
package) and whether it takes a mask tensor; the choice rule
:func:`choose_attn_implementation` serves ``pretraining.attn_implementation``
and ``evaluation.attn_implementation`` alike: a pure function of the request,
the device, which back-ends' packages import and the candidate's self-check on two
rows of the first batch (loss parity with sdpa within
:data:`PARITY_TOLERANCE_NATS`, and causality in a CLM phase:
:func:`clmdetour.modeling.causal.attention_self_check`). A failed check falls
back to sdpa and says why.
The config schema's enums are checked against :data:`BACKENDS` by the test suite. Code outside this
module asks the registry (:func:`takes_mask`, :data:`REFERENCE`, :func:`importable_packages`), never
compares back-end names.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass

AUTO = "auto"


@dataclass(frozen=True)
class AttentionBackend:
    """One transformers ``attn_implementation``.

    Attributes:
        name: the transformers (and config) name.
        needs_gpu: usable only on a CUDA device.
        package: the module it needs, which must import (None: torch alone); named with ``-`` for ``_``
            in ``auto``'s reason and in the CPU refusal (``flash_attn``: flash-attn, its pip name).
        takes_mask: whether the back-end reads a mask tensor (a dense 4-D mask or a BlockMask), so the
            causal and document masks reach it; False: padding and causality by the kernel's own
            arguments, and the document mask is refused (:func:`clmdetour.modeling.causal.forward_encoder`).
        label: the back-end's name in a sentence (``auto``'s reason).
    """

    name: str
    needs_gpu: bool = False
    package: str | None = None
    takes_mask: bool = True
    label: str = ""

    @property
    def package_label(self) -> str | None:
        """``package`` as a sentence names it (``flash_attn`` -> ``flash-attn``); None without a package."""
        return self.package.replace("_", "-") if self.package else None

    def package_importable(self) -> bool:
        """Whether ``package`` imports (True when the back-end needs none)."""
        if self.package is None:
            return True
        try:  # an import, not a find_spec: a package that is installed but fails to import is not usable
            importlib.import_module(self.package)
        except ImportError:
            return False
        return True

    def usable(self, on_gpu: bool, importable: Collection[str]) -> bool:
        """Whether the back-end can train here: a pure function of the device and of the packages that
        import (``importable``: :func:`importable_packages`)."""
        if self.needs_gpu and not on_gpu:
            return False
        return self.package is None or self.package in importable


# How the masks reach each back-end (the forward of clmdetour.modeling.causal.forward_encoder): sdpa and
# eager get dense 4-D additive masks from transformers' masking_utils (causal_mask_mapping);
# flash_attention_2 no mask tensor (unpadded sequences with the kernel's causal flag and window size; bf16 or
# fp16 only, which the GPU's amp_bf16 autocast gives); flex_attention BlockMasks from masking_utils, built
# once per batch and shared by the layers of one type.
BACKENDS: dict[str, AttentionBackend] = {b.name: b for b in (
    AttentionBackend("sdpa"),
    AttentionBackend("eager"),
    AttentionBackend("flash_attention_2", needs_gpu=True, package="flash_attn", takes_mask=False),
    # torch's FlexAttention runs its forward pass on CPU too (the tests compare it with sdpa there), but
    # torch has no CPU backward for it ("FlexAttention does not support backward on CPU"): training needs CUDA.
    AttentionBackend("flex_attention", needs_gpu=True, label="FlexAttention"),
)}
#: The config values of ``attn_implementation`` (the schema enums): ``auto`` then every back-end.
CHOICES = (AUTO, *BACKENDS)
#: ``auto``'s order of preference on a CUDA device; the last entry is the fallback everywhere.
AUTO_PREFERENCE = ("flash_attention_2", "flex_attention", "sdpa")
#: ``auto``'s order for fine-tuning (``evaluation.attn_implementation``): no FlexAttention. Fine-tuning runs
#: eager, where FlexAttention takes torch's slow reference path, and its batches change length with every
#: length group, which would recompile a compiled FlexAttention encoder (benchmarks/gpu.py measures both).
FINETUNE_AUTO_PREFERENCE = ("flash_attention_2", "sdpa")
#: Why fine-tuning's ``auto`` leaves FlexAttention out, in the reason it records.
FINETUNE_WHY = ("fine-tuning runs uncompiled, where FlexAttention takes a slow reference path, "
                "and its batch lengths vary")
#: The back-end every other one is checked against, and falls back to.
REFERENCE = "sdpa"
#: Largest |loss(candidate) - loss(sdpa)| (nats per labelled token) the self-check accepts on its two rows.
#: bf16 keeps about 3 significant digits: a ~10-nat loss computed by two correct kernels differs by
#: up to a few 1e-3 nats; 0.02 (0.2 % of 10 nats) leaves margin and still catches a wrong mask, whose
#: loss moves by tenths of a nat or more (a leak of the next token lowers the CLM loss towards 0).
PARITY_TOLERANCE_NATS = 0.02


@dataclass(frozen=True)
class AttentionChoice:
    """What ``attn_implementation`` resolved to, and why (recorded in ``run.json`` and the seed records).

    Attributes:
        requested: the config value.
        candidate: the back-end chosen before the self-check.
        implementation: the back-end used (the candidate, or ``sdpa`` after a failed self-check).
        reason: one sentence saying why.
    """

    requested: str
    candidate: str
    implementation: str
    reason: str

    @property
    def fell_back(self) -> bool:
        """Whether the candidate failed its self-check and the run uses :data:`REFERENCE` instead."""
        return self.implementation != self.candidate

    def as_dict(self) -> dict:
        return {"requested": self.requested, "candidate": self.candidate, "implementation": self.implementation,
                "reason": self.reason}


def candidate_implementation(requested: str, on_gpu: bool, importable: Collection[str],
                             finetuning: bool = False) -> tuple[str, str]:
    """The back-end to try, before its self-check: a pure function of its arguments.

    ``auto`` is the first usable back-end of :data:`AUTO_PREFERENCE`: on a CUDA device
    ``flash_attention_2`` when flash-attn imports, else ``flex_attention``; on CPU ``sdpa``. A back-end
    that needs a package is usable when that package is in ``importable``.
    A named back-end passes through
    when it can run here; ``sdpa`` and ``eager`` are only used when named (or as fallback).

    Args:
        requested: the config value (one of :data:`CHOICES`).
        on_gpu: whether the model runs on a CUDA device.
        importable: the packages that import here (:func:`importable_packages`; on CPU none need asking).
        finetuning: a fine-tuning job (``auto`` follows :data:`FINETUNE_AUTO_PREFERENCE`).

    Returns:
        ``(candidate, reason)``.

    Raises:
        ValueError: an unknown back-end name.
        RuntimeError: a named back-end not usable here (one that needs a GPU, on CPU: flash_attention_2
            without CUDA, or flex_attention, which has no CPU backward in torch; one whose package does
            not import: flash_attention_2 without flash-attn).
    """
    if requested == AUTO:
        if finetuning:
            name, reason = _auto(on_gpu, importable, FINETUNE_AUTO_PREFERENCE)
            return name, (f"{reason}; not FlexAttention: {FINETUNE_WHY}" if on_gpu and name == REFERENCE else reason)
        return _auto(on_gpu, importable)
    if requested not in BACKENDS:
        raise ValueError(f"attn_implementation {requested!r} is not one of {CHOICES}")
    backend = BACKENDS[requested]
    if backend.needs_gpu and not on_gpu:
        raise RuntimeError(f"attn_implementation={requested} needs a CUDA GPU"
                           + (f" and the {backend.package_label} package" if backend.package else
                              " (torch has no CPU backward for it)") + "; use 'auto' or 'sdpa'")
    if not backend.usable(on_gpu, importable):
        raise RuntimeError(f"attn_implementation={requested} needs the {backend.package} package, which does not "
                           "import here; use 'auto' (FlexAttention on CUDA) or 'sdpa'")
    return requested, f"{requested} as configured"


def _auto(on_gpu: bool, importable: Collection[str], preference: tuple[str, ...] | None = None) -> tuple[str, str]:
    """``auto``'s ``(candidate, reason)``: the first usable entry of ``preference`` (:data:`AUTO_PREFERENCE`)."""
    skipped = []
    for name in preference or AUTO_PREFERENCE:
        backend = BACKENDS[name]
        if not backend.usable(on_gpu, importable):
            if not backend.needs_gpu or on_gpu:  # a GPU-only back-end is not worth naming on CPU
                skipped.append(backend.package_label or name)
            continue
        if not on_gpu:
            return name, f"auto on CPU is {name}"
        if skipped:
            return name, f"auto on CUDA: {', '.join(skipped)} does not import, so {backend.label or name}"
        if backend.package:
            return name, f"auto on CUDA: {backend.package_label} imports"
        return name, f"auto on CUDA is {name}"
    raise AssertionError(f"{AUTO_PREFERENCE[-1]} is usable everywhere")  # the registry's last entry: sdpa


def choose_attn_implementation(requested: str, on_gpu: bool, importable: Collection[str],
                               check_failure: str | None, finetuning: bool = False) -> AttentionChoice:
    """The back-end a run uses: a pure function of the request, the device, the packages that import
    and the candidate's self-check (:func:`clmdetour.modeling.causal.attention_self_check`).

    Args:
        requested, on_gpu, importable, finetuning: as :func:`candidate_implementation`.
        check_failure: None when the candidate passed its self-check (or needs none: sdpa), else why it failed.

    Returns:
        An :class:`AttentionChoice`; a failed check falls back to ``sdpa`` and says why.

    Raises:
        ValueError, RuntimeError: as :func:`candidate_implementation`.
    """
    candidate, reason = candidate_implementation(requested, on_gpu, importable, finetuning)
    if check_failure is None or candidate == REFERENCE:
        return AttentionChoice(requested, candidate, candidate, reason)
    return AttentionChoice(requested, candidate, REFERENCE,
                           f"{reason}, but its self-check failed ({check_failure}); falling back to sdpa")


def needs_self_check(implementation: str) -> bool:
    """Whether a back-end is checked against :data:`REFERENCE` before use (every one but sdpa itself)."""
    return implementation != REFERENCE


def takes_mask(implementation: str) -> bool:
    """Whether the back-end named ``implementation`` reads a mask tensor (:attr:`AttentionBackend.takes_mask`);
    True for a name outside the registry (transformers' own default back-ends build their masks)."""
    backend = BACKENDS.get(implementation)
    return backend is None or backend.takes_mask


def importable_packages() -> frozenset[str]:
    """The packages of :data:`BACKENDS` that import here (one that is installed but fails to import does not count).

    Imports each; asked on a CUDA device only (a back-end that needs a package needs a GPU too).
    """
    return frozenset(b.package for b in BACKENDS.values() if b.package and b.package_importable())


def select_attn_implementation(requested: str, on_gpu: bool, finetuning: bool = False) -> str:
    """The back-end to load a model with, before any self-check (:func:`candidate_implementation`
    with the packages' importability read here, on a CUDA device).

    Raises:
        ValueError: an unknown back-end name.
        RuntimeError: a named back-end not usable here.
    """
    return candidate_implementation(requested, on_gpu, importable_packages() if on_gpu else frozenset(), finetuning)[0]
