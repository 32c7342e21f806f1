"""The architecture rules (tests/architecture.py) hold for quotaplane, and each rule catches what it names in a
small bad tree: a rule that could not fail would prove nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.architecture import MAX_LINES, violations

ROOT = Path(__file__).resolve().parents[1]


def test_quotaplane_keeps_its_architecture() -> None:
    assert violations(ROOT) == []


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


CLEAN = {
    "pkg/__init__.py": "",
    "pkg/quota/__init__.py": "from ._client import Manager\n",
    "pkg/quota/_client.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.services import x\n",
    "pkg/services/__init__.py": "from pkg.quota import Manager\nimport grpc\nimport ray\n",
    "pkg/services/_wire.py": "",
    "pkg/services/frontend/__init__.py": "from .. import _wire\nfrom pkg.services._wire import y\n",
    "pkg/exporters/__init__.py": "import grpc\nchannel = grpc.insecure_channel('x')\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert violations(write_tree(tmp_path, CLEAN), "pkg") == []


def test_private_module_of_another_package(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, CLEAN | {"pkg/services/cli.py": "from pkg.quota._client import Manager\n"})
    assert violations(tree, "pkg") == ["pkg/services/cli.py:1: imports private module pkg.quota._client"]


def test_private_module_through_a_relative_import(tmp_path: Path) -> None:
    tree = write_tree(tmp_path, CLEAN | {"pkg/config/__init__.py": "from ..quota import _client\n"})
    assert violations(tree, "pkg") == ["pkg/config/__init__.py:1: imports private module pkg.quota._client"]


def test_private_name_of_another_package(tmp_path: Path) -> None:
    files = CLEAN | {"pkg/quota/api.py": "_helper = 1\n", "pkg/config.py": "from pkg.quota.api import _helper\n"}
    assert violations(write_tree(tmp_path, files), "pkg") == [
        "pkg/config.py:1: imports private name _helper from pkg.quota.api"
    ]


def test_runtime_import_cycle_even_inside_a_function(tmp_path: Path) -> None:
    files = CLEAN | {
        "pkg/services/gateway.py": "def serve():\n    from .telemetry import add\n",
        "pkg/services/telemetry.py": "from pkg.services.gateway import serve\n",
    }
    assert violations(write_tree(tmp_path, files), "pkg") == [
        "import cycle: pkg.services.gateway -> pkg.services.telemetry"
    ]


def test_core_imports_no_ray_grpc_or_spark(tmp_path: Path) -> None:
    files = CLEAN | {
        "pkg/quota/_ray.py": "import ray.util\n",
        "pkg/quota/_grpc.py": "def f():\n    from grpc import aio\n",
        "pkg/metrics.py": "from pyspark.sql import SparkSession\n",
    }
    assert sorted(violations(write_tree(tmp_path, files), "pkg")) == [
        "pkg/metrics.py:1: core module imports pyspark.sql",
        "pkg/quota/_grpc.py:2: core module imports grpc",
        "pkg/quota/_ray.py:1: core module imports ray.util",
    ]


def test_exporters_may_call_grpc_but_serve_nothing(tmp_path: Path) -> None:
    files = CLEAN | {"pkg/exporters/serve.py": "import grpc\nserver = grpc.server(None)\n"}
    assert violations(write_tree(tmp_path, files), "pkg") == [
        "pkg/exporters/serve.py:2: exporters module runs a gRPC server (grpc.server)"
    ]


def test_long_module(tmp_path: Path) -> None:
    files = CLEAN | {"pkg/quota/_long.py": "x = 1\n" * (MAX_LINES + 1)}
    assert violations(write_tree(tmp_path, files), "pkg") == [
        f"pkg/quota/_long.py: {MAX_LINES + 1} lines (at most 800)"
    ]
