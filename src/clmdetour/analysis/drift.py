"""Layer drift: how far each layer of a continued-pretrained model moved from the base model.

Two measures per encoder layer, for every variant after phase 1 and after the
decay (the paper's claim: CLM's dense supervision moves the low layers far
more than MLM does, and the change persists through the MLM decay):

* relative weight change ``||W - W0||_F / ||W0||_F`` against the base model,
  for the whole layer (``module_type = all``) and per module type
  (``attention``: Wqkv and Wo; ``mlp``: Wi and Wo; ``norm``: the layer's norms),
  where a group of tensors is measured as one concatenated vector
  (``sqrt(sum ||dW_i||^2) / sqrt(sum ||W0_i||^2)``). The embeddings
  (``embedding``, ``norm``) and the MLM head with the final norm (``head``) are
  reported as pseudo-layers ``embeddings`` and ``head``. A frozen layer's
  tensors are bit-identical to the base, so its change is exactly 0.
* linear CKA (``clmdetour.analysis.cka``, Kornblith et al. 2019) between the
  base model's and the variant's hidden states on a fixed random sample of
  held-out corpus sequences (every non-padding token is one example). The base
  model runs bidirectionally; the variant runs in the attention mode it was
  trained with (a phase-1 CLM model causally, read from its ``run.json``).
  Hidden state ``embeddings`` is the embedding output; layer ``i`` is the
  output of encoder layer ``i`` (the last one after the final norm, as
  transformers' ModernBERT returns it).

The tidy table has one row per (variant, phase, layer, module_type, metric):
see ``COLUMNS``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from clmdetour.analysis.cka import LinearCKA
from clmdetour.corpus.pack import attention_mask_of
from clmdetour.io import read_json

COLUMNS = ["variant", "phase", "layer", "module_type", "metric", "value", "attention", "n_sequences", "n_tokens",
           "seed"]
METRICS = ("rel_weight_change", "cka")
ATTENTION_MODES = {True: "causal", False: "bidirectional"}

_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(attn_norm|attn|mlp_norm|mlp)\.")
_LAYER_MODULES = {"attn": "attention", "mlp": "mlp", "attn_norm": "norm", "mlp_norm": "norm"}
_OTHER_GROUPS = {
    "model.embeddings.tok_embeddings.": ("embeddings", "embedding"),
    "model.embeddings.norm.": ("embeddings", "norm"),
    "model.final_norm.": ("head", "norm"),
    "head.dense.": ("head", "dense"),
    "head.norm.": ("head", "norm"),
    "decoder.": ("head", "decoder"),
}

ForwardFn = Callable[..., object]


def parameter_group(name: str) -> tuple[str, str]:
    """The (layer, module_type) a ModernBertForMaskedLM parameter belongs to.

    Args:
        name: parameter name as in ``named_parameters()``, e.g. ``model.layers.3.attn.Wqkv.weight``.

    Returns:
        ``(layer, module_type)``: layer is ``"embeddings"``, ``"0"`` .. ``"N-1"`` or
        ``"head"``; module_type is ``attention``, ``mlp``, ``norm``, ``embedding``,
        ``dense`` or ``decoder``.

    Raises:
        ValueError: the name is not a ModernBertForMaskedLM parameter.
    """
    m = _LAYER_RE.match(name)
    if m:
        return m.group(1), _LAYER_MODULES[m.group(2)]
    for prefix, group in _OTHER_GROUPS.items():
        if name.startswith(prefix):
            return group
    raise ValueError(f"parameter {name!r} is not a ModernBertForMaskedLM parameter (layer drift knows "
                     f"model.layers.N.{{attn,attn_norm,mlp,mlp_norm}}, {sorted(_OTHER_GROUPS)})")


def layer_sort_key(layer: str) -> float:
    """Depth order of a layer label: ``embeddings`` first, encoder layers by index, ``head`` last."""
    if layer == "embeddings":
        return -1.0
    if layer == "head":
        return math.inf
    return float(int(layer))


def named_parameter_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached parameters of ``model`` by name (a tied weight appears once, under its first name)."""
    return {name: p.detach() for name, p in model.named_parameters()}


