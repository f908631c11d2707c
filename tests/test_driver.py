"""Issue cluster-env item 1: the installed torch's CUDA build against the NVIDIA driver, checked at planning (GPU
profiles, where the machine has a driver) and at the start of every GPU job, one line naming both and the fix."""

from __future__ import annotations

import pytest

from clmdetour.runtime import driver


def test_versions_parse_from_torch_the_driver_api_and_nvidia_smi():
    assert driver.parse_cuda("13.0") == (13, 0) and driver.parse_cuda("12.8.1") == (12, 8)
    assert driver.parse_cuda(12080) == (12, 8) and driver.parse_cuda(13000) == (13, 0)
    assert driver.parse_cuda(None) is None and driver.parse_cuda("n/a") is None


def test_an_older_major_is_refused_naming_both_and_the_build_to_install():
    refusal, warning = driver.driver_problem((13, 0), (12, 4), "a pretraining job on 4 GPU(s)")
    assert warning is None
    assert refusal == ("a pretraining job on 4 GPU(s): the installed torch is the CUDA 13.0 build, which needs an "
                       "NVIDIA driver of the R580 series or newer, but this machine's driver supports CUDA 12.4; "
                       "reinstall with CLMDETOUR_TORCH_CUDA=cu128 bash scripts/setup.sh (docs/slurm.md, 'The driver "
                       "and the PyTorch build')")
    # an older minor of the same major runs (minor-version compatibility), with a warning
    refusal, warning = driver.driver_problem((12, 8), (12, 2), "x")
    assert refusal is None and "minor-version compatibility" in warning
    assert driver.driver_problem((12, 8), (13, 0), "x") == (None, None)
    assert driver.driver_problem(None, (12, 0), "x") == (None, None)  # a CPU build
    assert driver.driver_problem((13, 0), None, "x") == (None, None)  # no driver (a login node)
    assert "ask for a newer NVIDIA driver" in driver.driver_problem((13, 0), (11, 8), "x")[0]


def test_the_job_check_raises_one_line(monkeypatch):
    monkeypatch.setattr(driver, "driver_cuda_version", lambda: ((12, 4), "libcuda"))
    monkeypatch.setattr(driver, "torch_cuda_version", lambda: (13, 0))
    with pytest.raises(driver.DriverError) as e:
        driver.check_driver("fine-tuning m on t on 1 GPU(s)")
    assert "\n" not in str(e.value) and str(e.value).startswith("fine-tuning m on t on 1 GPU(s): the installed torch")
    monkeypatch.setattr(driver, "driver_cuda_version", lambda: (None, "no NVIDIA driver found"))
    assert driver.check_driver_at_planning() is None  # a login node without a driver: nothing to check


def test_the_launcher_stops_before_falling_back_to_the_cpu(monkeypatch, capsys):
    """Before, a driver too old for the build showed no CUDA device, and the phase ran on one CPU process."""
    from clmdetour.training import launch

    monkeypatch.setattr(driver, "driver_cuda_version", lambda: ((12, 4), "nvidia-smi"))
    monkeypatch.setattr(driver, "torch_cuda_version", lambda: (13, 0))
    with pytest.raises(SystemExit) as e:
        launch.main(["--gpus", "4", "--", "-m", "clmdetour.training.cli"])
    assert str(e.value.code).startswith("error: a pretraining job on 4 GPU(s): the installed torch is the CUDA 13.0")


def test_this_machine_reads_no_driver_and_a_cuda_13_build():
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a machine with an NVIDIA driver")
    assert driver.driver_cuda_version()[0] is None  # no NVIDIA driver here (CI, this CPU machine)
    assert driver.torch_cuda_version() in ((13, 0), None)
