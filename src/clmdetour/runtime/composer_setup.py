"""Two start-up costs of Composer's constructors that buy nothing here, avoided for their duration.

Measured on 2 CPU cores (``benchmarks/run.py --only fixed_cost``, docs/performance.md, "Fixed cost of
a training process"):

- ``composer.Trainer(...)`` calls ``composer.utils.collect_env.get_composer_env_dict()`` to log
  Composer's version; that also asks py-cpuinfo for the CPU model, which starts a second Python
  interpreter (``cpuinfo.get_cpu_info``: 0.4-1.2 s), and the CPU model is then thrown away. A
  fine-tuning job builds one Trainer per seed and learning rate (9 in the demo's grid).
  :func:`cheap_cpu_model` answers that question from ``/proc/cpuinfo`` instead.
- ``composer.models.HuggingFaceModel(...)`` asks whether the model is a registered causal LM by
  materialising every causal-LM class of transformers (``MODEL_FOR_CAUSAL_LM_MAPPING.values()``:
  about 200 model modules, 6 s on CPU). :func:`causal_lm_check_by_name` answers it from the class
  names of the same mapping, without importing them.

Both replace a Composer module attribute inside a ``with`` block only (``unittest.mock.patch``); when a
Composer release no longer has the attribute, they leave Composer as it is.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterator
from unittest import mock


def cpu_model_name() -> str:
    """The CPU's model name: ``/proc/cpuinfo``'s ``model name`` (Linux), else ``platform.processor()``, else ``CPU``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


@contextlib.contextmanager
def cheap_cpu_model() -> Iterator[None]:
    """Within the block, Composer's ``collect_env.get_cpu_model`` reads :func:`cpu_model_name` (no subprocess)."""
    from composer.utils import collect_env

    if not hasattr(collect_env, "get_cpu_model"):
        yield
        return
    with mock.patch.object(collect_env, "get_cpu_model", cpu_model_name):
        yield


def is_causal_lm_by_name(model) -> bool:
    """Whether a class in ``type(model).__mro__`` is named in transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``.

    Composer's ``_is_registered_causal_lm`` asks the same of the mapping's classes with
    ``isinstance``; the names are the mapping's own entries, so the answers agree for every class
    transformers registers (a class added at run time with ``AutoModelForCausalLM.register`` is not
    named there).
    """
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update(value if isinstance(value, (list, tuple)) else [value])
    return any(cls.__name__ in names for cls in type(model).__mro__)


@contextlib.contextmanager
def causal_lm_check_by_name() -> Iterator[None]:
    """Within the block, Composer's ``HuggingFaceModel`` constructor uses :func:`is_causal_lm_by_name`."""
    import composer.models.huggingface as hf

    if not hasattr(hf, "_is_registered_causal_lm"):
        yield
        return
    with mock.patch.object(hf, "_is_registered_causal_lm", is_causal_lm_by_name):
        yield


def import_training_libraries() -> None:
    """Import Composer (and torch, transformers, torchmetrics with it), then ``gc.freeze()`` what exists.

    For a training process's entry point (the ``finetune`` rule's script, ``clmdetour.training.cli``),
    right after its light imports. The modules' objects, about 5,000 modules' worth, live as long as
    the process; frozen, Python's garbage collector no longer walks them in each full collection.
    Without it, the full collections that the next imports (the model's modules, the tokenizer) set
    off cost 0.3-0.6 s before a fine-tuning job's first step on 2 CPU cores (measured with
    ``benchmarks/run.py --only fixed_cost``). ``gc.freeze`` is the standard library's (Python >= 3.7).
    """
    import gc

    import composer  # noqa: F401  (imported for its side effect: the libraries are loaded before the freeze)

    gc.freeze()
