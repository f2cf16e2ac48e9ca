"""The examples of python/examples run and say they succeeded; the first
example of docs/python.md is python/examples/writeimm_two_process.py, byte
for byte, and is correct with 1 and with 4 NICs (a write split in 4 shards
carries 4 immediates: the receiver must expect the count the sender
computed, not 1)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "examples"
DOC = ROOT / "docs" / "python.md"
FOUR_NICS = {"TE_LOOPBACK_DEVICES": "4", "TE_ENGINE_NICS_PER_GROUP": "4"}


def run_example(name, extra_env=None):
    env = dict(os.environ)
    env.update(extra_env or {})
    out = subprocess.run([sys.executable, str(EXAMPLES / name)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("name,expect", [
    ("writeimm_two_process.py", "receiver: imm 7 counted 1 time(s)"),
    ("kv_paged_push.py", "pages verified"),
])
def test_example(name, expect):
    assert expect in run_example(name)


def test_writeimm_example_four_nics():
    """The documented example with loopback.devices = 4 and
    engine.nics_per_group = 4: 4 shards, 4 immediates, all bytes in."""
    out = run_example("writeimm_two_process.py", FOUR_NICS)
    assert "sender: request" in out and "4 immediate(s)" in out, out
    assert "receiver: imm 7 counted 4 time(s), 1048576 bytes in" in out, out


def doc_block(marker):
    """The ```python block that follows `<!-- example: marker -->`."""
    text = DOC.read_text()
    m = re.search(r"<!-- example: " + re.escape(marker) +
                  r" -->\s*```python\n(.*?)```", text, re.S)
    assert m, f"docs/python.md has no block marked {marker}"
    return m.group(1)


def test_doc_example_is_the_tested_file():
    name = "python/examples/writeimm_two_process.py"
    assert doc_block(name) == (ROOT / name).read_text(), (
        f"docs/python.md's first example differs from {name}: copy the file "
        "into the doc (the test runs the file)")
