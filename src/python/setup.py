"""The version and the wheel's tag, which pyproject.toml cannot compute.

The version is the CMake project's (read from ../../CMakeLists.txt in the source tree, or from
uvmpool/_native/VERSION, which scripts/wheel.sh writes beside the bundled binaries). A wheel that
bundles binaries is tagged for this platform (py3-none-linux_x86_64): its code is pure Python, its
libraries are not.
"""
import os
import re

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(HERE, "uvmpool", "_native")


def version():
    stamped = os.path.join(NATIVE, "VERSION")
    if os.path.exists(stamped):
        with open(stamped) as f:
            return f.read().strip()
    with open(os.path.join(HERE, "..", "..", "CMakeLists.txt")) as f:
        return re.search(r"project\(uvmpool VERSION ([0-9.]+)", f.read()).group(1)


commands = {}
if os.path.isdir(NATIVE):
    from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return "py3", "none", super().get_tag()[2]

    commands["bdist_wheel"] = PlatformWheel

setup(version=version(), cmdclass=commands)
