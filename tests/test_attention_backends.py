"""The attention back-ends: the choice rule, the self-check and its fallback, FlexAttention against sdpa,
the document mask, the memory planner and a compiled phase (CPU)."""
import itertools
import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO, tiny_phase1_section
from transformers import ModernBertForMaskedLM

from clmdetour.config import ConfigError
from clmdetour.modeling.attention import (
    AUTO,
    BACKENDS,
    PARITY_TOLERANCE_NATS,
    candidate_implementation,
    choose_attn_implementation,
)
from clmdetour.modeling.causal import (
    attention_self_check,
    check_causality,
    document_ids,
    document_position_ids,
    forward_encoder,
    set_attention,
)
from clmdetour.modeling.loss import chunked_lm_loss
from clmdetour.runtime.memory import GIB, estimate_step_bytes, plan_micro_batch
from clmdetour.training.memory import check_configured_micro_batch

# ---------------------------------------------------------------- the choice, as a table

FA = frozenset({BACKENDS["flash_attention_2"].package})  # the packages that import: flash-attn
NONE = frozenset()


def _packages(fa: bool) -> frozenset:
    return FA if fa else NONE


@pytest.mark.parametrize("requested,on_gpu,fa,failure,expected", [
    ("auto", False, False, None, "sdpa"),
    ("auto", False, True, None, "sdpa"),                    # flash-attn on a CPU run changes nothing
    ("auto", True, True, None, "flash_attention_2"),
    ("auto", True, True, "leak", "sdpa"),                   # its check failed: fallback
    ("auto", True, False, None, "flex_attention"),
    ("auto", True, False, "loss differs", "sdpa"),
    ("sdpa", True, True, None, "sdpa"),                     # named back-ends pass through
    ("sdpa", True, True, "ignored", "sdpa"),                # sdpa is the reference: never falls back
    ("eager", False, False, None, "eager"),
    ("eager", False, False, "leak", "sdpa"),
    ("flex_attention", True, False, None, "flex_attention"),
    ("flash_attention_2", True, True, None, "flash_attention_2"),
])
def test_the_choice_is_a_function_of_request_device_package_and_check(requested, on_gpu, fa, failure, expected):
    choice = choose_attn_implementation(requested, on_gpu, _packages(fa), failure)
    assert choice.implementation == expected
    assert choice.requested == requested
    if failure and choice.candidate != "sdpa":
        assert failure in choice.reason and "falling back to sdpa" in choice.reason


@pytest.mark.parametrize("requested,on_gpu,fa,match", [
    ("flash_attention_2", False, True, "needs a CUDA GPU"),
    ("flash_attention_2", True, False, "needs the flash_attn package"),
    ("flex_attention", False, False, "no CPU backward"),
    ("flexattention", True, False, "is not one of"),
])
def test_a_back_end_that_cannot_run_here_is_refused_by_name(requested, on_gpu, fa, match):
    with pytest.raises((RuntimeError, ValueError), match=match):
        candidate_implementation(requested, on_gpu, _packages(fa))


def test_every_combination_is_decided():
    for requested, on_gpu, fa, failure in itertools.product([AUTO, *BACKENDS], [False, True], [False, True],
                                                            [None, "x"]):
        try:
            choice = choose_attn_implementation(requested, on_gpu, _packages(fa), failure)
        except (RuntimeError, ValueError):
            assert requested != AUTO and BACKENDS[requested].needs_gpu
            continue
        assert choice.implementation in BACKENDS
        assert choice.implementation == "sdpa" or not BACKENDS[choice.implementation].needs_gpu or on_gpu


# ---------------------------------------------------------------- the self-check and its fallback


