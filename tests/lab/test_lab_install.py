"""The lab's set-up says what is missing or broken instead of failing obscurely (no Java
needed: these run everywhere)."""

from __future__ import annotations

import os
import stat

import pytest

from tests.support.rocketmq_install import LabInstall, LabSetupError, LabUnavailableError


def fake_tool(folder, name, script="exit 0"):
    """A stand-in executable: the machine's real JDK and Maven are what the lab needs, so their
    absence or failure can only be produced with stand-ins."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_missing_java_or_maven_is_named(tmp_path, monkeypatch):
    fake_tool(tmp_path, "java")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabUnavailableError, match="not on PATH: javac, mvn"):
        LabInstall.prepare(tmp_path / "cache")


def test_a_failed_download_says_so_and_leaves_no_half_filled_cache(tmp_path, monkeypatch):
    for name in ("java", "javac"):
        fake_tool(tmp_path, name)
    fake_tool(tmp_path, "mvn", 'echo "Could not transfer artifact from central"; exit 1')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/usr/bin:/bin")
    with pytest.raises(LabSetupError, match=r"(?s)fetching the jars.*Could not transfer"):
        LabInstall.prepare(tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
