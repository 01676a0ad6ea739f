"""The code on the how-to pages is the code the tests run.

A ``python`` block of a page listed here whose first line is a comment naming a file
(``# testproject/handlers/async_jobs.py``, or a test module: ``# tests/test_testing_howto.py``)
must appear, line for line after that comment, in that file; the tests of that section import and run the file's jobs with real ``runjobs`` processes.
A page that names no file at all fails too: an example nobody runs is an example that rots.

The Celery guide shows Celery code next to ours, and Celery is not installed here: each of its
``python`` blocks either names a file the tests run or starts with ``# Celery (before)``, so no
block of ours can go unrun there by mistake.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    "docs/howto/handlers.md",
    "docs/howto/django-tasks.md",
    "docs/howto/from-celery.md",
    "docs/howto/testing.md",
    "docs/howto/unique.md",
    "docs/howto/monitor.md",
    "docs/howto/recurring.md",
    "docs/howto/tracing.md",
    "docs/howto/outbox.md",
    "docs/howto/repair.md",
    "docs/howto/developing.md",
    "docs/howto/workflows.md",
    "docs/howto/flow-control.md",
    "docs/howto/databases.md",
]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NAMED = re.compile(r"#\s*((?:testproject|tests)/\S+\.py)\s*\n")
CELERY_GUIDE = "docs/howto/from-celery.md"
CELERY_CODE = "# Celery (before)\n"


def blocks(page: str) -> list[tuple[str, str]]:
    """(file named, code after the naming comment) for each python block naming a file."""
    found = []
    for block in BLOCK.findall((ROOT / page).read_text()):
        match = NAMED.match(block)
        if match:
            found.append((match.group(1), block[match.end() :]))
    return found


def normalised(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def contains(haystack: list[str], needle: list[str]) -> bool:
    size = len(needle)
    return any(haystack[i : i + size] == needle for i in range(len(haystack) - size + 1))


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_are_in_the_files_the_tests_run(page):
    examples = blocks(page)
    assert examples, f"{page} shows no example taken from a file the tests run"
    for path, code in examples:
        source = ROOT / path
        assert source.is_file(), f"{page} names {path}, which does not exist"
        assert contains(normalised(source.read_text()), normalised(code)), (
            f"{page}: a block naming {path} is not a part of that file:\n{code}"
        )


def test_the_harness_notices_an_example_that_differs(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\n# testproject/handlers/__init__.py\nprint('not in it')\n```\n")
    [(path, code)] = blocks(str(page))  # an absolute path replaces ROOT
    assert path == "testproject/handlers/__init__.py"
    assert not contains(normalised((ROOT / path).read_text()), normalised(code))


def test_every_block_of_the_celery_guide_is_run_or_is_celery_code():
    for block in BLOCK.findall((ROOT / CELERY_GUIDE).read_text()):
        assert NAMED.match(block) or block.startswith(CELERY_CODE), (
            f"{CELERY_GUIDE}: a python block neither names a file the tests run nor starts "
            f"with {CELERY_CODE!r}:\n{block}"
        )


def test_the_celery_guide_lists_every_apply_async_option_refused():
    from django_pgjobs.celery_calls import REFUSED_OPTIONS

    text = (ROOT / CELERY_GUIDE).read_text()
    for option in REFUSED_OPTIONS:
        assert f"| `{option}`" in text or f", `{option}`" in text, option
