"""Packaging: the repository's top-level folders installed under the one ``postbox`` namespace.

``[tool.postbox] namespace-folders`` in pyproject.toml lists them; everything else about the
package is in pyproject.toml.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
FOLDERS = tomllib.loads((HERE / "pyproject.toml").read_text())["tool"]["postbox"][
    "namespace-folders"]

package_dir = {"postbox": "postbox", **{f"postbox.{folder}": folder for folder in FOLDERS}}
EDGES = ["cli", "cli.*", "console", "console.*"]  # the command line and the web console
packages = ["postbox", *(f"postbox.{name}" for name in find_packages(include=EDGES,
                                                                       where="postbox"))]
for folder in FOLDERS:
    packages += [f"postbox.{folder}",
                 *(f"postbox.{folder}.{name}" for name in find_packages(where=folder))]

setup(package_dir=package_dir, packages=packages)
