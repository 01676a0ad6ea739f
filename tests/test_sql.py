"""``sql/``: every statement of queries.sql is run by the package, every name run is defined, and
the loader composes statements from their parts (no copies to drift apart)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import django_pgjobs
from django_pgjobs import sql
from django_pgjobs.claims import ClaimBuilder, ClaimPlan

PACKAGE = Path(django_pgjobs.__file__).parent
#: Functions whose argument names a statement: (function name, index of that argument).
RUNNERS = {"execute": 1, "execute_prepared": 1, "estimate_rows": 1, "query": 0}
#: Modules called through their name (`db.execute`), as opposed to `cursor.execute`.
PACKAGE_MODULES = {"db", "sql", "overview"}
#: The statements that carry the claim, and the completion each carries.
COMBINED = [
    ("complete_and_claim_jobs", "complete_jobs"),
    ("complete_retained_and_claim_jobs", "complete_jobs_retained"),
    ("complete_with_results_and_claim_jobs", "complete_jobs_with_results"),
]
#: Each of them again, carrying the claim of a worker whose slots of one kind are full.
COMBINED_SKIPPING = [(f"{combined}_skipping", completion) for combined, completion in COMBINED]
#: The statements that complete jobs of workflows, and the completion each is made of.
WORKFLOW_COMPLETIONS = [
    ("complete_workflow_jobs", "complete_jobs"),
    ("complete_workflow_jobs_retained", "complete_jobs_retained"),
    ("complete_workflow_jobs_with_results", "complete_jobs_with_results"),
]


def _names_in(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and type(n.value) is str}


def statement_names_used() -> dict[str, list[str]]:
    """Statement name -> where the package runs it. A name passed as a variable is resolved
    through the assignments of the enclosing function; a parameter passed on is the caller's."""
    used: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            params = {
                a.arg
                for inner in ast.walk(function)
                if isinstance(inner, ast.FunctionDef)
                for a in (*inner.args.posonlyargs, *inner.args.args, *inner.args.kwonlyargs)
            }
            assigned: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            assigned.setdefault(target.id, set()).update(_names_in(node.value))
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                if isinstance(func, ast.Attribute):
                    owner = getattr(func.value, "id", "")
                    called = func.attr if owner in PACKAGE_MODULES else ""  # not cursor.execute
                else:
                    called = getattr(func, "id", "")
                index = RUNNERS.get(called)
                if index is None or len(node.args) <= index:
                    continue
                arg = node.args[index]
                if isinstance(arg, ast.Name) and arg.id in params:
                    continue  # passed on: the caller names the statement
                if isinstance(arg, ast.Name):
                    names = assigned.get(arg.id, set())
                else:
                    names = _names_in(arg)
                assert names, f"{path.name}:{node.lineno}: statement name not found statically"
                for name in names:
                    used.setdefault(name, []).append(f"{path.name}:{node.lineno}")
    return used


def test_every_statement_is_run_by_the_package_and_every_name_run_is_defined():
    used = statement_names_used()
    assert set(used) - set(sql.QUERIES) == set(), "run but not defined in queries.sql"
    assert set(sql.QUERIES) - set(used) == set(), "defined in queries.sql but never run"


def test_the_combined_statements_are_made_of_the_statements_they_combine():
    for combined, completion in COMBINED:
        text = sql.query(combined)
        assert f"completed AS ({sql.query(completion)})" in text
        assert "released AS (" not in text  # workflows are counted by statements of their own
        assert f"claimed AS ({sql.query('claim_jobs')})" in text
    for combined, completion in COMBINED_SKIPPING:
        text = sql.query(combined)
        assert f"completed AS ({sql.query(completion)})" in text
        assert f"claimed AS ({sql.query('claim_jobs_skipping')})" in text
        plain = sql.query(combined.removesuffix("_skipping"))
        assert text.replace(sql.query("claim_jobs_skipping"), sql.query("claim_jobs")) == plain


def test_the_workflow_completions_are_the_completions_and_the_count():
    for statement, completion in WORKFLOW_COMPLETIONS:
        text = sql.query(statement)
        assert text.startswith(f"WITH completed AS ({sql.query(completion)}),")
        assert "released AS (" in text and text.endswith("SELECT id FROM completed")


def placeholders(name: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", sql.query(name)))


def test_the_claim_builder_gives_the_claim_every_parameter_it_takes_and_no_other():
    """One builder makes the parameters of every statement that claims: the claim alone and the
    claim carrying each kind of completion take the claim's parameters, plus the completion's."""
    builder = ClaimBuilder(worker="w", queues=["a", "b"], lease_seconds=5, prepared=True)
    plan = ClaimPlan(limit=6, sync_room=4, sync_starts=9, async_room=2, async_names=["n"])
    claim = builder.claim(plan, skip_names=("slow",))
    assert set(claim.params) == placeholders("claim_jobs")
    assert claim.params == {
        **{"worker": "w", "all_queues": False, "queues": ["a", "b"], "lease_seconds": 5.0},
        **{"limit": 6, "sync_room": 4, "sync_starts": 4, "async_room": 2, "async_starts": 0},
        **{"async_names": ["n"], "any_name": False, "skip_names": ["slow"]},
        **{"any_id": True, "only_ids": []},
        "token": claim.token,
    }
    assert (claim.lease_seconds, claim.prepared) == (5.0, True)
    everything = builder.take(3)
    assert everything.params["any_name"] and everything.params["skip_names"] == []
    assert everything.params["sync_room"] == everything.params["sync_starts"] == 3
    assert everything.token != claim.token  # each claim its own token
    assert ClaimBuilder(worker="w", queues=None, lease_seconds=1).take(1).params["all_queues"]
    for combined, completion in COMBINED:
        assert placeholders(combined) == placeholders("claim_jobs") | placeholders(completion)


def test_includes_are_resolved_and_mistakes_refused():
    statements, parts = sql._parse(
        "-- name: a\n-- what a does\nSELECT 1 FROM ({{p}}) AS x;\n"
        "-- part: p\nSELECT {{b}}\n-- name: b\n2;\n"
    )
    resolved, included = sql._resolve({**statements, **parts})
    assert resolved["a"] == "SELECT 1 FROM (SELECT 2) AS x"
    assert included == {"p", "b"} and set(statements) == {"a", "b"} and set(parts) == {"p"}
    with pytest.raises(RuntimeError, match="not defined"):
        sql._resolve({"a": "SELECT {{nothing}}"})
    with pytest.raises(RuntimeError, match="includes itself: a -> b -> a"):
        sql._resolve({"a": "SELECT {{b}}", "b": "SELECT {{a}}"})
    with pytest.raises(RuntimeError, match="defines 'a' twice"):
        sql._parse("-- name: a\nSELECT 1;\n-- part: a\nSELECT 2;\n")


def test_no_statement_keeps_an_unresolved_include():
    assert not [name for name, text in sql.QUERIES.items() if "{{" in text or "}}" in text]
