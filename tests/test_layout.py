"""The tests' own layout: test modules share code only through `helpers/` and conftest's
fixtures, never by importing one another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _imported(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module


def test_no_test_module_imports_another():
    found = {
        (path.name, name)
        for path in TESTS.glob("*.py")
        for name in _imported(path)
        if name.split(".")[0] == "conftest" or name.split(".")[0].startswith("test_")
    }
    assert not found
