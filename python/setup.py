"""setuptools needs the cffi_modules keyword here (pyproject.toml has the
rest). te.h and libtransferengine are found through TE_INCLUDE_DIR /
TE_LIBRARY_DIR, pkg-config transferengine, or the source tree's build/
(transferengine/_build.py, docs/python.md)."""
from setuptools import setup

setup(cffi_modules=["transferengine/_build.py:ffibuilder"])
