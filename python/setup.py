"""Copies libeep.so (and libeep_agent.so, when built) into the package when the repository has
built it (make), so that an installed elasticep finds its library without ELASTICEP_LIBRARY.  Everything else is in
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
            # the control plane's agent (elasticep.Membership), where it was built beside it
            agent = os.path.join(os.path.dirname(lib), "libeep_agent.so")
            if os.path.exists(agent):
                shutil.copy2(agent, os.path.join(native, "libeep_agent.so"))
        super().run()


setup(cmdclass={"build_py": BuildPy})
