"""Typed jobs: ``@job`` keeps the function's parameters (``ParamSpec``) and return type, so a
type checker refuses a wrong ``enqueue()``, ``delay()`` or ``using(...).enqueue()`` and types
``get_result()``. mypy runs on tests/typing/wrong_calls.py, every line of which marked "wrong"
must be an error, and on the typed example of docs/howto/developing.md, which must have none."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRONG = Path("tests/typing/wrong_calls.py")
EXAMPLE = Path("testproject/handlers/developing.py")


def test_mypy_refuses_wrong_job_calls_and_accepts_the_example(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "--no-error-summary"]
        + ["--config-file", "pyproject.toml", str(WRONG), str(EXAMPLE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = completed.stdout + completed.stderr
    errors = re.findall(r"^(\S+?):(\d+): error: (.*)$", output, re.MULTILINE)
    wrong_lines = {
        number
        for number, line in enumerate((ROOT / WRONG).read_text().splitlines(), start=1)
        if "# wrong" in line
    }
    assert len(wrong_lines) == 5
    assert {int(line) for path, line, _ in errors if path == str(WRONG)} == wrong_lines, output
    assert [error for error in errors if error[0] != str(WRONG)] == [], output
    messages = "\n".join(message for _, _, message in errors)
    assert 'Argument 1 to "enqueue" of "JobDefinition" has incompatible type "str"' in messages
    assert 'Missing positional argument "width" in call to "delay"' in messages
    assert '"dict[str, int] | None", variable has type "str"' in messages


def test_the_typed_example_runs(db):
    from django_pgjobs.testing import run_jobs
    from testproject.handlers import developing

    ids = developing.resize_for_the_gallery(7)
    run_jobs(["handlers"])
    assert [developing.width_of(job_id) for job_id in ids] == [640, 320, 1280]