def relative_weight_change(base: Mapping[str, torch.Tensor], tuned: Mapping[str, torch.Tensor]) -> pd.DataFrame:
    """Relative Frobenius change ``||W - W0|| / ||W0||`` per layer and module type.

    Args:
        base: parameter tensors of the base model by name (``W0``).
        tuned: parameter tensors of the continued-pretrained model, same names and shapes.

    Returns:
        DataFrame with columns ``layer``, ``module_type``, ``value`` (dimensionless):
        one row per (layer, module type) and one per layer with module_type ``all``.
        An unchanged group gives exactly 0.0; a group whose base norm is 0 gives
        0.0 if unchanged, else ``inf``. Computed in float64.

    Raises:
        ValueError: a parameter is missing on one side, has a different shape, or
            is not a ModernBertForMaskedLM parameter.
    """
    missing = sorted(set(base) ^ set(tuned))
    if missing:
        side = "the tuned model" if missing[0] in base else "the base model"
        raise ValueError(f"parameter {missing[0]!r} is missing from {side} ({len(missing)} names differ)")
    diff_sq: dict[tuple[str, str], float] = defaultdict(float)
    base_sq: dict[tuple[str, str], float] = defaultdict(float)
    for name in base:
        w0, w = base[name], tuned[name]
        if tuple(w0.shape) != tuple(w.shape):
            raise ValueError(f"parameter {name!r} has shape {tuple(w.shape)} in the tuned model "
                             f"but {tuple(w0.shape)} in the base model")
        layer, module_type = parameter_group(name)
        w0 = w0.detach().to(device="cpu", dtype=torch.float64)
        d = float(torch.sum((w.detach().to(device="cpu", dtype=torch.float64) - w0) ** 2))
        b = float(torch.sum(w0 ** 2))
        for key in ((layer, module_type), (layer, "all")):
            diff_sq[key] += d
            base_sq[key] += b
    rows = []
    for (layer, module_type), d in diff_sq.items():
        b = base_sq[(layer, module_type)]
        value = math.sqrt(d) / math.sqrt(b) if b > 0 else (0.0 if d == 0 else math.inf)
        rows.append({"layer": layer, "module_type": module_type, "value": value})
    out = pd.DataFrame(rows, columns=["layer", "module_type", "value"])
    out["_k"] = out["layer"].map(layer_sort_key)
    return out.sort_values(["_k", "module_type"], kind="stable").drop(columns="_k").reset_index(drop=True)


