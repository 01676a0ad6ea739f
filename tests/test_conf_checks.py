"""Settings (conf.py), system checks (checks.py), the backoff policy and job registration."""

from __future__ import annotations

import random
from dataclasses import MISSING, fields

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_pgjobs import RetryPolicy, job, registry
from django_pgjobs.checks import (
    check_atomic_jobs_database,
    check_database,
    check_job_leases,
    check_settings,
)
from django_pgjobs.conf import Config, ConfigError, get_config
from django_pgjobs.registry import JobAlreadyRegistered, registered


def ids(messages):
    return [m.id for m in messages]


def test_defaults():
    with override_settings(PGJOBS={}):
        config = get_config()
        assert config.DATABASE == "default" and config.LEASE_SECONDS == 60
        assert config.KEEP_SUCCEEDED_SECONDS == 0 and config.LISTEN_NOTIFY is True


def test_override_settings_clears_the_cache():
    with override_settings(PGJOBS={"DEFAULT_QUEUE": "one"}):
        assert get_config().DEFAULT_QUEUE == "one"
    with override_settings(PGJOBS={"DEFAULT_QUEUE": "two"}):
        assert get_config().DEFAULT_QUEUE == "two"


@pytest.mark.parametrize(
    "pgjobs, fragment",
    [
        ({"LEASE_SECONDZ": 1}, "unknown key 'LEASE_SECONDZ'"),
        ({"LEASE_SECONDS": "60"}, "LEASE_SECONDS must be int or float"),
        ({"LEASE_SECONDS": 0}, "LEASE_SECONDS must be greater than 0"),
        ({"LISTEN_NOTIFY": "yes"}, "LISTEN_NOTIFY must be bool"),
        ({"RETRY_JITTER": 2}, "RETRY_JITTER must be between 0 and 1"),
        ({"HEARTBEAT_SECONDS": 40, "LEASE_SECONDS": 60}, "at most half of LEASE_SECONDS"),
        ({"DEFAULT_MAX_ATTEMPTS": True}, "DEFAULT_MAX_ATTEMPTS must be a number"),
        ({"KEEP_SUCCEEDED_SECONDS": -1}, "KEEP_SUCCEEDED_SECONDS must be 0 or more"),
        # a factor below 1 used to pass here and crash the worker at the first failure
        ({"RETRY_FACTOR": 0.5}, "RETRY_FACTOR must be 1 or more"),
        ({"LEASE_SECONDS": float("nan")}, "LEASE_SECONDS must be a finite number"),
        ({"RETRY_FACTOR": float("inf")}, "RETRY_FACTOR must be a finite number"),
        # past 10 years, now() + value overflows PostgreSQL's timestamps inside the worker
        ({"RETRY_CAP_SECONDS": 1e300}, "RETRY_CAP_SECONDS must be at most"),
        ({"LEASE_SECONDS": 1e15, "HEARTBEAT_SECONDS": 1}, "LEASE_SECONDS must be at most"),
        # an empty or malformed default queue would break the caller's transaction at enqueue
        ({"DEFAULT_QUEUE": ""}, "DEFAULT_QUEUE: queue must be"),
        ({"DEFAULT_QUEUE": "has space"}, "DEFAULT_QUEUE: queue must be"),
    ],
)
def test_invalid_settings_are_reported_by_check_e002(pgjobs, fragment):
    with override_settings(PGJOBS=pgjobs):
        messages = check_settings()
        assert ids(messages) and set(ids(messages)) == {"pgjobs.E002"}
        assert any(fragment in m.msg for m in messages), [m.msg for m in messages]
        with pytest.raises(ConfigError, match="settings.PGJOBS"):
            get_config()


WRONG_TYPE = {
    "str": 1.5,
    "int": "1",
    "bool": "yes",
    "float": "1",
    "float | None": "1",
    "int | None": "1",
    "tuple[str, ...]": "a,b",
    "dict[str, str]": ["a", "b"],
}


@pytest.mark.parametrize("declared", fields(Config), ids=lambda declared: declared.name)
def test_every_setting_is_checked_against_its_declaration_in_config(declared):
    """Type and range come from the field of ``Config`` alone: a value of another type, or
    outside the declared bounds, is refused by check E002 and by ``get_config()``."""
    bad = [WRONG_TYPE[declared.type]]
    bounds = declared.metadata.get("bounds")
    if bounds is not None:
        bad.append(bounds.low - 1)
        if bounds.high is not None:
            bad.append(bounds.high * 2)
    for value in bad:
        with override_settings(PGJOBS={declared.name: value}):
            assert any(declared.name in m.msg for m in check_settings()), value
            with pytest.raises(ConfigError, match=declared.name):
                get_config()
    default = declared.default if declared.default is not MISSING else declared.default_factory()
    with override_settings(PGJOBS={declared.name: default}):
        assert check_settings() == [] and getattr(get_config(), declared.name) == default


