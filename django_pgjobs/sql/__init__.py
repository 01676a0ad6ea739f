"""Loads ``queries.sql`` once and hands out statements by name."""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        statement = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        if name in queries:
            raise RuntimeError(f"queries.sql defines {name!r} twice")
        queries[name] = statement.rstrip(";")
    return queries


QUERIES: dict[str, str] = _load()


def query(name: str) -> str:
    return QUERIES[name]
