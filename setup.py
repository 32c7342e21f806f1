"""Generates the protobuf and gRPC modules from ``protos/`` at build time (wheel and editable installs).

The ``.proto`` files are the source; the generated ``*_pb2.py`` are build output (never checked in, as
protoc's own header asks), written into the package their import path names: ``protos/quotaplane/v1/x.proto``
becomes ``quotaplane/v1/x_pb2.py`` (the ``quotaplane.v1`` package), so folders are import names.
``grpcio-tools`` is pinned in ``[build-system]`` so the generated code's protobuf version always matches the
runtime range in ``[project.dependencies]``.

It also compiles the client quota managers' batch hot path (``quotaplane/quota/_record_compiled.pyx``) with
Cython. The pure-Python path stays the reference and the fallback: where no C compiler is found the package
installs without the extension (with a warning) and ``quotaplane.quota.compiled_core()`` returns False. The same
holds for the Spark telemetry job's point decoder (``quotaplane/spark/_points_compiled.pyx``;
``quotaplane.spark.compiled_decoder()``), a gateway's checks of a columnar usage batch
(``quotaplane/services/gateway/_usage_compiled.pyx``) and a shard's unpacking of one
(``quotaplane/actors/_unpack_compiled.pyx``).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
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


class OptionalBuildExt(build_ext):
    """Compiled extensions are an optimisation: a machine without a C compiler gets the pure-Python path."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self.warn(f"quotaplane: compiled core not built ({exc}); the pure-Python path will be used")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.warn(f"quotaplane: {ext.name} not built ({exc}); the pure-Python path will be used")


def compiled_extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize  # a build requirement (and a dev extra, for builds without isolation)
    except ImportError:
        print("quotaplane: Cython not installed; the compiled core is not built, the pure-Python path will be used")
        return []
    return cythonize(
        [
            Extension("quotaplane.quota._record_compiled", ["quotaplane/quota/_record_compiled.pyx"]),
            Extension("quotaplane.spark._points_compiled", ["quotaplane/spark/_points_compiled.pyx"]),
            Extension("quotaplane.actors._unpack_compiled", ["quotaplane/actors/_unpack_compiled.pyx"]),
            Extension(
                "quotaplane.services.gateway._usage_compiled", ["quotaplane/services/gateway/_usage_compiled.pyx"]
            ),
            Extension("quotaplane.telemetry._zstd_compiled", ["quotaplane/telemetry/_zstd_compiled.pyx"]),
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


setup(
    cmdclass={"build_py": BuildPyWithProtos, "build_ext": OptionalBuildExt},
    ext_modules=compiled_extensions(),
)