def _leaky_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """A deliberately broken back-end: attends everywhere, whatever the mask says."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


@pytest.fixture
def leaky_backend():
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ALL_ATTENTION_FUNCTIONS.register("leaky_attention", _leaky_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register("leaky_attention", sdpa_mask)
    yield "leaky_attention"
    ALL_ATTENTION_FUNCTIONS._global_mapping.pop("leaky_attention", None)
    ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.pop("leaky_attention", None)


def _clm_probe(model, seq=48):
    torch.manual_seed(1)
    ids = torch.randint(5, model.config.vocab_size, (2, seq))
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]

    def loss_of(m):
        hidden = forward_encoder(m, ids, causal=True).last_hidden_state
        return chunked_lm_loss(hidden, labels, lambda h: m.decoder(m.head(h)), 64)

    return ids, loss_of


def test_a_leaking_back_end_fails_its_check_and_the_run_falls_back_to_sdpa(tiny_model_dir, leaky_backend):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    ids, loss_of = _clm_probe(model)
    failure = attention_self_check(model, leaky_backend, loss_of, lambda m: check_causality(m, ids))
    assert failure and "leaks" in failure
    choice = choose_attn_implementation("eager", False, NONE, failure)  # what the phase does with a failure
    set_attention(model, choice.implementation)
    assert choice.implementation == "sdpa" and "leaks" in choice.reason
    assert model.config._attn_implementation == "sdpa"
    assert check_causality(model, ids) <= 1e-5


def test_a_leak_shows_in_the_loss_even_without_the_causality_probe(tiny_model_dir, leaky_backend):
    """The loss-parity half of the check (the only half in an MLM phase)."""
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    # A random-init model's loss hardly depends on attention (about 2e-5 nats here): make attention matter.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.attn.Wo.weight.mul_(30)
            layer.attn.Wqkv.weight.mul_(3)
    _, loss_of = _clm_probe(model)
    failure = attention_self_check(model, leaky_backend, loss_of, None, tolerance=1e-4)
    assert failure and "vs sdpa" in failure
    assert attention_self_check(model, "eager", loss_of, None, tolerance=1e-4) is None  # a correct kernel passes


def test_a_correct_back_end_passes(tiny_model_dir):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    ids, loss_of = _clm_probe(model)
    assert attention_self_check(model, "eager", loss_of, lambda m: check_causality(m, ids)) is None
    assert model.config._attn_implementation == "eager"
    assert PARITY_TOLERANCE_NATS < 0.1


# ---------------------------------------------------------------- the document mask (sdpa dense masks on CPU)


def test_document_ids_and_positions_restart_after_each_separator():
    sep = 3
    ids = torch.tensor([[1, 7, 8, 3, 1, 9, 3, 1, 5, 6]])
    assert document_ids(ids, sep).tolist() == [[0, 0, 0, 0, 1, 1, 1, 2, 2, 2]]
    assert document_position_ids(document_ids(ids, sep)).tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]]


@pytest.mark.parametrize("causal", [True, False])
def test_a_token_does_not_see_another_document_of_its_row(tiny_model_dir, causal):
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa",
                                                  dtype=torch.float32).eval()
    sep = model.config.sep_token_id
    torch.manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (2, 60))
    ids[:, 29] = sep  # document 0: positions 0-29, document 1: 30-59
    other = ids.clone()
    other[:, 30:59] = torch.randint(5, model.config.vocab_size, (2, 29))  # only the second document changes
    with torch.no_grad():
        a = forward_encoder(model, ids, causal=causal, document_sep_id=sep).last_hidden_state
        b = forward_encoder(model, other, causal=causal, document_sep_id=sep).last_hidden_state
        assert torch.allclose(a[:, :30], b[:, :30], atol=1e-6)  # the first document is blind to the second
        off_a = forward_encoder(model, ids, causal=causal).last_hidden_state
        off_b = forward_encoder(model, other, causal=causal).last_hidden_state
    if causal:  # a causal first document never sees the second; the mask then shows in the second one instead
        first = ids.clone()
        first[:, :29] = torch.randint(5, model.config.vocab_size, (2, 29))
        with torch.no_grad():
            c = forward_encoder(model, first, causal=True, document_sep_id=sep).last_hidden_state
            off_c = forward_encoder(model, first, causal=True).last_hidden_state
        assert torch.allclose(a[:, 30:], c[:, 30:], atol=1e-6)
        assert (off_a[:, 30:] - off_c[:, 30:]).abs().max() > 1e-4  # without the mask it does see it
    else:
        assert (off_a[:, :30] - off_b[:, :30]).abs().max() > 1e-4
    # the second document, alone in its own row from position 0, gives the same outputs (positions restart)
    alone = ids[:, 30:]
    with torch.no_grad():
        solo = forward_encoder(model, alone, causal=causal).last_hidden_state
    assert torch.allclose(a[:, 30:], solo, atol=1e-5)


def test_the_document_mask_is_refused_under_flash_attention_2(tiny_model_dir):
    from clmdetour.modeling.causal import DocumentMaskError

    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(DocumentMaskError, match="pretraining.document_mask"):
        forward_encoder(model, torch.randint(5, 50, (1, 16)), causal=True, document_sep_id=3)


# ---------------------------------------------------------------- the memory planner


def _fake_bytes(static_gib, per_sequence_gib):
    return lambda mb: (static_gib + mb * per_sequence_gib) * GIB


def test_the_planner_picks_the_largest_fitting_divisor():
    mb, est, probed = plan_micro_batch(96, 72 * GIB, _fake_bytes(2.7, 4.74))
    assert mb == 12 and probed is None and est <= 72 * GIB  # 16 would take 78.5 GiB; 13-15 do not divide 96
    mb, _, _ = plan_micro_batch(96, 80 * GIB, _fake_bytes(2.7, 4.74))
    assert mb == 16
    mb, _, _ = plan_micro_batch(7, 72 * GIB, _fake_bytes(2.7, 4.74))
    assert mb == 7


def test_a_probe_over_the_limit_moves_down_to_the_next_divisor():
    probed = []

    def probe(mb):  # the real step takes 1.4x the estimate (sdpa's larger activations)
        probed.append(mb)
        return 1.4 * _fake_bytes(2.7, 4.74)(mb)

    mb, _, measured = plan_micro_batch(96, 72 * GIB, _fake_bytes(2.7, 4.74), probe)
    assert probed == [12, 8] and mb == 8 and measured <= 72 * GIB


def test_nothing_fits_and_a_configured_micro_batch_over_the_limit_are_refused_by_key():
    with pytest.raises(ConfigError, match=r"pretraining.memory_limit_gib \(4 GiB\): no micro-batch fits"):
        plan_micro_batch(8, 4 * GIB, _fake_bytes(2.7, 4.74))
    est = estimate_step_bytes(parameters=150_000_000, hidden_size=768, intermediate_size=1152, num_layers=22,
                              vocab_size=32768, seq_len=8192, micro_batch=16, chunk_tokens=2048)
    with pytest.raises(ConfigError, match=r"pretraining.micro_batch_sequences \(16\): one step is estimated at "
                                          r"[0-9.]+ GiB per device, over pretraining.memory_limit_gib \(72 GiB\)"):
        check_configured_micro_batch(16, "pretraining.micro_batch_sequences", 72 * GIB, est)


def test_the_estimate_matches_the_h200_measurement_it_was_fit_to():
    def est(mb):
        return estimate_step_bytes(parameters=149_000_000, hidden_size=768, intermediate_size=1152, num_layers=22,
                                   vocab_size=32768, seq_len=8192, micro_batch=mb, chunk_tokens=2048) / GIB
    # FlexAttention, uncompiled, bf16 on an H200: 21.7 GiB at 4 and 59.6 GiB at 12 (within 5 %, never below)
    assert 21.7 <= est(4) <= 21.7 * 1.05 and 59.6 <= est(12) <= 59.6 * 1.05


# ---------------------------------------------------------------- FlexAttention against sdpa (CPU forward)


@pytest.mark.slow  # every mask compiles its own FlexAttention kernel on CPU (15-30 s each)
def test_flex_attention_forward_equals_sdpa(tiny_model_dir):
    """Causal global + causal sliding, bidirectional global + sliding, and the document mask, on one shape.

    FlexAttention's block size is 128: the CPU kernel gives NaN rows for a length that is not a multiple
    of it (seen with torch 2.14), which the phase's self-check would catch; the shape here is 128.
    """
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa",
                                                  dtype=torch.float32).eval()
    sep = model.config.sep_token_id
    torch.manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (2, 128))
    ids[:, 50] = sep
    ids[1, 90] = sep
    cases = [{"causal": True}, {"causal": False}, {"causal": True, "document_sep_id": sep},
             {"causal": False, "document_sep_id": sep}]
    with torch.no_grad():
        for case in cases:
            set_attention(model, "sdpa")
            ref = forward_encoder(model, ids, **case).last_hidden_state
            set_attention(model, "flex_attention")
            got = forward_encoder(model, ids, **case).last_hidden_state
            assert (got - ref).abs().max() <= 1e-5, case
            # and the check would pass on it: the causal probe under flex
            if case["causal"]:
                assert check_causality(model, ids, document_sep_id=case.get("document_sep_id")) <= 1e-5


# ---------------------------------------------------------------- a compiled phase on CPU


@pytest.mark.slow  # compiles the tiny encoder with inductor (about a minute on 2 cores)
def test_a_compiled_clm_phase_with_the_document_mask_exports_plain_weights(tmp_path, tiny_model_dir, demo_texts):
    from safetensors.torch import load_file

    section = tiny_phase1_section(tmp_path, tiny_model_dir, demo_texts, 64)
    section.update(tokens=64 * 8 * 6, global_batch_sequences=8, micro_batch_sequences="auto", compile=True,
                   document_mask=True, checkpoint_interval="100ba", log_interval_steps=1,
                   checkpoint_root=str(tmp_path / "ckpt"), valid_sequences=4, warmup_tokens=0)
    out = tmp_path / "phase"
    cmd = [sys.executable, "-m", "clmdetour.training.cli", "--variant", "v", "--input-model", str(tiny_model_dir),
           "--corpus", str(tmp_path / "corpus"), "--output-dir", str(out), "--section", json.dumps(section)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["compile"]["enabled"] is True and run["attention"]["document_mask"] is True
    assert run["memory"]["requested"] == "auto" and run["micro_batch_sequences"] == 8  # CPU: the estimate decides
    lines = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    steady = [8 * 64 / x["tokens_per_s"] for x in lines[1:]]
    # compilation happened: the first step (which compiles) takes far longer than a steady one
    assert lines[0]["first_step_s"] > 5 * max(steady), (lines[0], steady)
    exported = load_file(str(out / "model" / "model.safetensors"))
    original = load_file(str(tiny_model_dir / "model.safetensors"))
    assert set(exported) == set(original) and not any("_orig_mod" in k for k in exported)
    reloaded = ModernBertForMaskedLM.from_pretrained(out / "model")
    assert reloaded.config.model_type == "modernbert"


def test_fine_tuning_checks_a_named_back_end_and_records_the_choice(tiny_model_dir, leaky_backend):
    """The same choice serves fine-tuning: a back-end whose task loss differs from sdpa's falls back."""
    from clmdetour.finetune.data import PaddingCollator
    from clmdetour.finetune.model import load_classifier
    from clmdetour.runtime.attention import settle_attention
    from clmdetour.tasktypes import TASK_TYPES

    hf = load_classifier(tiny_model_dir, TASK_TYPES["multiclass"], ["a", "b", "c"], attn_implementation="sdpa")
    with torch.no_grad():  # make attention matter (random init barely uses it), as above
        for layer in hf.model.layers:
            layer.attn.Wo.weight.mul_(30)
            layer.attn.Wqkv.weight.mul_(3)
    torch.manual_seed(0)
    examples = [{"input_ids": torch.randint(5, 500, (40,)).tolist(), "labels": i % 3} for i in range(4)]
    examples[1]["input_ids"] = examples[1]["input_ids"][:25]  # padding: a back-end ignoring the mask differs
    collator = PaddingCollator(0, TASK_TYPES["multiclass"])
    ok = settle_attention(hf, "eager", "eager", examples, collator, False, "fp32", finetuning=True)
    assert ok.implementation == "eager" and "as configured" in ok.reason
    bad = settle_attention(hf, "eager", leaky_backend, examples, collator, False, "fp32", finetuning=True)
    assert bad.implementation == "sdpa" and "falling back to sdpa" in bad.reason
    assert hf.config._attn_implementation == "sdpa"


