"""Defining jobs: the ``@job`` decorator, ``JobDefinition`` and the registry of job names.

``<job>.using(...)`` pairs a definition with ``calls.CallOptions`` (``JobWithOptions``); both
enqueue through ``enqueueing`` (also as Celery spells it: ``celery_calls``), which reads the definition it is given and never imports this
module.

A worker only ever calls functions found in this registry. Names come from the decorated
function (``module.qualname``) or from ``@job(name=...)``; a row naming anything else is
dead-lettered, never imported.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable, Iterable
from importlib import import_module
from typing import TYPE_CHECKING, Any, overload

from django.utils.module_loading import autodiscover_modules

from .backoff import RetryPolicy
from .callables import AsyncJobsNotSupported as AsyncJobsNotSupported
from .callables import check_ran, check_runs_when_called, is_async_callable, module_level_name
from .calls import NO_OPTIONS, CallOptions
from .celery_calls import CeleryCalls, P, R
from .conf import ConfigError, get_config
from .cron import Cron
from .flow import remember_limits
from .installed import require_installed
from .payload import Undecodable
from .retries import check_exception_classes
from .uniqueness import HasUniqueRules
from .validation import (
    check_flow_limits,
    check_max_attempts,
    check_name,
    check_positive_seconds,
    check_priority,
    check_queue,
)
from .versions import check_options as check_versions

if TYPE_CHECKING:  # job modules load before the app registry: no models imported at run time
    from .models import Job
    from .results import JobResult

logger = logging.getLogger("django_pgjobs")

_REGISTRY: dict[str, JobDefinition[..., Any]] = {}


class UnknownJobError(LookupError):
    """A name that no ``@job`` registered."""


class JobAlreadyRegistered(ValueError):
    """Two different functions registered under one name."""


# -- definitions -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobDefinition(CeleryCalls[P, R], HasUniqueRules):
    """A registered job function and its defaults. Calling it calls the function directly;
    ``delay()`` and ``apply_async()`` are Celery's spellings of ``enqueue()`` and
    ``using(...).enqueue()`` (``celery_calls``). Generic in the function's parameters ``P`` and
    return type ``R``: type checkers check ``enqueue()``'s arguments against the function's
    and type ``get_result()``'s ``return_value`` (docs/howto/developing.md)."""

    func: Callable[P, R]
    name: str
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    atomic: bool | None = None
    lease_seconds: float | None = None
    retry: RetryPolicy | None = None
    unique_key: Callable[..., str | None] | None = None
    keep_result: bool = False
    retry_on: tuple[type[BaseException], ...] | None = None
    discard_on: tuple[type[BaseException], ...] = ()
    timeout: float | None = None
    # the django.tasks backend alias of a task (``task_rows.TaskDefinition``); "" for @job
    task_backend: str = ""
    unique_scope: str | None = None  # these three: see ``uniqueness``
    debounce: bool | str | None = None
    throttle: float | None = None
    cron: Cron | None = None  # a recurring job: ``@job(cron="*/5 * * * *")`` (cron.py)
    version: int = 1  # of its payload, with the steps from older ones (``versions``)
    upgrade: dict | None = dataclasses.field(default=None, hash=False, compare=False)
    concurrency_limit: int | None = None  # flow control (``flow``)
    rate_limit: str | None = None

    def __post_init__(self) -> None:
        if self.queue is not None:
            check_queue(self.queue)
        check_priority(self.priority)
        if self.max_attempts is not None:
            check_max_attempts(self.max_attempts)
        if self.lease_seconds is not None:
            check_positive_seconds("lease_seconds", self.lease_seconds)
        if self.atomic is not None and not isinstance(self.atomic, bool):
            raise ValueError(f"atomic must be True or False, not {self.atomic!r}")
        if self.atomic and self.is_async:
            raise ValueError(
                f"{self.name}: atomic=True is not available for async def jobs: their ORM calls "
                "run on another thread than the one that would hold the transaction, so the job's "
                "writes and its completion cannot commit together. Drop atomic=True, or make it "
                "a plain def job."
            )
        if self.timeout is not None:
            check_positive_seconds("timeout", self.timeout)
        check_flow_limits(self.concurrency_limit, self.rate_limit)
        if self.retry is not None and not isinstance(self.retry, RetryPolicy):
            raise ValueError("retry must be a django_pgjobs.RetryPolicy")
        if self.unique_key is not None and not callable(self.unique_key):
            raise ValueError("unique_key of @job must be a callable taking the job's arguments")
        check_name(self.name)
        object.__setattr__(self, "upgrade", check_versions(self.name, self.version, self.upgrade))
        self.unique_rules  # noqa: B018 (checks them)
        if not isinstance(self.keep_result, bool):
            raise ValueError(f"keep_result must be True or False, not {self.keep_result!r}")
        # frozen: the normalised tuples replace what was given
        object.__setattr__(self, "retry_on", check_exception_classes("retry_on", self.retry_on))
        object.__setattr__(
            self, "discard_on", check_exception_classes("discard_on", self.discard_on) or ()
        )
        if self.cron is not None:
            object.__setattr__(self, "cron", Cron.of(self.cron))
            self.check_arguments(list(self.cron.args), self.cron.kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def run(self, args: list, kwargs: dict) -> Any:
        """Call a plain ``def`` job's function as a worker does: a coroutine or generator
        returned instead of the work done raises ``AsyncJobsNotSupported`` (a failed attempt,
        never a success)."""
        return check_ran(self.func(*args, **kwargs), self.name)

    @functools.cached_property
    def is_async(self) -> bool:
        """An ``async def`` job: the worker awaits it on its event loop."""
        return is_async_callable(self.func)

    # Everything below reads settings when called (definitions are created at import time,
    # settings may change in tests); get_config() is cached.

    def get_queue(self) -> str:
        return self.queue or get_config().DEFAULT_QUEUE

    def get_max_attempts(self) -> int:
        return self.max_attempts or get_config().DEFAULT_MAX_ATTEMPTS

    def is_atomic(self) -> bool:
        if self.is_async:
            return False  # DEFAULT_ATOMIC does not apply to async jobs (see __post_init__)
        return get_config().DEFAULT_ATOMIC if self.atomic is None else self.atomic

    def get_timeout(self) -> float | None:
        """Seconds a call may run: ``@job(timeout=...)``, else
        ``PGJOBS["DEFAULT_TIMEOUT_SECONDS"]``; None: no limit. (A worker reads a per-call
        ``.using(timeout=...)`` from the job's row first.)"""
        if self.timeout is not None:
            return self.timeout
        return get_config().DEFAULT_TIMEOUT_SECONDS

    def get_lease_seconds(self) -> float:
        return self.lease_seconds or get_config().LEASE_SECONDS

    def get_retry(self) -> RetryPolicy:
        return self.retry or RetryPolicy.from_settings()

    def using(self, **options: Any) -> JobWithOptions[P, R]:
        """This job with per-call options (the ``django.tasks`` idiom): ``queue``, ``priority``,
        ``run_after``, ``delay``, ``unique_key``, ``max_attempts``, ``keep_result``,
        ``timeout``, ``unique_scope``, ``debounce``, ``throttle``, ``concurrency_key``,
        ``fairness_key`` (see ``CallOptions``)."""
        return JobWithOptions(self, CallOptions(**options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert one job on the jobs database's connection; returns the saved ``Job``."""
        return _enqueue(self, NO_OPTIONS, args, kwargs)

    def get_result(self, job_id: int, *, using: str | None = None) -> JobResult[R]:
        """``django_pgjobs.get_result(job_id)``, its ``return_value`` typed as this job's
        function returns (an ``async def`` job's: the coroutine's type, so ``Any`` is safer
        there). ``ValueError`` when the job ``job_id`` is another job."""
        from .results import get_result

        result = get_result(job_id, using=using)
        if result.name != self.name:
            raise ValueError(f"job #{job_id} is a {result.name}, not a {self.name}")
        return result

    def enqueue_many(self, calls: Iterable[Any]):
        """Insert one job per ``(args, kwargs)`` pair (or ``args`` tuple) in one statement."""
        return _enqueue_many(self, NO_OPTIONS, calls)

    def s(self, *args: Any, **kwargs: Any):
        """A step of a workflow (``django_pgjobs.chain`` / ``group``): this job with these
        arguments."""
        from .workflows import Step

        return Step(self, NO_OPTIONS, args, kwargs)

    def check_arguments(self, args: Any, kwargs: Any) -> None:
        """Raise ``TypeError`` when ``args``/``kwargs`` cannot be passed to the function."""
        for value in (args, kwargs):
            if isinstance(value, Undecodable):
                raise TypeError(value.reason)
        if not isinstance(args, list):
            raise TypeError(f"args must be a JSON array, not {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise TypeError(f"kwargs must be a JSON object, not {type(kwargs).__name__}")
        # Whether arguments bind depends only on how many positional ones there are and which
        # names: the worker checks every claimed job, so shapes that fit are remembered.
        shape = (len(args), frozenset(kwargs))
        if shape not in self._fitting_shapes:
            self._signature.bind(*args, **kwargs)
            self._fitting_shapes.add(shape)

    @functools.cached_property
    def _signature(self) -> inspect.Signature:
        return inspect.signature(self.func)

    @functools.cached_property
    def _fitting_shapes(self) -> set[tuple[int, frozenset[str]]]:
        return set()


@dataclasses.dataclass(frozen=True)
class JobWithOptions(CeleryCalls[P, R]):
    """What ``<job>.using(...)`` returns: the job with options for the calls made through it.
    Calling it calls the function directly; ``delay()`` and ``apply_async()`` enqueue with these
    options (``apply_async``'s own go on top)."""

    definition: JobDefinition[P, R]
    options: CallOptions

    @property
    def name(self) -> str:
        return self.definition.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.definition.func(*args, **kwargs)

    def using(self, **options: Any) -> JobWithOptions[P, R]:
        """These options with more on top (see ``CallOptions.then``)."""
        return JobWithOptions(self.definition, self.options.then(CallOptions(**options)))

    def get_timeout(self) -> float | None:
        """Seconds a call may run: ``.using(timeout=...)``, else the job's."""
        if self.options.timeout is not None:
            return self.options.timeout
        return self.definition.get_timeout()

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert one job with these options; returns the saved ``Job``."""
        return _enqueue(self.definition, self.options, args, kwargs)

    def enqueue_many(self, calls: Iterable[Any]):
        """Insert one job per call with these options, in one statement."""
        return _enqueue_many(self.definition, self.options, calls)

    def s(self, *args: Any, **kwargs: Any):
        """A step of a workflow with these options and arguments."""
        from .workflows import Step

        return Step(self.definition, self.options, args, kwargs)


# enqueueing is imported when called: job modules may load before the app registry, and
# enqueueing needs the models.


def _enqueue(
    definition: JobDefinition[..., Any], options: CallOptions, args: tuple, kwargs: dict
) -> Job:
    require_installed(f"enqueueing {definition.name}")
    from .enqueueing import enqueue_call

    return enqueue_call(definition, options, args, kwargs)


def _enqueue_many(
    definition: JobDefinition[..., Any], options: CallOptions, calls: Iterable[Any]
) -> list[Job]:
    require_installed(f"enqueueing {definition.name}")
    from .enqueueing import enqueue_many

    return enqueue_many(definition, options, calls)


#: The options of ``@job(...)``: a definition's fields but the function and a task's backend.
JOB_OPTIONS = frozenset(
    field.name
    for field in dataclasses.fields(JobDefinition)
    if field.name not in ("func", "task_backend")
)


@overload
def job(func: Callable[P, R], /) -> JobDefinition[P, R]: ...
@overload
def job(
    func: None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    atomic: bool | None = None,
    lease_seconds: float | None = None,
    retry: RetryPolicy | None = None,
    unique_key: Callable[..., str | None] | None = None,
    keep_result: bool = False,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None = None,
    discard_on: type[BaseException] | tuple[type[BaseException], ...] = (),
    timeout: float | None = None,
    unique_scope: str | None = None,
    debounce: bool | str | None = None,
    throttle: float | None = None,
    cron: str | Cron | None = None,
    version: int = 1,
    upgrade: dict | None = None,
    concurrency_limit: int | None = None,
    rate_limit: str | None = None,
) -> Callable[[Callable[P, R]], JobDefinition[P, R]]: ...
def job(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a function as a job; usable bare (``@job``) or with options (``@job(...)``).

    Options: ``name`` (default ``module.qualname``), ``queue`` (default
    ``PGJOBS["DEFAULT_QUEUE"]``), ``priority`` (-100..100, higher first), ``max_attempts``,
    ``atomic`` (run handler and completion in one transaction), ``lease_seconds``, ``retry``
    (a ``RetryPolicy``), ``unique_key`` (callable of the job's arguments returning a key; with
    ``unique_scope``, ``debounce`` and ``throttle``: docs/howto/unique.md),
    ``keep_result`` (keep the JSON return value, read with ``get_result``), ``retry_on`` (only
    these exception classes are retried; others dead-letter at once), ``discard_on`` (these
    dead-letter at once), ``timeout`` (seconds a call may run before it counts as a failed
    attempt, ``JobTimeout``), ``cron`` (recurring: a cron expression or a ``Cron``),
    ``version`` and ``upgrade`` (payload versions: ``versions``), ``concurrency_limit`` and
    ``rate_limit`` (flow control: docs/howto/flow-control.md). Async jobs are awaited by the
    worker (no ``atomic=True``); generator functions are refused.
    """

    unknown = sorted(set(options) - JOB_OPTIONS)
    if unknown:
        raise TypeError(f"@job() got unknown option(s) {', '.join(unknown)}")

    def register(f: Callable[..., Any]) -> JobDefinition[..., Any]:
        if isinstance(f, JobDefinition):
            raise TypeError("@job applied twice")
        if not callable(f):
            raise TypeError(f"@job needs a function, not {type(f).__name__}")
        job_name = options.get("name") or module_level_name(f)
        require_installed(f"@job {job_name}")
        check_runs_when_called(f, job_name)
        definition = JobDefinition(
            func=f,
            **{
                **options,
                "name": job_name,
                "retry_on": check_exception_classes("retry_on", options.get("retry_on")),
                "discard_on": check_exception_classes("discard_on", options.get("discard_on"))
                or (),
            },
        )
        _add(definition)
        return definition

    return register if func is None else register(func)


def queues_in_use(connection) -> set[str]:
    """Every queue a registered job uses, or a job, dead letter, pause or recent statistic
    names: what a worker's ``--queue`` or a worker row is checked against."""
    from .operations import queue_names

    return {definition.get_queue() for definition in registered().values()} | set(
        queue_names(connection)
    )


def _add(definition: JobDefinition) -> None:
    existing = _REGISTRY.get(definition.name)
    if existing is not None and not _same_function(existing.func, definition.func):
        raise JobAlreadyRegistered(
            f"job name {definition.name!r} is already registered to {existing.func!r}"
        )
    _REGISTRY[definition.name] = definition
    remember_limits(definition)  # for a requeue whose flow key was pruned


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. reloaded) registers an equal function object again.
    return (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None),
        getattr(b, "__qualname__", None),
    )


def get(name: str) -> JobDefinition:
    """The registered definition for ``name``; ``UnknownJobError`` if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownJobError(
            f"{name!r} is not a registered job. Jobs are registered with @django_pgjobs.job in "
            "a 'jobs' module of an installed app or a module listed in PGJOBS['JOB_MODULES']."
        ) from None


def resolve(
    job_or_name: JobDefinition | JobWithOptions | str | Callable[..., Any],
) -> JobDefinition | JobWithOptions:
    """A job given by its definition (as ``@job`` returned it, or with ``.using()`` options) or
    by its registered name."""
    if isinstance(job_or_name, (JobDefinition, JobWithOptions)):
        return job_or_name
    if isinstance(job_or_name, str):
        return get(job_or_name)
    raise UnknownJobError(
        f"{job_or_name!r} is not a job: decorate it with @django_pgjobs.job or pass its "
        "registered name"
    )


def registered() -> dict[str, JobDefinition]:
    return dict(_REGISTRY)


def autodiscover() -> None:
    """Import every installed app's ``jobs`` module and ``PGJOBS['JOB_MODULES']``."""
    autodiscover_modules("jobs")
    try:
        modules = get_config().JOB_MODULES
    except ConfigError:
        return  # reported by the pgjobs.E002 system check
    for module in modules:
        import_module(module)
