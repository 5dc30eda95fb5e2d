"""One import namespace: the repository's folders install under ``postbox`` and nowhere else.

An application with its own ``migrations/`` or ``framework/`` package keeps it; the public names
stay importable at their place in the namespace and the everyday ones from ``postbox`` itself;
the project's own code and tests import only the namespaced names; a built wheel holds
``postbox/`` alone, laid out as the folders are.
"""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import postbox
from tests.support.paths import REPO_ROOT

FOLDERS = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["postbox"][
    "namespace-folders"]
# name -> where it lives; the contract's public names, at their place in the namespace
PUBLIC_NAMES = {
    "postbox.storage_engine": ["MessageStore", "StoreConfig", "Message", "FlushMode",
                               "MessageView", "verify_store"],
    "postbox.framework": ["App", "ConsumerOptions", "RetryLater", "DeadLetter", "BrokerClient"],
    "postbox.outbox": ["send", "Outbox", "message_stub", "message_log", "message_processed"],
    "postbox.idempotency": ["IdempotencyMiddleware"],
    "postbox.spark_reconcile": ["ReconcileOptions"],
    "postbox.migrations.api": ["upgrade", "downgrade", "current", "head"],
    "postbox.cli": ["main"],
}
CODE_FOLDERS = [*FOLDERS, "postbox", "examples", "bench", "tests", "scripts"]


def test_every_folder_is_a_subpackage_of_postbox():
    for folder in FOLDERS:
        module = importlib.import_module(f"postbox.{folder}")
        assert Path(module.__file__).resolve().parent == REPO_ROOT / folder


@pytest.mark.parametrize("module", sorted(PUBLIC_NAMES))
def test_public_names_are_importable_at_their_place(module):
    loaded = importlib.import_module(module)
    missing = [name for name in PUBLIC_NAMES[module] if not hasattr(loaded, name)]
    assert missing == []
    if module == "postbox.storage_engine":
        assert callable(loaded.StoreConfig.from_broker_conf)


def test_everyday_names_are_the_packages_own():
    for name in postbox.__all__:
        package = importlib.import_module(f"postbox.{postbox.EVERYDAY_NAMES[name]}")
        assert getattr(postbox, name) is getattr(package, name)
    assert set(postbox.__all__) == set(postbox.EVERYDAY_NAMES)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        postbox.Nothing  # noqa: B018 - the attribute access is the test


def test_importing_postbox_loads_no_subpackage():
    completed = subprocess.run(
        [sys.executable, "-c", "import sys, postbox; "
         "print(sorted(m for m in sys.modules if m.startswith('postbox.')))"],
        cwd="/", capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_an_applications_own_migrations_and_framework_packages_stay_its_own(tmp_path):
    for name in ("migrations", "framework", "outbox"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'the application: {name}'\n")
    completed = subprocess.run(
        [sys.executable, "-c", "import migrations, framework, outbox\n"
         "from postbox import App\nfrom postbox.migrations import api\n"
         "print(migrations.OWNER, framework.OWNER, outbox.OWNER, App.__module__, api.__name__)"],
        cwd=tmp_path, capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == [
        "the", "application:", "migrations", "the", "application:", "framework", "the",
        "application:", "outbox", "postbox.framework.app", "postbox.migrations.api"]


def bare_imports(path: Path) -> list[str]:
    """``import X`` / ``from X import`` of a namespaced folder by its bare name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {name}" for name in names
                  if name and name.split(".")[0] in FOLDERS]
    return found


def test_the_projects_code_imports_only_namespaced_names():
    offending = [line for folder in CODE_FOLDERS if (REPO_ROOT / folder).is_dir()
                 for path in sorted((REPO_ROOT / folder).rglob("*.py"))
                 for line in bare_imports(path)]
    assert offending == []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (setuptools' build/ in the checkout may hold
    modules an earlier build saw and the tree no longer has)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(REPO_ROOT / name, source / name)
    for folder in ["postbox", *FOLDERS]:
        shutil.copytree(REPO_ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    [built] = out.glob("postbox-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_postbox_alone_laid_out_as_the_folders(wheel):
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {"postbox"}
    modules = {name for name in names if name.endswith(".py")}
    expected = {f"postbox/{path.relative_to(REPO_ROOT / folder).as_posix()}"
                if folder == "postbox" else
                f"postbox/{folder}/{path.relative_to(REPO_ROOT / folder).as_posix()}"
                for folder in [*FOLDERS, "postbox"]
                for path in (REPO_ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
    assert modules == expected
    assert "postbox/migrations/script.py.mako" in names
    templates = {path.name for path in (REPO_ROOT / "postbox" / "console" / "templates").iterdir()}
    assert {name.rpartition("/")[2] for name in names
            if name.startswith("postbox/console/templates/")} == templates
    assert "postbox/console/templates/page.html" in names
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    text = wheel.read(entry_points).decode()
    assert "postbox = postbox.cli:main" in text
    assert "postbox.idempotency.middleware:IdempotencyMiddleware" in text


def test_the_installed_wheel_runs_from_anywhere_without_the_checkout(wheel, tmp_path):
    wheel.extractall(tmp_path / "site")
    completed = subprocess.run(
        [sys.executable, "-P", "-c",
         "import postbox, postbox.framework, postbox.cli\n"
         "from postbox import App\n"
         "print(postbox.__file__, App.__module__)\n"
         "for name in ('framework', 'examples.payments', 'storage_engine'):\n"
         "    try:\n        __import__(name)\n    except ImportError:\n        pass\n"
         "    else:\n        print('importable:', name)\n"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == [str(tmp_path / "site" / "postbox" / "__init__.py"),
                                        "postbox.framework.app"]