def test_auto_follows_the_registry_preference_order(monkeypatch):
    from clmdetour.modeling import attention as A

    assert A.candidate_implementation("auto", True, FA)[0] == A.AUTO_PREFERENCE[0] == "flash_attention_2"
    monkeypatch.setattr(A, "AUTO_PREFERENCE", ("flex_attention", "flash_attention_2", "sdpa"))
    assert A.candidate_implementation("auto", True, FA) == ("flex_attention", "auto on CUDA is flex_attention")
    assert A.candidate_implementation("auto", False, FA) == ("sdpa", "auto on CPU is sdpa")


def test_finetuning_auto_leaves_flexattention_out_and_says_why():
    from clmdetour.modeling import attention as A

    # pretraining's auto on CUDA without flash-attn is FlexAttention; fine-tuning's is sdpa, with the reason
    assert A.choose_attn_implementation("auto", True, NONE, None).implementation == "flex_attention"
    ft = A.choose_attn_implementation("auto", True, NONE, None, finetuning=True)
    assert ft.implementation == "sdpa" and "not FlexAttention" in ft.reason and "reference path" in ft.reason
    # flash-attn, when it imports, is kept for fine-tuning (no mask tensor, no recompilation)
    assert A.choose_attn_implementation("auto", True, FA, None, finetuning=True).implementation == "flash_attention_2"
    # named back-ends and the CPU are unchanged
    assert A.choose_attn_implementation("flex_attention", True, NONE, None, finetuning=True).implementation == "flex_attention"
    assert A.choose_attn_implementation("auto", False, NONE, None, finetuning=True).reason == "auto on CPU is sdpa"
    assert "flex_attention" not in A.FINETUNE_AUTO_PREFERENCE and A.FINETUNE_AUTO_PREFERENCE[-1] == A.REFERENCE


