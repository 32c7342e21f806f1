"""Generates the protobuf and gRPC modules from ``protos/`` at build time (wheel and editable installs).

The ``.proto`` files are the source; the generated ``*_pb2.py`` are build output (never checked in, as
protoc's own header asks), written into the package their import path names: ``protos/quotaplane/v1/x.proto``
becomes ``quotaplane/v1/x_pb2.py`` (the ``quotaplane.v1`` package), so folders are import names.
``grpcio-tools`` is pinned in ``[build-system]`` so the generated code's protobuf version always matches the
runtime range in ``[project.dependencies]``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO_ROOT = ROOT / "protos"


def generate_protos() -> None:
    from grpc_tools import protoc  # a build requirement

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    if not protos:
        return
    include = Path(protoc.__file__).resolve().parent / "_proto"  # google/protobuf/*.proto
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={ROOT}",
        f"--pyi_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(protos)}")


class BuildPyWithProtos(build_py):
    def run(self) -> None:
        generate_protos()
        super().run()


setup(cmdclass={"build_py": BuildPyWithProtos})