@pytest.mark.parametrize("value", [["LEASE_SECONDS"], [], 0, False, ""])
def test_pgjobs_must_be_a_dict(value):
    """An empty list or a False is a mistake too, not "no settings" (None or unset is)."""
    with override_settings(PGJOBS=value):
        assert ids(check_settings()) == ["pgjobs.E002"]
    with override_settings(PGJOBS=None):
        assert check_settings() == []


def test_unknown_database_alias_is_check_e003():
    with override_settings(PGJOBS={"DATABASE": "nope"}):
        assert ids(check_database()) == ["pgjobs.E003"]


def test_valid_configuration_passes_checks():
    assert check_settings() == [] and check_database() == []


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--concurrency", "0"], "concurrency"),
        (["--batch-size", "-1"], "batch-size"),
        (["--max-jobs", "zero"], "max-jobs"),
        (["--poll-interval", "0"], "poll-interval"),
        (["--stats-interval", "0"], "stats-interval"),
        (["--queue", "bad queue'"], "queue must be"),
    ],
)
def test_runjobs_rejects_out_of_range_options(argv, fragment):
    with pytest.raises(CommandError, match=fragment):
        call_command("runjobs", *argv)


def test_backoff_is_exponential_capped_and_jittered():
    policy = RetryPolicy(base_seconds=1, factor=2, cap_seconds=10, jitter=0.5)
    assert [policy.ceiling(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    rng = random.Random(7)
    delays = [policy.delay(3, rng) for _ in range(200)]
    assert all(2 <= d <= 4 for d in delays)
    assert max(delays) - min(delays) > 1  # spread out, not all equal
    assert RetryPolicy(jitter=0).delay(2) == 4
    assert policy.ceiling(10_000) == 10  # no overflow


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_seconds": -1},
        {"factor": 0.5},
        {"jitter": 1.5},
        {"cap_seconds": "1"},
        {"cap_seconds": 1e300},
    ],
)
def test_retry_policy_validates(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_bare_decorator_registers_module_level_functions():
    from testproject.demo.jobs import noop

    assert registered()["testproject.demo.jobs.noop"] is noop
    assert noop.get_queue() == "default" and noop.get_max_attempts() == 5


def test_job_decorator_forms_and_validation():
    @job(name="custom.name", queue="q", priority=5)
    def configured() -> None: ...

    assert registered()["custom.name"] is configured
    assert configured.get_queue() == "q" and configured() is None
    with pytest.raises(ValueError, match="priority"):
        job(name="custom.priority", priority=1000)(lambda: None)
    with pytest.raises(JobAlreadyRegistered):

        @job(name="custom.name")
        def other() -> None: ...


def test_local_functions_need_a_name():
    def make():
        @job
        def local() -> None: ...

    with pytest.raises(ValueError, match="module-level"):
        make()


def test_a_job_lease_shorter_than_two_heartbeats_is_check_e004(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry.registered())  # forget it afterwards

    @job(name="checks.short_lease", lease_seconds=5)
    def short_lease() -> None: ...

    @job(name="checks.long_enough_lease", lease_seconds=20)
    def long_enough() -> None: ...

    (error,) = check_job_leases()  # HEARTBEAT_SECONDS is 10
    assert error.id == "pgjobs.E004" and "'checks.short_lease'" in error.msg
    assert "lease_seconds >= 20" in error.hint
    with override_settings(PGJOBS={"HEARTBEAT_SECONDS": 2}):
        assert check_job_leases() == []


def test_atomic_jobs_on_a_jobs_database_other_than_default_is_check_w001(monkeypatch):
    assert check_atomic_jobs_database() == []  # the demo's atomic jobs, on 'default'
    with override_settings(PGJOBS={"DATABASE": "jobs"}):
        (warning,) = check_atomic_jobs_database()
    assert warning.id == "pgjobs.W001" and warning.level == 30  # WARNING
    atomic = sorted(name for name, definition in registered().items() if definition.is_atomic())
    assert "testproject.demo.jobs.record_atomic" in atomic
    assert f"{len(atomic)} job(s) use atomic=True ({atomic[0]}, " in warning.msg
    assert "'jobs'" in warning.msg and "not rolled back" in warning.msg

    non_atomic = {n: d for n, d in registered().items() if d.atomic is not True}
    monkeypatch.setattr(registry, "_REGISTRY", non_atomic)
    with override_settings(PGJOBS={"DATABASE": "jobs"}):
        assert check_atomic_jobs_database() == []  # no atomic job: nothing to warn about
    with override_settings(PGJOBS={"DATABASE": "jobs", "DEFAULT_ATOMIC": True}):
        (warning,) = check_atomic_jobs_database()
    assert warning.id == "pgjobs.W001" and "DEFAULT_ATOMIC" in warning.msg
    with override_settings(PGJOBS={"DEFAULT_ATOMIC": True}):
        assert check_atomic_jobs_database() == []
