"""The on-disk kernel cache: one compile per specialization per machine, a fresh compile for
any change to what the binary depends on, and no torn entries."""

from __future__ import annotations

import pytest

from gpuhmm.engine import kernelcache


class Compiler:
    """A stand-in for NVRTC: the binary names everything it was built from."""

    def __init__(self):
        self.calls = 0

    def __call__(self, code, expression, options):
        self.calls += 1
        return f"{code}|{expression}|{' '.join(options)}".encode(), f"_Z{len(expression)}{expression}"


def load(path, lowered):
    return path.read_bytes().decode(), lowered


ARGUMENTS = ("__global__ void k() {}", "gpuhmm::k<4>", ("-std=c++17",), ("14.0", (12, 8)))


def test_a_specialization_compiles_once_and_loads_from_disk(tmp_path):
    compiler = Compiler()
    first = kernelcache.cached_kernel(tmp_path, *ARGUMENTS, compiler, load)
    second = kernelcache.cached_kernel(tmp_path, *ARGUMENTS, compiler, load)
    assert compiler.calls == 1
    assert first == second == ("__global__ void k() {}|gpuhmm::k<4>|-std=c++17", "_Z12gpuhmm::k<4>")
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("changed", range(4), ids=["source", "expression", "options", "compiler"])
def test_any_change_compiles_afresh(tmp_path, changed):
    compiler = Compiler()
    kernelcache.cached_kernel(tmp_path, *ARGUMENTS, compiler, load)
    arguments = list(ARGUMENTS)
    arguments[changed] = {0: "__global__ void k() { }", 1: "gpuhmm::k<8>", 2: ("-std=c++20",), 3: ("14.0", (12, 9))}[
        changed
    ]
    binary, _ = kernelcache.cached_kernel(tmp_path, *arguments, compiler, load)
    assert compiler.calls == 2
    assert binary.startswith(arguments[0])


def test_a_binary_without_its_name_is_compiled_again(tmp_path):
    compiler = Compiler()
    kernelcache.cached_kernel(tmp_path, *ARGUMENTS, compiler, load)
    for name in tmp_path.glob("*.name"):
        name.unlink()
    assert kernelcache.cached_kernel(tmp_path, *ARGUMENTS, compiler, load)[1] == "_Z12gpuhmm::k<4>"
    assert compiler.calls == 2
