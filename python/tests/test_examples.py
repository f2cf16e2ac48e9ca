"""The examples of python/examples run and say they succeeded."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name,expect", [
    ("writeimm_two_process.py", "receiver: imm 7 counted"),
    ("kv_paged_push.py", "pages verified"),
])
def test_example(name, expect):
    out = subprocess.run([sys.executable, str(EXAMPLES / name)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
