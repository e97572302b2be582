"""The wheel built from the tree ships every kernel source (and the CPU Viterbi filter's C), and
an installed (not editable) gpuhmm finds them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers.data import ROOT

KERNELS = ROOT / "src" / "gpuhmm" / "engine" / "kernels"
SOURCES = sorted(str(p.relative_to(KERNELS)) for p in KERNELS.rglob("*") if p.suffix in (".cu", ".cuh"))
#: Every compiled-at-run-time source of the package, under src/gpuhmm.
PACKAGE = ROOT / "src" / "gpuhmm"
DATA_FILES = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.suffix in (".cu", ".cuh", ".c"))
#: Run in the installed copy: each kernel (a .cu file) with its headers inlined, as NVRTC gets it.
FIND_KERNELS = """
import sys
from pathlib import Path
import gpuhmm
from gpuhmm.engine import kernelcache
assert Path(gpuhmm.__file__).is_relative_to(sys.argv[1]), gpuhmm.__file__
for name in sys.argv[2:]:
    assert (kernelcache.KERNELS / name).is_file(), name
    if name.endswith(".cu"):
        assert '#include "' not in kernelcache.kernel_source(name), name
"""


def _tree(destination):
    """The files a clean clone has: those git tracks, else the whole tree less build outputs."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if listed.returncode != 0:
        shutil.copytree(ROOT, destination, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build"))
        return
    for name in listed.stdout.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    _tree(work / "tree")
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", work / "dist"]
    subprocess.run([*map(str, build), str(work / "tree")], check=True, capture_output=True)
    (built,) = (work / "dist").glob("gpuhmm-*.whl")
    return work, built


def test_the_tree_has_nested_kernels():
    assert "tail/tail.cu" in SOURCES and any(s.endswith(".cuh") for s in SOURCES)


def test_wheel_holds_every_kernel_source(wheel):
    _, built = wheel
    with zipfile.ZipFile(built) as archive:
        names = set(archive.namelist())
    missing = [s for s in DATA_FILES if f"gpuhmm/{s}" not in names]
    assert "engine/vitcpu.c" in DATA_FILES and not missing


def test_installed_wheel_finds_every_kernel(wheel):
    work, built = wheel
    site = work / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, built]
    subprocess.run(list(map(str, install)), check=True, capture_output=True)
    environment = {**os.environ, "PYTHONPATH": str(site)}
    found = subprocess.run(
        [sys.executable, "-c", FIND_KERNELS, str(site), *SOURCES], env=environment, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
