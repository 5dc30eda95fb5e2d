"""``POSTBOX_NATIVE``: which engine a process codes records with, and the errors of a switch
that cannot be honoured. Runs with or without the native extension."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from postbox.storage_engine import Message, MessageStore, StoreConfig
from postbox.storage_engine.formats import engine


@pytest.fixture
def extension_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "NATIVE_MODULE", "postbox_native_not_installed")


@pytest.mark.parametrize("setting", [None, "", "auto", " AUTO "])
def test_auto_falls_back_to_python_when_the_extension_is_missing(extension_missing,
                                                                 setting) -> None:
    assert engine.load_native(setting) is None


def test_one_without_the_extension_is_a_clear_error(extension_missing) -> None:
    with pytest.raises(engine.NativeEngineError, match=r"POSTBOX_NATIVE=1 but the native "
                       r"engine is not installed .*`make`.*POSTBOX_NATIVE=auto or 0"):
        engine.load_native("1")


def test_zero_keeps_python_and_other_values_are_refused() -> None:
    assert engine.load_native("0") is None
    assert engine.engine_description(None) == "python"
    with pytest.raises(engine.NativeEngineError, match="POSTBOX_NATIVE='yes': use 0"):
        engine.load_native("yes")


def _postbox(*args: str, native: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POSTBOX_NATIVE": native}
    return subprocess.run([str(Path(sys.executable).with_name("postbox")), *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_version_and_store_stats_name_the_pure_python_engine(tmp_path: Path) -> None:
    with MessageStore.open(StoreConfig(root_dir=tmp_path)) as store:
        store.put_message(Message("TopicTest", b"x"), queue_id=0)
    version = _postbox("--version", native="0")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip().endswith("(engine: python)")
    stats = _postbox("store", "stats", "--store", str(tmp_path), "--json", native="0")
    assert '"engine": "python"' in stats.stdout, stats.stderr
