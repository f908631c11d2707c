
"""Multi-node phases without a cluster: rendezvous from SLURM's environment, launcher command lines,
planning checks of the batch split, fractional freeze specs, the shared checkpoint folder, the Large overlay."""

from __future__ import annotations

import copy
import sys

import pytest
import torch
from helpers import REPO

from clmdetour.config import (
    ConfigError,
    deep_merge,
    fraction_layer_range,
    load_yaml,
    resolve_phase,
    training_loop_section,
    validate_config,
)
from clmdetour.training.launch import build_command
from clmdetour.training.multinode import (
    RendezvousError,
    expand_hostlist,
    master_port,
    slurm_rendezvous,
    srun_prefix,
)

NO_SCONTROL = "/nonexistent/scontrol"


def _paper(**cluster) -> dict:
    cfg = load_yaml(REPO / "config/config.yaml")
    cfg["cluster"].update(cluster)
    return cfg


def _large(hub_id=None) -> dict:
    cfg = deep_merge(load_yaml(REPO / "config/config.yaml"), load_yaml(REPO / "config/large.yaml"))
    if hub_id:
        cfg["base_model"]["hub_id"] = hub_id
    return cfg


# --- rendezvous and command lines ------------------------------------------------------------------


def test_master_port_comes_from_the_job_id():
    assert master_port("123456") == master_port(123456) == 20000 + 123456 % 20000
    assert master_port("1001") != master_port("1002")
    assert all(20000 <= master_port(j) < 40000 for j in (0, 1, 19999, 20000, 987654321))
    with pytest.raises(RendezvousError, match="SLURM_JOB_ID"):
        master_port("12_3")


def test_host_lists_expand_in_order_without_scontrol():
    assert expand_hostlist("gpu[08-10],cpu3", NO_SCONTROL) == ["gpu08", "gpu09", "gpu10", "cpu3"]
    assert expand_hostlist("n[1,3-4]", NO_SCONTROL) == ["n1", "n3", "n4"]
    assert expand_hostlist("solo", NO_SCONTROL) == ["solo"]


def _task_env(procid: int, **extra) -> dict:
    return {"SLURM_JOB_ID": "4242", "SLURM_PROCID": str(procid), "SLURM_NTASKS": "2",
            "SLURM_STEP_NODELIST": "gpu[01-02]", **extra}


def test_each_node_finds_its_rank_and_the_same_master():
    a, b = (slurm_rendezvous(2, _task_env(i), NO_SCONTROL) for i in (0, 1))
    assert (a.node_rank, b.node_rank) == (0, 1)
    assert a.master_addr == b.master_addr == "gpu01"
    assert a.master_port == b.master_port == master_port("4242")
    assert slurm_rendezvous(2, _task_env(1, MASTER_PORT="29999"), NO_SCONTROL).master_port == 29999


def test_rendezvous_refuses_a_step_that_is_not_one_task_per_node():
    with pytest.raises(RendezvousError, match="srun --nodes=2 --ntasks-per-node=1"):
        slurm_rendezvous(2, {}, NO_SCONTROL)
    with pytest.raises(RendezvousError, match="cluster.pretrain_nodes is 2 but the srun step has 8 tasks"):
        slurm_rendezvous(2, _task_env(0, SLURM_NTASKS="8"), NO_SCONTROL)


def test_two_node_launcher_lines_use_composers_multi_node_flags():
    target = ["-m", "clmdetour.training.cli", "--variant", "v"]
    lines = [build_command(4, 4, target, nodes=2, node_rank=r, master_addr="gpu01", master_port=24242)
             for r in (0, 1)]
    for r, cmd in enumerate(lines):
        assert cmd[:5] == [sys.executable, "-m", "composer.cli.launcher", "-n", "4"]
        flags = dict(zip(cmd[5:15:2], cmd[6:15:2]))
        assert flags == {"--world_size": "8", "--node_rank": str(r), "--base_rank": str(4 * r),
                         "--master_addr": "gpu01", "--master_port": "24242"}
        assert cmd[15:] == target


def test_cpu_processes_go_through_composers_launcher():
    target = ["-m", "m"]
    assert build_command(0, 0, target) == [sys.executable, "-m", "m"]  # today's single CPU process
    assert build_command(4, 0, target, cpu_processes=2) == [sys.executable, "-m", "composer.cli.launcher", "-n", "2",
                                                            "-m", "m"]
    assert build_command(0, 0, target, cpu_processes=2)[4] == "2"