# ---------------------------------------------------------------- what a back-end declares, and who reads it


def test_a_back_end_from_its_own_package_is_one_registry_entry(monkeypatch):
    """A kernel from a package of its own, added to the registry alone: ``auto`` prefers it when its package
    imports, names the package when it does not, and a named request without the package is refused."""
    from clmdetour.modeling import attention as A

    kernel = A.AttentionBackend("fast_kernel", needs_gpu=True, package="fast_kernel_pkg", takes_mask=False)
    monkeypatch.setitem(A.BACKENDS, kernel.name, kernel)
    monkeypatch.setattr(A, "AUTO_PREFERENCE", (kernel.name, *A.AUTO_PREFERENCE))
    assert A.candidate_implementation("auto", True, {"fast_kernel_pkg"}) == ("fast_kernel", "auto on CUDA: fast-kernel-pkg imports")
    assert A.candidate_implementation("auto", True, FA) == (
        "flash_attention_2", "auto on CUDA: fast-kernel-pkg does not import, so flash_attention_2")
    assert A.candidate_implementation("auto", True, NONE) == (
        "flex_attention", "auto on CUDA: fast-kernel-pkg, flash-attn does not import, so FlexAttention")
    assert A.candidate_implementation("auto", False, {"fast_kernel_pkg"}) == ("sdpa", "auto on CPU is sdpa")
    with pytest.raises(RuntimeError, match="needs the fast_kernel_pkg package, which does not import here"):
        A.candidate_implementation("fast_kernel", True, FA)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU and the fast-kernel-pkg package"):
        A.candidate_implementation("fast_kernel", False, {"fast_kernel_pkg"})
    assert not A.takes_mask("fast_kernel")


