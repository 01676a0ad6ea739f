"""testproject.settings with the jobs on a database of their own (``PGJOBS["DATABASE"] =
"jobs"``), as a project keeping its jobs apart does; the jobs write the project's models on
"default". Run by tests/test_run_jobs_two_databases.py in a pytest of its own."""

from testproject.settings import *  # noqa: F403

DATABASES["jobs"] = {  # noqa: F405
    **DATABASES["default"],  # noqa: F405
    "TEST": {"NAME": f"test_{DATABASES['default']['NAME']}_jobs"},  # noqa: F405
}
PGJOBS = {**PGJOBS, "DATABASE": "jobs"}  # noqa: F405
