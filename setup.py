# setuptools reads everything else from pyproject.toml; cffi_modules has no
# pyproject form, so the C core's build hook is declared here.
from setuptools import setup

setup(cffi_modules=["agent/stream/_build.py:ffibuilder"])
