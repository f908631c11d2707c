import subprocess
import sys

from conftest import REPO

SCRIPT = """
import io, sys
from clmdetour.errors import install_excepthook
install_excepthook()
swapped = io.StringIO(); sys.stderr = swapped; swapped.close()   # as a library may leave it
raise ValueError("config.yaml: tasks.emea.max_length must be positive")
"""


def test_expected_error_is_one_line_first_even_with_stderr_swapped():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == "error: config.yaml: tasks.emea.max_length must be positive"


def test_unexpected_error_keeps_the_python_traceback():
    script = SCRIPT.replace('ValueError("config.yaml', 'KeyError("config.yaml')
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith("Traceback") and "KeyError" in r.stderr.splitlines()[-1]
