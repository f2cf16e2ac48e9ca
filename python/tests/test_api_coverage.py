"""Every public function of te.h is reachable from Python: declared in the
cffi module, and used by the Pythonic layer (so it has a wrapper). A
function added to te.h without a binding fails here, by name."""
import os
import pathlib
import re

import transferengine as te

ROOT = pathlib.Path(os.environ.get("TE_SOURCE_DIR",
                                   pathlib.Path(__file__).resolve().parents[2]))


def te_api_functions():
    text = (ROOT / "include" / "te" / "te.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return sorted(set(re.findall(r"TE_API\s+[^;(]*?\b(te_\w+)\s*\(", text)))


def test_every_te_api_function_is_bound():
    names = te_api_functions()
    assert len(names) > 40
    missing_c = [n for n in names if not hasattr(te.lib, n)]
    assert not missing_c, f"not declared in the cffi module: {missing_c}"
    pkg = pathlib.Path(te.__file__).parent
    src = "".join(p.read_text() for p in pkg.glob("*.py")
                  if p.name != "_build.py")
    unwrapped = [n for n in names if not re.search(rf"\blib\.{n}\b", src)]
    assert not unwrapped, f"no Python wrapper calls: {unwrapped}"
