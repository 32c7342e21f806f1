"""The Dockerfile, checked without a Docker engine (none runs where the tests run).

What can be checked for real is checked for real: the files the image COPYs, filtered by ``.dockerignore``
the way the build context is, are enough to build the project's wheel (setup.py generates the gRPC stubs
then), and that wheel has the ``quotaplane`` entry point the image runs. The rest is what the chart and the
image must agree on: the non-root uid, the Python and Java the jobs need, the ports.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "quotaplane"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore match (the patterns this project uses: names, globs, ``**/`` prefixes)."""
    parts = relative.split("/")
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        if pattern.startswith("**/"):
            if any(fnmatch.fnmatch(part, bare) for part in parts):
                return True
        elif fnmatch.fnmatch(relative, pattern) or any(
            fnmatch.fnmatch("/".join(parts[: i + 1]), pattern) for i in range(len(parts))
        ):
            return True
    return False


def test_the_copied_context_builds_the_wheel_with_the_cli(tmp_path: Path) -> None:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip()]
    context = tmp_path / "context"
    copied = 0
    for instruction, args in instructions():
        if instruction != "COPY":
            continue
        *sources, _destination = args.split()
        for source in sources:
            path = ROOT / source
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for file in files:
                relative = file.relative_to(ROOT).as_posix()
                if ignored(relative, patterns):
                    continue
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, context / relative)
                copied += 1
    assert copied > 50
    assert not list(context.rglob("*_pb2.py")), "generated stubs must come from the build, not the context"
    assert not list(context.rglob("*.so")) and not list(context.rglob("*.c")), "compiled code must come from the build"

    # the image's `pip install .`, as a wheel build with this venv's build requirements (no network)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    [wheel] = (tmp_path / "dist").glob("quotaplane-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "quotaplane = quotaplane.services.cli:main" in archive.read(entry_points).decode()
    for module in ("quotaplane/services/cli/__init__.py", "quotaplane/actors/shard.py", "quotaplane/spark/eventlog.py"):
        assert module in names, module
    for stub in ("quota_pb2.py", "quota_pb2_grpc.py", "admin_pb2.py", "telemetry_pb2_grpc.py"):
        assert f"quotaplane/v1/{stub}" in names, stub
    # the quota core's hot path compiled from its .pyx, not copied from a working tree's in-place build
    assert [n for n in names if re.fullmatch(r"quotaplane/quota/_record_compiled\..*\.so", n)], "no compiled core"
    assert [n for n in names if re.fullmatch(r"quotaplane/spark/_points_compiled\..*\.so", n)], "no compiled decoder"


def test_the_image_is_what_the_chart_runs() -> None:
    steps = instructions()
    [base] = [args for instruction, args in steps if instruction == "FROM"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base)
    assert any("openjdk-17-jre-headless" in args for instruction, args in steps if instruction == "RUN")
    [user] = [args for instruction, args in steps if instruction == "USER"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    security = values["podSecurityContext"]
    assert user == f"{security['runAsUser']}:{security['runAsGroup']}" and security["runAsNonRoot"]
    assert int(user.split(":")[0]) != 0
    [entrypoint] = [args for instruction, args in steps if instruction == "ENTRYPOINT"]
    assert entrypoint == '["quotaplane"]'  # the chart's containers pass `up ...` / `compact-log ...` as args
    [exposed] = [args for instruction, args in steps if instruction == "EXPOSE"]
    assert {int(p) for p in exposed.split()} == set(values["ports"].values())
    [volume] = [args for instruction, args in steps if instruction == "VOLUME"]
    assert volume == f'["{values["dataDir"]}"]'
