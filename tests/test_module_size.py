"""No module of the package outgrows what one reader holds in mind (migrations aside)."""

from __future__ import annotations

from pathlib import Path

import django_pgjobs

MAX_LINES = 450


def test_no_module_is_over_450_lines():
    package = Path(django_pgjobs.__file__).parent
    modules = [
        path
        for path in package.rglob("*.py")
        if "migrations" not in path.relative_to(package).parts
    ]
    assert len(modules) > 20  # the walk found the package, worker/ included
    too_long = {
        str(path.relative_to(package)): lines
        for path in modules
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}
