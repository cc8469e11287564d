"""Build of the ``reshard`` package (SPEC §4).

The protobuf modules are generated here, at build time, from the repository's
``proto/reshard/v1/planner.proto`` (and gRPC's ``health.proto`` when it is
installed) with ``protoc`` -- they are never committed. The Debian packages
``protobuf-compiler`` and ``libprotobuf-dev`` (for ``wrappers.proto``) and
``grpc-proto`` (for ``health.proto``) provide them.

There is deliberately no ``pyproject.toml``: pip then builds with the
setuptools already installed (Debian's ``python3-setuptools``) instead of
downloading one into an isolated environment, so ``pip install
clients/python`` works without access to PyPI.
"""

import os
import shutil
import subprocess

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.environ.get("RESHARD_PROTO_DIR",
                           os.path.join(HERE, "..", "..", "proto"))
HEALTH_DIRS = [os.environ.get("RESHARD_HEALTH_PROTO_DIR", ""),
               "/usr/share/grpc-proto", "/usr/local/share/grpc-proto"]


def _protoc():
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    if not protoc:
        raise RuntimeError("protoc is missing: install protobuf-compiler "
                           "(scripts/install-deps.sh) or set PROTOC")
    return protoc


def generate(out_dir):
    """Writes reshard/v1/planner_pb2.py(+.pyi) and, when grpc-proto is
    installed, reshard/_health/health_pb2.py under out_dir."""
    planner = os.path.join(PROTO_DIR, "reshard", "v1", "planner.proto")
    if not os.path.isfile(planner):
        raise RuntimeError("%s not found: build from a checkout of the "
                           "repository or set RESHARD_PROTO_DIR" % planner)
    protoc = _protoc()
    subprocess.check_call([protoc, "-I" + PROTO_DIR,
                           "--python_out=" + out_dir, "--pyi_out=" + out_dir,
                           "reshard/v1/planner.proto"])
    for inc in HEALTH_DIRS:
        health = os.path.join(inc, "grpc", "health", "v1", "health.proto")
        if inc and os.path.isfile(health):
            # Generated under reshard/_health/ and loaded from there by
            # reshard._health: a module path grpc.health... would collide
            # with grpcio's own "grpc" package.
            target = os.path.join(out_dir, "reshard", "_health")
            os.makedirs(target, exist_ok=True)
            subprocess.check_call([protoc, "-I" + inc,
                                   "--python_out=" + target,
                                   "grpc/health/v1/health.proto"])
            break


class GenerateProto(Command):
    description = "generate the protobuf modules into the source tree"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        generate(HERE)


class BuildPy(build_py):
    def run(self):
        # pip builds in the source tree and setuptools reuses build/lib:
        # start from an empty package so a module removed from the source
        # cannot linger in the wheel.
        shutil.rmtree(os.path.join(self.build_lib, "reshard"),
                      ignore_errors=True)
        super().run()
        generate(self.build_lib)


class Develop(develop):
    def run(self):
        generate(HERE)
        super().run()


setup(
    name="reshard",
    version="0.1.0",
    description="Python client for reshardd: bindings from tensors, plans "
                "as numpy columns, a reference executor",
    python_requires=">=3.9",
    packages=["reshard", "reshard.v1"],
    package_data={"reshard": ["py.typed"]},
    install_requires=["grpcio>=1.44", "protobuf>=4.21", "numpy>=1.21"],
    cmdclass={"build_py": BuildPy, "develop": Develop,
              "generate_proto": GenerateProto},
    zip_safe=False,
)