def test_srun_prefix_starts_one_launcher_per_node():
    assert srun_prefix(1, 64) == ""
    words = srun_prefix(2, 64).split()
    assert words[0] == "srun" and {"--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                                   "--cpus-per-task=64", "--kill-on-bad-exit=1"} == set(words[1:])


# --- planning checks -------------------------------------------------------------------------------


def test_three_nodes_of_four_gpus_with_micro_batch_12_is_refused_naming_the_keys():
    cfg = _paper(pretrain_nodes=3)
    assert validate_config(copy.deepcopy(cfg))  # the paper's micro-batch is planned at run time (auto): no check
    cfg["pretraining"]["micro_batch_sequences"] = 12
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    msg = str(e.value)
    assert "pretraining.micro_batch_sequences (12)" in msg and "per-device batch 32" in msg
    assert "cluster.pretrain_nodes x cluster.pretrain_gpus = 3 x 4" in msg and "pretraining.global_batch_sequences" in msg


def test_global_batch_must_divide_by_nodes_times_gpus():
    with pytest.raises(ConfigError, match=r"pretraining.global_batch_sequences \(384\) is not divisible by "
                                          r"cluster.pretrain_nodes x cluster.pretrain_gpus = 5 x 1 = 5"):
        validate_config(_paper(pretrain_nodes=5, pretrain_gpus=1))
    cfg = _paper(pretrain_nodes=2)
    cfg["pretraining"]["variants"]["clm-detour"]["phase1"]["micro_batch_sequences"] = 7
    with pytest.raises(ConfigError, match=r"pretraining.variants.clm-detour.phase1.micro_batch_sequences \(7\)"):
        validate_config(cfg)
    assert validate_config(_paper(pretrain_nodes=2))["cluster"]["pretrain_nodes"] == 2  # 48 per device, 12 divides


def test_nested_command_line_numbers_are_read_as_numbers():
    # snakemake --config cluster='{pretrain_nodes: 2}' hands over the string '2'
    cfg = _paper()
    cfg["cluster"]["pretrain_nodes"] = "2"
    assert validate_config(cfg)["cluster"]["pretrain_nodes"] == 2
    cfg = _paper()
    cfg["cluster"]["pretrain_nodes"] = "two"
    with pytest.raises(ConfigError, match="cluster.pretrain_nodes"):
        validate_config(cfg)


# --- fractional freeze specs and the Large overlay -------------------------------------------------


def test_fraction_rounding_rule():
    assert [fraction_layer_range(f, 22) for f in ([0.0, 0.364], [0.364, 0.727])] == ["0-7", "8-15"]
    assert [fraction_layer_range(f, 28) for f in ([0.0, 0.364], [0.364, 0.727])] == ["0-9", "10-19"]
    assert fraction_layer_range([0.5, 1.0], 3) == "2-2"  # 1.5 rounds half up to 2
    with pytest.raises(ConfigError, match=r"where\.x: fraction \[0.5, 0.51\] of 22 layers rounds to no layer"):
        fraction_layer_range([0.5, 0.51], 22, "where.x")
    with pytest.raises(ConfigError, match="0 <= a < b <= 1"):
        fraction_layer_range([0.6, 0.2], 22)


def test_large_overlay_without_a_hub_id_stops_naming_base_model_hub_id():
    with pytest.raises(ConfigError, match=r"base_model\.hub_id is null"):
        validate_config(_large())


def test_large_overlay_resolves_freeze_fractions_to_absolute_layers():
    cfg = validate_config(_large("placeholder/large"))
    assert cfg["base_model"]["num_layers"] == 28 and cfg["cluster"]["pretrain_nodes"] == 2
    low, mid = (resolve_phase(cfg, v, "phase1") for v in ("clm-freeze-low", "clm-freeze-mid"))
    assert (low["freeze"], mid["freeze"]) == (["0-9"], ["10-19"])
    assert training_loop_section(low)["freeze"] == ["0-9"]  # the run hash carries the resolved indices
    base = validate_config(_paper())
    assert resolve_phase(base, "clm-freeze-low", "phase1")["freeze"] == ["0-7"]
    # a mixed list keeps its absolute items
    cfg = _large("placeholder/large")
    cfg["pretraining"]["variants"]["clm-freeze-low"]["phase1"]["freeze"] = ["embeddings", {"fraction": [0.0, 0.364]}]
    assert resolve_phase(validate_config(cfg), "clm-freeze-low", "phase1")["freeze"] == ["embeddings", "0-9"]


def test_large_freeze_on_a_tiny_28_layer_model(tmp_path, demo_texts):
    """Large's layer pattern (28 layers, global attention every 3rd layer), tiny width: the overlay's
    resolved 'low' spec freezes exactly layers 0-9, bit-identical after training, the rest moves."""
    from composer.optim import DecoupledAdamW
    from transformers import ModernBertForMaskedLM

    from clmdetour.demo.base import init_model_dir
    from clmdetour.modeling.causal import forward_encoder
    from clmdetour.modeling.freeze import apply_freeze, optimizer_param_groups
    from clmdetour.modeling.loss import chunked_lm_loss
    from clmdetour.training.collators import clm_labels

    build = {"vocab_size": 400, "hidden_size": 16, "intermediate_size": 32, "num_layers": 28, "num_attention_heads": 2,
                 "global_attn_every_n_layers": 3, "local_attention": 8, "max_position_embeddings": 64, "seed": 0}
    init_model_dir(build, demo_texts[:100], tmp_path / "m")
    model = ModernBertForMaskedLM.from_pretrained(tmp_path / "m", attn_implementation="sdpa")
    assert model.config.num_hidden_layers == 28
    spec = resolve_phase(validate_config(_large("placeholder/large")), "clm-freeze-low", "phase1")["freeze"]
    frozen = apply_freeze(model, spec, "pretraining.variants.clm-freeze-low.phase1.freeze")
    layers = {int(n.split(".")[2]) for n in frozen if n.startswith("model.layers.")}
    assert layers == set(range(10))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = DecoupledAdamW(optimizer_param_groups(model, 1e-2), lr=1e-2, weight_decay=1e-2)
    torch.manual_seed(0)
    for _ in range(2):
        ids = torch.randint(5, model.config.vocab_size, (2, 16))
        hidden = forward_encoder(model, ids, causal=True).last_hidden_state
        chunked_lm_loss(hidden, clm_labels(ids, torch.ones_like(ids), 2), lambda h: model.decoder(model.head(h)),
                        16).backward()
        opt.step()
        opt.zero_grad()
    after = dict(model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in frozen)
    assert not torch.equal(before["model.layers.27.mlp.Wo.weight"], after["model.layers.27.mlp.Wo.weight"])


# --- the shared checkpoint folder ------------------------------------------------------------------


def test_shared_folder_check_passes_alone_and_names_the_key_when_a_rank_cannot_read(tmp_path, monkeypatch):
    from composer.utils import dist

    from clmdetour.training import ranks

    ranks.check_shared_folder(tmp_path / "ck")  # one process: rank 0 writes and the check passes
    assert (tmp_path / "ck" / ranks.MARKER).exists()
    # A rank other than 0 that does not find rank 0's marker (node-local disk) fails, naming the key.
    monkeypatch.setattr(dist, "get_global_rank", lambda: 1)
    with pytest.raises(ranks.SharedFolderError, match=r"pretraining.checkpoint_root must be a folder that every "
                                                      r"node sees .* rank 1 on .*cannot read"):
        ranks.check_shared_folder(tmp_path / "elsewhere")


def test_composer_signal_files_get_the_node_rank_once(monkeypatch):
    """Composer broadcasts rank 0's signal-file name to every node; on a shared checkpoint folder the
    nodes then remove one file twice (FileNotFoundError at the start of a multi-node phase)."""
    from composer.utils import dist

    from clmdetour.training.ranks import per_node_signal_files

    monkeypatch.setattr(dist, "get_node_signal_file_name", lambda rng=None: "._signal_file_node0_AbC123")
    monkeypatch.setattr(dist, "get_node_rank", lambda: 1)
    per_node_signal_files()
    per_node_signal_files()  # idempotent: one suffix, however many phases run in the process
    assert dist.get_node_signal_file_name() == "._signal_file_node0_AbC123_node1"
