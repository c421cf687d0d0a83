"""The decode loop asks drafters what they want through ``Drafter.plan`` only (issue 37): the
speculative step (``engines/llama/speculative/verify.py``) never inspects a drafter's type, so
a new drafter or wrapper needs no change there. Fails on any ``isinstance``, ``getattr``,
``hasattr`` or ``type(...)`` call in that module, or an import of a concrete drafter."""
from __future__ import annotations

import ast
from pathlib import Path

import hypnos.engines.llama.speculative.verify as verify

INSPECTORS = {"isinstance", "getattr", "hasattr", "type"}
DRAFTER_MODULES = ("drafts", "tuning", "draft_model", "mtp")


def tree() -> ast.Module:
    return ast.parse(Path(verify.__file__).read_text(encoding="utf-8"))


def test_verify_inspects_no_type():
    calls = [node for node in ast.walk(tree()) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id in INSPECTORS]
    assert [(c.func.id, c.lineno) for c in calls] == []


def test_verify_imports_no_concrete_drafter():
    imported = [node.module for node in ast.walk(tree())
                if isinstance(node, ast.ImportFrom) and node.module]
    assert [m for m in imported if m.rsplit(".", 1)[-1] in DRAFTER_MODULES] == []