def test_importable_packages_asks_each_registry_package(monkeypatch):
    from clmdetour.modeling import attention as A

    monkeypatch.setitem(A.BACKENDS, "a", A.AttentionBackend("a", needs_gpu=True, package="json"))
    monkeypatch.setitem(A.BACKENDS, "b", A.AttentionBackend("b", needs_gpu=True, package="no_such_module_xyz"))
    found = A.importable_packages()
    assert "json" in found and "no_such_module_xyz" not in found


def test_the_mask_declaration_decides_the_document_mask_refusal(tiny_model_dir, monkeypatch):
    """flash_attention_2 is refused by its ``takes_mask``, with its name in the message; another back-end
    that declares no mask tensor is refused the same way; one outside the registry is not asked."""
    from clmdetour.modeling import attention as A
    from clmdetour.modeling.causal import DocumentMaskError

    assert [n for n, b in A.BACKENDS.items() if not b.takes_mask] == ["flash_attention_2"]
    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa", dtype=torch.float32)
    ids = torch.randint(5, 50, (1, 16))
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(DocumentMaskError, match=r"^pretraining.document_mask: flash_attention_2 takes no mask tensor "
                                                r"and this pipeline does not pass it varlen document lengths"):
        forward_encoder(model, ids, causal=True, document_sep_id=3)
    monkeypatch.setitem(A.BACKENDS, "eager", A.AttentionBackend("eager", takes_mask=False))
    model.config._attn_implementation = "eager"
    with pytest.raises(DocumentMaskError, match="eager takes no mask tensor"):
        forward_encoder(model, ids, causal=False, document_sep_id=3)
    assert A.takes_mask("some_transformers_default")