def sample_sequences(valid_dir: str | Path, n: int, seed: int, max_length: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """A fixed random sample of held-out sequences (``datasets`` folder saved with ``save_to_disk``).

    Args:
        valid_dir: folder with columns ``input_ids`` (fixed-length lists of token ids)
            and optionally ``attention_mask`` (1 = token, 0 = padding; all ones if absent).
        n: number of sequences wanted; all of them if the split has fewer.
        seed: seed of ``numpy.random.default_rng`` choosing rows without replacement.
        max_length: keep the first ``max_length`` tokens of each sequence (None: all).

    Returns:
        ``(input_ids, attention_mask, indices)``: two (n', seq) int64 tensors and
        the sorted row indices chosen, ``n' = min(n, rows)``.

    Raises:
        ValueError: the folder is not a dataset, lacks ``input_ids``, is empty,
            or its sequences have different lengths.
    """
    import datasets
    import numpy as np

    valid_dir = Path(valid_dir)
    try:
        ds = datasets.load_from_disk(str(valid_dir))
    except FileNotFoundError as e:
        raise ValueError(f"{valid_dir}: not a dataset saved with save_to_disk ({e})") from None
    if isinstance(ds, datasets.DatasetDict):
        raise ValueError(f"{valid_dir}: expected one split (a Dataset), found a DatasetDict {sorted(ds)}")  # noqa: TRY004 (a malformed file is a bad value, as its callers expect)
    if "input_ids" not in ds.column_names:
        raise ValueError(f"{valid_dir}: column 'input_ids' missing; columns: {ds.column_names}")
    if len(ds) == 0:
        raise ValueError(f"{valid_dir}: the held-out split is empty")
    if n < 1:
        raise ValueError(f"sample size must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    indices = sorted(int(i) for i in rng.choice(len(ds), size=min(n, len(ds)), replace=False))
    rows = ds.select(indices)
    ids = rows["input_ids"]
    lengths = {len(r) for r in ids}
    if len(lengths) != 1:
        raise ValueError(f"{valid_dir}: input_ids rows have different lengths {sorted(lengths)[:5]}; expected packed sequences")
    input_ids = torch.tensor(ids, dtype=torch.long)
    if "attention_mask" in ds.column_names:
        attention_mask = torch.tensor(rows["attention_mask"], dtype=torch.long)
    elif "n_tokens" in ds.column_names:  # the compact storage (clmdetour.corpus.pack)
        attention_mask = torch.as_tensor(attention_mask_of(rows["n_tokens"], input_ids.shape[1]))
    else:
        attention_mask = torch.ones_like(input_ids)
    if max_length is not None:
        input_ids, attention_mask = input_ids[:, :max_length], attention_mask[:, :max_length]
    return input_ids, attention_mask, indices


def attention_mode(run_json: str | Path) -> bool:
    """Whether a phase was trained causally, from its ``run.json`` (``attention.causal``).

    Raises:
        ValueError: the file lacks ``attention.causal`` or it is not a boolean.
        FileNotFoundError: the file does not exist.
    """
    record = read_json(run_json)
    causal = (record.get("attention") or {}).get("causal") if isinstance(record, dict) else None
    if not isinstance(causal, bool):
        raise ValueError(f"{run_json}: key 'attention.causal' missing or not true/false (got {causal!r})")  # noqa: TRY004 (a malformed file is a bad value, as its callers expect)
    return causal


def _default_forward() -> ForwardFn:
    from clmdetour.modeling.causal import forward_encoder

    return forward_encoder


@torch.inference_mode()
def hidden_state_cka(base_model: torch.nn.Module, model: torch.nn.Module, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor, causal: bool, batch_size: int = 8,
                     forward: ForwardFn | None = None) -> list[float]:
    """Per-layer linear CKA between the base model's and ``model``'s hidden states.

    Args:
        base_model: the base ModernBertForMaskedLM (run bidirectionally).
        model: the continued-pretrained model (same depth and tokenizer).
        input_ids: (n, seq) token ids.
        attention_mask: (n, seq), 1 = token; only those positions are examples.
        causal: run ``model`` with causal attention on every layer.
        batch_size: sequences per forward pass.
        forward: ``forward(model, input_ids, attention_mask=..., causal=..., output_hidden_states=True)``
            returning an output with ``hidden_states`` (embeddings first, each
            (batch, seq, hidden)); default ``clmdetour.modeling.causal.forward_encoder``.

    Returns:
        CKA per hidden state: index 0 = embeddings, index i = encoder layer i-1.

    Raises:
        ValueError: the two models return different numbers of hidden states.
    """
    forward = forward or _default_forward()
    base_model.eval()
    model.eval()
    accumulators: list[LinearCKA] | None = None
    for start in range(0, input_ids.shape[0], batch_size):
        ids = input_ids[start:start + batch_size]
        mask = attention_mask[start:start + batch_size]
        hb = forward(base_model, ids, attention_mask=mask, causal=False, output_hidden_states=True).hidden_states
        hm = forward(model, ids, attention_mask=mask, causal=causal, output_hidden_states=True).hidden_states
        if len(hb) != len(hm):
            raise ValueError(f"the base model returns {len(hb)} hidden states but the tuned model {len(hm)}")
        if accumulators is None:
            accumulators = [LinearCKA() for _ in hb]
        keep = mask.bool()
        for acc, xb, xm in zip(accumulators, hb, hm):
            acc.update(xb[keep], xm[keep])
    return [acc.value() for acc in accumulators or []]


@dataclass(frozen=True)
class PhaseModel:
    """One model to analyse: its phase name, HF folder and attention mode."""

    phase: str
    model_dir: str
    causal: bool


def load_masked_lm(model_dir: str | Path, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """Load an HF ModernBertForMaskedLM folder in float32, eval mode, on CPU."""
    from transformers import AutoModelForMaskedLM

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(f"{model_dir}: not a Hugging Face model folder (config.json missing)")
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir), attn_implementation=attn_implementation,
                                                 dtype=torch.float32)
    return model.eval()


def layer_drift(variant: str, base_dir: str | Path, phases: Iterable[PhaseModel], valid_dir: str | Path,
                n_sequences: int, seed: int, max_length: int | None = None, batch_size: int = 8,
                attn_implementation: str = "sdpa", forward: ForwardFn | None = None) -> pd.DataFrame:
    """The tidy layer-drift table of one variant (weight change and CKA for each phase).

    Args:
        variant: variant name written in the ``variant`` column.
        base_dir: HF folder of the base model.
        phases: the phase models to compare with the base (phase 1, decay).
        valid_dir: held-out corpus split (``datasets`` folder).
        n_sequences: sequences sampled for CKA (fewer if the split is smaller).
        seed: sampling seed (recorded in every CKA row).
        max_length: truncate sequences to this many tokens (None: full length).
        batch_size: sequences per forward pass.
        attn_implementation: transformers attention back-end used to load the models.
        forward: see ``hidden_state_cka``.

    Returns:
        DataFrame with ``COLUMNS``; ``n_sequences``, ``n_tokens`` and ``seed`` are
        empty (NA) on weight-change rows; ``attention`` is the mode the phase
        model was trained (and, for CKA, run) with.
    """
    base = load_masked_lm(base_dir, attn_implementation)
    base_params = named_parameter_tensors(base)
    input_ids, attention_mask, _ = sample_sequences(valid_dir, n_sequences, seed, max_length)
    n_seq, n_tok = int(input_ids.shape[0]), int(attention_mask.sum())
    frames = []
    for pm in phases:
        model = load_masked_lm(pm.model_dir, attn_implementation)
        mode = ATTENTION_MODES[pm.causal]
        w = relative_weight_change(base_params, named_parameter_tensors(model))
        w = w.assign(metric="rel_weight_change", n_sequences=pd.NA, n_tokens=pd.NA, seed=pd.NA)
        ckas = hidden_state_cka(base, model, input_ids, attention_mask, pm.causal, batch_size, forward)
        c = pd.DataFrame({
            "layer": ["embeddings"] + [str(i) for i in range(len(ckas) - 1)],
            "module_type": "hidden_states", "value": ckas, "metric": "cka",
            "n_sequences": n_seq, "n_tokens": n_tok, "seed": seed,
        })
        frames.append(pd.concat([w, c], ignore_index=True).assign(variant=variant, phase=pm.phase, attention=mode))
        del model
    out = pd.concat(frames, ignore_index=True)[COLUMNS]
    for col in ("n_sequences", "n_tokens", "seed"):
        out[col] = out[col].astype("Int64")
    return out


def read_drift_table(path: str | Path) -> pd.DataFrame:
    """Read a layer-drift TSV, checking its columns and metrics.

    Raises:
        ValueError: a column of ``COLUMNS`` is missing or a metric is unknown (names the file).
    """
    df = pd.read_csv(path, sep="\t", dtype={"layer": str})
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: columns {missing} missing; expected {COLUMNS}")
    bad = sorted(set(df["metric"]) - set(METRICS))
    if bad:
        raise ValueError(f"{path}: unknown metric {bad[0]!r}; allowed: {list(METRICS)}")
    for col in ("n_sequences", "n_tokens", "seed"):
        df[col] = df[col].astype("Int64")
    return df


def combine_drift_tables(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate per-variant layer-drift TSVs into one table (order kept).

    Raises:
        ValueError: no paths, or a file fails ``read_drift_table``.
    """
    frames = [read_drift_table(p) for p in paths]
    if not frames:
        raise ValueError("no layer-drift tables to combine")
    return pd.concat(frames, ignore_index=True)[COLUMNS]


def write_tsv(df: pd.DataFrame, path: str | Path) -> None:
    """Write a table as TSV atomically (temporary file, then rename); floats with 8 significant digits."""
    from clmdetour.io import atomic_write_text

    atomic_write_text(path, df.to_csv(sep="\t", index=False, float_format="%.8g"))
