"""The layout rules of the README's "Code map", checked on the source so that they stay true:
imports go one way between the three layers, functions stay short, modules stay readable."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("client", "engines", "service", "migrations", "bench")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500

# What each layer may import from the project (besides itself) and, for the client, from outside.
ALLOWED_PROJECT_IMPORTS = {"client": set(), "engines": set(), "service": {"client", "engines"}}
CLIENT_THIRD_PARTY = {"httpx", "pydantic", "typing_extensions"}


def sources(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def imported_top_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED_PROJECT_IMPORTS))
def test_imports_go_one_way_between_the_layers(layer: str) -> None:
    others = set(ALLOWED_PROJECT_IMPORTS) - {layer} - ALLOWED_PROJECT_IMPORTS[layer]
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources(layer)
        for name in imported_top_names(ast.parse(path.read_text())) & (others | {"bench", "tests"})
    }
    assert not wrong


def test_the_client_depends_on_httpx_and_pydantic_only() -> None:
    import sys

    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    outside = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sources("client")
        for name in imported_top_names(ast.parse(path.read_text()))
        if name not in stdlib | CLIENT_THIRD_PARTY | {"client"}
    }
    assert not outside


def test_no_function_outside_bench_and_tests_is_longer_than_60_lines() -> None:
    long = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})"
        for path in sources("client", "engines", "service", "migrations")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert not long


def test_no_module_outside_tests_is_longer_than_500_lines() -> None:
    long = {
        f"{path.relative_to(ROOT)} ({n})"
        for path in sources(*PACKAGES)
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long
