"""Packages: the top-level folders install as one namespace, ``gpulens.*``.

``exporter/``, ``collector/``, ``analytics/`` and ``dashboards/`` stay at the top of the repository and
are mapped to ``gpulens.exporter`` and so on, so a wheel's only top-level package is ``gpulens``. The
symbolic links ``gpulens/<folder> -> ../<folder>`` let tools that walk directories (import-linter, mypy)
see the same layout from the repository root; the packages themselves come from the mapping below.
"""

from setuptools import find_namespace_packages, find_packages, setup

FOLDERS = ("exporter", "collector", "analytics", "dashboards")

packages = find_packages(include=["gpulens", "gpulens.*"], exclude=[f"gpulens.{f}*" for f in FOLDERS])
for folder in FOLDERS:
    packages += [f"gpulens.{name}" for name in find_namespace_packages(include=[folder, f"{folder}.*"])
                 if "__pycache__" not in name]

setup(packages=packages, package_dir={f"gpulens.{folder}": folder for folder in FOLDERS})
