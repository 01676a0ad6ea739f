"""What ``@job`` accepts as a job function (and the name it gets by default), and how a plain ``def`` job's call is checked: a
function whose call returns before its body ran (a generator, an un-awaited coroutine) would be
counted as done without running. Used by ``registry`` (and re-exported there)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any


class AsyncJobsNotSupported(TypeError):
    """A generator or async generator function given to ``@job``, or a plain ``def`` job whose
    call returned a coroutine, awaitable or generator instead of running its work."""


# Dead letters name it by its module: the name stored before it moved here is kept.
AsyncJobsNotSupported.__module__ = "django_pgjobs.registry"


def is_async_callable(func: Callable[..., Any]) -> bool:
    """True for an ``async def`` function (also behind ``functools.partial``) or an object whose
    ``__call__`` is one: the worker awaits those on its event loop."""
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.iscoroutinefunction(func):
        return True
    return not inspect.isroutine(func) and inspect.iscoroutinefunction(type(func).__call__)


def check_runs_when_called(func: Callable[..., Any], name: str) -> None:
    """Refuse functions whose call returns before their body ran (generators).

    A worker calls a job and counts the return as done: a generator function would return an
    unstarted generator, an async generator function an unstarted async generator, both without
    running a line. ``async def`` functions are accepted: the worker awaits them.
    """
    candidates = [func]
    if not inspect.isroutine(func) and not isinstance(func, functools.partial):
        candidates.append(type(func).__call__)  # an instance whose __call__ is one
    for candidate in candidates:
        while isinstance(candidate, functools.partial):
            candidate = candidate.func
        if inspect.isasyncgenfunction(candidate):
            raise AsyncJobsNotSupported(
                f"{name} is an async generator function: calling it runs nothing until "
                "iterated, so a worker would count it as done without running it. Make it an "
                "async def that consumes the generator (async for ...)."
            )
        if inspect.isgeneratorfunction(candidate):
            raise AsyncJobsNotSupported(
                f"{name} is a generator function: calling it runs nothing until iterated, so a "
                "worker would count it as done without running it. Make it a plain def (e.g. "
                "consume the generator inside it)."
            )


def check_ran(result: Any, name: str) -> Any:
    """Raise when a plain ``def`` job's call returned work still to be done instead of doing
    it."""
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        result.close()  # nothing will run it: no "was never awaited" warning
    elif inspect.isasyncgen(result):
        pass  # aclose() is itself a coroutine; an unstarted async generator holds nothing
    elif not inspect.isawaitable(result):
        return result
    kind = type(result).__name__
    raise AsyncJobsNotSupported(
        f"{name} returned a {kind} instead of running: it is a plain def, so the worker does "
        "not await what it returns and its body did not run. Make it an async def (the worker "
        "awaits it) or await the async code inside it."
    )


def module_level_name(f: Callable[..., Any]) -> str:
    """``module.qualname`` of a function a worker can find; ``ValueError`` otherwise."""
    job_name = f"{f.__module__}.{f.__qualname__}"
    if "<locals>" in job_name:
        raise ValueError(
            f"{job_name}: jobs must be module-level functions (or pass name=...) so a worker "
            "can find them"
        )
    return job_name
