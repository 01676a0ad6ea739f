"""Loads ``queries.sql`` once and hands out statements by name.

The file holds statements (``-- name: x``, run through ``query("x")``) and parts
(``-- part: x``, never run alone). ``{{x}}`` in a statement or part is replaced by the text of
statement or part ``x`` at load time, so a statement made of others (the worker's
acknowledge-and-claim) runs the very text of each, not a copy that could drift.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- (name|part): (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")


def _parse(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(statements, parts)`` of ``text``, each by name, comments dropped, includes unresolved."""
    parts_of = {"name": {}, "part": {}}
    sections = _HEADER.split(text)
    # sections = [preamble, kind1, name1, body1, kind2, name2, body2, ...]
    for kind, name, body in zip(sections[1::3], sections[2::3], sections[3::3], strict=True):
        text_of = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if name in parts_of["name"] or name in parts_of["part"]:
            raise RuntimeError(f"queries.sql defines {name!r} twice")
        parts_of[kind][name] = text_of.rstrip(";")
    return parts_of["name"], parts_of["part"]


def _resolve(raw: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """Every text of ``raw`` with its includes replaced, and the names that were included."""
    resolved: dict[str, str] = {}
    included: set[str] = set()

    def expand(name: str, chain: tuple[str, ...]) -> str:
        if name in chain:
            raise RuntimeError(f"queries.sql includes itself: {' -> '.join((*chain, name))}")
        if name not in raw:
            raise RuntimeError(f"queries.sql: {chain[-1]!r} includes {{{{{name}}}}}, not defined")
        if name not in resolved:

            def include(match: re.Match[str]) -> str:
                included.add(match[1])
                return expand(match[1], (*chain, name))

            resolved[name] = _INCLUDE.sub(include, raw[name])
        return resolved[name]

    for name in raw:
        expand(name, ())
    return resolved, included


def _load() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    statements, parts = _parse(text)
    resolved, included = _resolve({**statements, **parts})
    unused = sorted(set(parts) - included)
    if unused:
        raise RuntimeError(f"queries.sql defines parts no statement includes: {unused}")
    return {name: resolved[name] for name in statements}


QUERIES: dict[str, str] = _load()


def query(name: str) -> str:
    return QUERIES[name]
