"""Only for the optional compiled search loop; everything else is in pyproject.toml.

The extension is ``optional``: without a C compiler or Python headers the
install still succeeds and the checker runs its pure-Python loop.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("checker._wgl", ["checker/_wgl.c"], optional=True,
                             extra_compile_args=["-O2"])])
