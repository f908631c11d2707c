"""The NVIDIA driver against the installed PyTorch build, checked before any GPU work (docs/slurm.md, "The driver
and the PyTorch build").

A PyTorch wheel is built for one CUDA version (``torch.version.cuda``: ``13.0`` for PyPI's x86_64 torch 2.14.1).
The driver must support it: a driver supports every CUDA version up to the one it reports (``nvidia-smi``'s
"CUDA Version", the CUDA driver API's ``cuDriverGetVersion``), and, since CUDA 11, later minor versions of the
same major one through minor-version compatibility (NVIDIA's CUDA Compatibility guide; kernels JIT-compiled from
PTX excepted). So: a driver whose CUDA major version is below the build's cannot run it (refused); the same major
version with a lower minor runs it, with a warning. Nothing here initialises CUDA in PyTorch (a forked data loader
would then fail): the driver's version is read through ``libcuda`` (ctypes), else ``nvidia-smi``.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess

from clmdetour.errors import ExpectedError

#: CUDA major version -> the oldest driver series that supports it (NVIDIA CUDA Toolkit release notes, table 3).
MIN_DRIVER = {11: "R450", 12: "R525", 13: "R580"}
#: The PyTorch build to install for a driver's CUDA major version (CLMDETOUR_TORCH_CUDA of scripts/setup.sh).
BUILD_FOR_MAJOR = {12: "cu128", 13: "cu130"}


#: Environment variables that say a process runs in a container image: Apptainer and Singularity set the first two
#: in every container; the project's Containerfile sets the last (``ENV CLMDETOUR_IMAGE=1``).
IMAGE_MARKERS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER", "CLMDETOUR_IMAGE")


def in_image(environ: dict | None = None) -> bool:
    """Whether this process runs inside a container image (one of :data:`IMAGE_MARKERS` is set), where the fix
    for a wrong PyTorch build is a rebuilt image, not ``scripts/setup.sh``."""
    env = os.environ if environ is None else environ
    return any(env.get(k) for k in IMAGE_MARKERS)


def reinstall_advice(build: str, image: bool) -> str:
    """How to get the PyTorch build ``build`` (``cu128``, ...): rebuild the image with the Containerfile's
    ``TORCH_CUDA`` build argument inside an image, else rerun ``scripts/setup.sh`` with ``CLMDETOUR_TORCH_CUDA``."""
    if image:
        return (f"rebuild the image with --build-arg TORCH_CUDA={build} (Containerfile; docs/slurm.md, "
                "'A container image')")
    return f"reinstall with CLMDETOUR_TORCH_CUDA={build} bash scripts/setup.sh"


class DriverError(ExpectedError, RuntimeError):
    """The NVIDIA driver cannot run the installed PyTorch build; the message names both and the fix."""


def parse_cuda(version: str | int | None) -> tuple[int, int] | None:
    """``"12.8"`` / ``12080`` (the driver API's ``1000 * major + 10 * minor``) -> ``(12, 8)``; None when unknown."""
    if version is None:
        return None
    if isinstance(version, int):
        return version // 1000, (version % 1000) // 10
    m = re.match(r"^\s*(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def driver_cuda_version() -> tuple[tuple[int, int] | None, str]:
    """The CUDA version the installed driver supports, and how it was read: ``((13, 0), "libcuda")``;
    ``(None, why)`` on a machine without a driver (a login node)."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        out = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(out)) == 0 and out.value:
            return parse_cuda(out.value), f"{name} cuDriverGetVersion"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            text = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        m = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
        if m:
            return parse_cuda(m.group(1)), "nvidia-smi"
    return None, "no NVIDIA driver found (no libcuda, no nvidia-smi)"


def torch_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the installed torch was built for (``torch.version.cuda``); None for a CPU build."""
    import torch

    return parse_cuda(torch.version.cuda)


def driver_problem(torch_cuda: tuple[int, int] | None, driver_cuda: tuple[int, int] | None,
                   where: str, image: bool = False) -> tuple[str | None, str | None]:
    """``(refusal, warning)`` for a torch build and a driver (each None when there is nothing to say).

    Args:
        torch_cuda: the build's CUDA version (None: a CPU build); driver_cuda: the driver's (None: no driver).
        where: what is about to run (named in the line).
        image: the torch is a container image's (:func:`in_image`): the fix is a rebuilt image.
    """
    if torch_cuda is None or driver_cuda is None:
        return None, None
    t, d = f"{torch_cuda[0]}.{torch_cuda[1]}", f"{driver_cuda[0]}.{driver_cuda[1]}"
    if driver_cuda[0] < torch_cuda[0]:
        build = BUILD_FOR_MAJOR.get(driver_cuda[0])
        fix = reinstall_advice(build, image) if build else "ask for a newer NVIDIA driver"
        return (f"{where}: the installed torch is the CUDA {t} build, which needs an NVIDIA driver of the "
                f"{MIN_DRIVER.get(torch_cuda[0], 'matching')} series or newer, but this machine's driver supports CUDA "
                f"{d}; {fix} (docs/slurm.md, 'The driver and the PyTorch build')"), None
    if driver_cuda < torch_cuda:
        return None, (f"{where}: torch's CUDA {t} build on a driver supporting CUDA {d}: runs through CUDA's "
                      "minor-version compatibility (kernels compiled from PTX at run time excepted)")
    return None, None


def check_driver(where: str) -> str | None:
    """Refuse GPU work the driver cannot run (:func:`driver_problem`); returns the warning, if any.

    Raises:
        DriverError: one line naming the build, the driver and the fix.
    """
    driver, _ = driver_cuda_version()
    refusal, warning = driver_problem(torch_cuda_version(), driver, where, image=in_image())
    if refusal:
        raise DriverError(refusal)
    return warning


def check_driver_at_planning() -> str | None:
    """The planning machine's check (GPU profiles, main process only, no container set: the jobs' torch is then
    this venv's): nothing without a driver (login nodes often have none; torch is then not even imported), else
    :func:`check_driver`. Every GPU job checks again where it runs (the pretraining launcher, ``run_task``).

    Raises:
        DriverError: as :func:`check_driver`.
    """
    driver, _ = driver_cuda_version()
    if driver is None:
        return None
    refusal, warning = driver_problem(torch_cuda_version(), driver, "planning (this machine's driver)")
    if refusal:
        raise DriverError(refusal)
    return warning


def container_driver_note(image: str) -> str:
    """The planning process's line when a container image is set: the driver check is left to each GPU job, run
    in the image (this process's torch is not the jobs')."""
    return (f"driver check: left to each GPU job inside the image {image} (config key `container`): the torch "
            "of this planning process is not the jobs'")


#: The CUDA version (``torch.version.cuda``) of each PyTorch build scripts/setup.sh installs (None: the CPU build);
#: the build names are the PyTorch index's folders (https://download.pytorch.org/whl/<build>).
BUILD_CUDA = {"cu126": "12.6", "cu128": "12.8", "cu130": "13.0", "cpu": None}


def build_mismatch(requested: str, torch_version: str, cuda: str | None, index: str) -> str | None:
    """The one line scripts/setup.sh stops with when the installed torch is not the build it was asked for.

    Args:
        requested: ``CLMDETOUR_TORCH_CUDA`` (a key of :data:`BUILD_CUDA`, or ``""`` for PyPI's build, which any
            CUDA version satisfies).
        torch_version: ``torch.__version__`` as installed (``2.14.1+cu130``).
        cuda: ``torch.version.cuda`` as installed (None for a CPU build).
        index: the index the build was asked from (named in the line).

    Returns:
        None when they agree, else the line (naming both builds and the index).

    Raises:
        KeyError: an unknown ``requested`` build (setup.sh refuses those before installing).
    """
    if not requested:
        return None
    want = BUILD_CUDA[requested]
    if cuda == want:
        return None
    got = "a CPU build" if cuda is None else f"the CUDA {cuda} build"
    return (f"setup.sh: CLMDETOUR_TORCH_CUDA={requested} asked for {'a CPU build' if want is None else 'the CUDA ' + want + ' build'} "
            f"from {index}, but pip installed torch {torch_version}, {got} (another index or a local file answered); "
            f"nothing recorded: make {index} reachable (or set CLMDETOUR_TORCH_INDEX to a mirror) and run setup.sh again")


def main(argv: list[str] | None = None) -> None:
    """``python -m clmdetour.runtime.driver verify-build BUILD INDEX``: exit 1 with :func:`build_mismatch`'s line
    when the installed torch is not the build ``BUILD`` (``""``: PyPI's, anything goes); scripts/setup.sh's check."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m clmdetour.runtime.driver")
    sub = parser.add_subparsers(dest="command", required=True)
    verify = sub.add_parser("verify-build", help="the installed torch against CLMDETOUR_TORCH_CUDA")
    verify.add_argument("build", choices=["", *BUILD_CUDA])
    verify.add_argument("index")
    args = parser.parse_args(argv)
    import torch

    problem = build_mismatch(args.build, torch.__version__, torch.version.cuda, args.index)
    if problem:
        sys.exit(problem)


if __name__ == "__main__":
    main()
