"""Copies libeep.so into the package when the repository has built it (make), so that an
installed elasticep finds its library without ELASTICEP_LIBRARY.  Everything else is in
pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        here = os.path.dirname(os.path.abspath(__file__))
        lib = os.environ.get("ELASTICEP_LIBRARY") or os.path.join(here, "..", os.environ.get(
            "BUILD", "build"), "lib", "libeep.so")
        native = os.path.join(here, "elasticep", "_native")
        if os.path.exists(lib):
            os.makedirs(native, exist_ok=True)
            shutil.copy2(lib, os.path.join(native, "libeep.so"))
        super().run()


setup(cmdclass={"build_py": BuildPy})
