# setuptools reads everything else from pyproject.toml; cffi_modules has no
# pyproject form, so the C core's build hook is declared here, and beside it
# the hand-written binding of the core's per-read call (csrc/pyfeed.c).
from setuptools import Extension, setup

setup(
    cffi_modules=["agent/stream/_build.py:ffibuilder"],
    ext_modules=[Extension(
        "agent.stream._feed", sources=["csrc/pyfeed.c"], include_dirs=["csrc"],
        py_limited_api=True,
        # the core's warnings (csrc/Makefile) as errors on every compiler that
        # builds it, the aarch64 cross build too; -Wpedantic is left out there
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wshadow",
                            "-Wconversion", "-Wno-sign-conversion"],
    )],
)
