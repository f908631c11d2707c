import subprocess
import sys

from helpers import REPO

SCRIPT = """
import io, sys
from clmdetour.config import ConfigError
from clmdetour.errors import install_excepthook
install_excepthook()
swapped = io.StringIO(); sys.stderr = swapped; swapped.close()   # as a library may leave it
raise ConfigError("config.yaml: tasks.emea.max_length must be positive")
"""


def test_expected_error_is_one_line_first_even_with_stderr_swapped():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == "error: config.yaml: tasks.emea.max_length must be positive"
    # the traceback stays, for developers, but the message is printed once (show-failed-logs shows this log)
    assert r.stderr.count("tasks.emea.max_length must be positive") == 1
    assert r.stderr.splitlines()[1] == "Traceback (most recent call last):"
    assert r.stderr.rstrip().splitlines()[-1] == "clmdetour.config.ConfigError: (the error above)"


def test_unexpected_error_keeps_the_python_traceback():
    script = SCRIPT.replace('ConfigError("config.yaml', 'KeyError("config.yaml')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("Traceback") and "KeyError" in r.stderr.splitlines()[-1]


DISTRIBUTED = """
import socket, sys, torch.distributed as dist
from clmdetour.errors import InputError, install_excepthook
install_excepthook()                      # as training/cli.py does, before the process group exists
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)  # wraps the hook
raise InputError("config.yaml: pretraining.micro_batch_sequences must divide 8")
"""


def test_a_rank_that_dies_after_the_process_group_exists_still_prints_its_error():
    # torch.distributed's hook buffers sys.stderr around ours and writes the buffer when ours returns:
    # a sys.exit inside ours used to lose every dying rank's message (the 2-node SLURM job printed nothing).
    r = subprocess.run([sys.executable, "-c", DISTRIBUTED], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert r.returncode == 1
    assert "[rank0]: error: config.yaml: pretraining.micro_batch_sequences must divide 8" in r.stderr, r.stderr


def test_expected_errors_are_a_class_hierarchy_not_names():
    # every project error class derives from ExpectedError and keeps its built-in base for callers
    from clmdetour.config import ConfigError
    from clmdetour.corpus.steps import DecontaminationError
    from clmdetour.errors import ExpectedError, InputError
    from clmdetour.release import ReleaseError
    from clmdetour.tasks.brat import BratError
    from clmdetour.tasks.fetch import FetchError

    for cls, base in ((ConfigError, ValueError), (DecontaminationError, ValueError), (InputError, ValueError),
                      (BratError, ValueError), (FetchError, RuntimeError), (ReleaseError, RuntimeError)):
        assert issubclass(cls, ExpectedError) and issubclass(cls, base), cls
    # a plain ValueError is a programming error now: its traceback comes first
    script = SCRIPT.replace('ConfigError("config.yaml', 'ValueError("config.yaml')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert r.returncode == 1 and r.stderr.startswith("Traceback"), r.stderr[:300]