def back_end_name_comparisons(roots, registry=BACKENDS) -> list[str]:
    """``path:line`` of every comparison (``==``, ``!=``, ``in``, ``not in``) with a back-end name literal
    (or a tuple, list or set of them) in the Python files under ``roots``, the registry module excepted."""
    import ast

    names = set(registry)

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(named(e) for e in node.elts)

    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.as_posix().endswith("clmdetour/modeling/attention.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare) and any(named(n) for n in (node.left, *node.comparators)):
                    found.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno}")
    return found


def test_no_back_end_name_is_compared_outside_the_registry():
    roots = [REPO / "src", REPO / "benchmarks", REPO / "workflow" / "scripts"]
    assert back_end_name_comparisons(roots) == [], "ask clmdetour.modeling.attention's registry instead"


def test_the_name_comparison_search_can_fail(tmp_path):
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "m.py").write_text('x = "sdpa"\nif x == "flash_attention_2":\n    pass\nok = x in ("a", "eager")\n')
    assert back_end_name_comparisons([root]) == ["pkg/m.py:2", "pkg/m.py:4"]


def test_a_phase_settles_its_back_end_through_the_shared_rule_and_logs_it(tiny_model_dir, leaky_backend, caplog):
    """Pretraining's step (training.attention_check) runs runtime.attention.settle_attention with the phase's
    CLM loss and causality probe: a correct kernel is kept (INFO line), a leaking one falls back (WARNING)."""
    from types import SimpleNamespace

    from clmdetour.training.attention_check import settle_phase_attention

    model = ModernBertForMaskedLM.from_pretrained(tiny_model_dir, attn_implementation="eager", dtype=torch.float32)
    torch.manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (3, 32))
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = ids[:, 1:]
    stream = [{"input_ids": i, "attention_mask": torch.ones_like(i), "labels": lab} for i, lab in zip(ids, labels)]

    def collate(rows):
        return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}

    section = SimpleNamespace(objective="clm", attn_implementation="eager", precision="fp32", loss_chunk_tokens=64)
    with caplog.at_level("INFO", logger="clmdetour.training.attention_check"):
        kept = settle_phase_attention(model, section, "eager", stream, collate, False, None)
        fell = settle_phase_attention(model, section, leaky_backend, stream, collate, False, None)
    assert (kept.implementation, kept.fell_back) == ("eager", False)
    assert (fell.implementation, fell.fell_back) == ("sdpa", True) and "leaks" in fell.reason
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "attention: eager (eager as configured)"), ("WARNING", f"attention: sdpa ({fell.reason})")]
    assert model.config._attn_implementation == "sdpa"
