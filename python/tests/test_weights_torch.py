"""The torch demo (python/examples/weights_rl_torch.py) end to end: two
trainer processes, one inference process, fp8 + bf16, four versions;
trainer 1 SIGKILLs itself mid-push of version 3. Every version but 3
applies with every param bit-exact against the torch reference and equal
outputs; version 3 is rejected with version 2 serving whole; version 4
(pushed by a restarted trainer 1) applies."""
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transferengine.weights")
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "weights_rl_torch.py"


def test_versions_and_a_trainer_killed_mid_push(tmp_path):
    out = subprocess.run([sys.executable, str(EXAMPLE), "--versions", "4", "--kill-at", "3",
                          "--dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=280, env=dict(os.environ))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "infer: PASS" in text
    assert "train 1: SIGKILL mid-push of version 3" in text
    for v, what in ((1, "applied; serving version 1"), (2, "applied; serving version 2"),
                    (3, "rejected"), (4, "applied; serving version 4")):
        line = next(x for x in text.splitlines() if x.startswith(f"infer: version {v} "))
        assert what in line and "9 of 9 params bit-exact" in line, line
        assert "outputs equal: True" in line, line
    assert "serving version 2" in next(x for x in text.splitlines()
                                       if x.startswith("infer: version 3 "))
