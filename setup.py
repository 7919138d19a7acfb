"""Installs the Python module dsengine (docs/python.md): `pip install --no-build-isolation .`

The module is built by the Makefile (`make python`, against the last stage, or STAGE=NN in the
environment) with Debian's compiler, pybind11 and setuptools; nothing is fetched at install time.
"""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithMake(build_py):
    """Runs `make python`, then installs its native module beside the Python files."""

    def run(self):
        stage = os.environ.get("STAGE")
        subprocess.check_call(["make", "-C", ROOT, "python"] + ([f"STAGE={stage}"] if stage else []))
        super().run()
        target = os.path.join(self.build_lib, "dsengine")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, "build", "python", "dsengine", "_core.so"), target)


class NativeDistribution(Distribution):
    """A wheel for this platform (it holds a compiled module), not a pure-Python one."""

    def has_ext_modules(self):
        return True


setup(
    name="dsengine",
    version="0.1.0",
    description="The staged DeepSeek CPU inference engine, with llama-cpp-python's interface",
    packages=["dsengine"],
    package_dir={"": "python"},
    package_data={"dsengine": ["*.pyi", "py.typed"]},
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithMake},
    distclass=NativeDistribution,
    zip_safe=False,
)
