"""The Spark subcommands' bad-input paths: one ``Error:`` line and exit 1, checked before a JVM starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotaplane.services.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["compact-log", "--history", "{tmp}/h"],
        ["compact-log", "--log-dir", "{tmp}/missing", "--history", "{tmp}/h"],
        ["compact-telemetry", "--output", "{tmp}/o"],
        ["compact-telemetry", "--archive-root", "{tmp}/missing", "--output", "{tmp}/o"],
        ["throttle-report", "--archive-root", "{tmp}/missing", "--points", "{tmp}/p", "--output", "{tmp}/o"],
    ],
)
def test_missing_paths_are_one_line(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(tmp=tmp_path) for a in argv] + ["--data-dir", str(tmp_path / "data")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_up_to_offset_must_be_an_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compact-log", "--history", str(tmp_path), "--up-to-offset", "soon"])
    assert exit_.value.code == 2
