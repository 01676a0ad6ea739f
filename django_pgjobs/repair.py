"""Repairing dead letters: requeue one with edited arguments.

The edited arguments are checked exactly as ``enqueue()`` checks arguments, before anything is
written: JSON that reads back unchanged (``payload.dump_arguments``, within
``PGJOBS["MAX_PAYLOAD_BYTES"]``) and that binds to the job function's current signature
(``inspect.signature(...).bind``). Then one statement (``requeue_edited_dead_letter``) moves the
dead letter back as a new job linked to it (``replayed_from``), its audit trail (``repairs``)
holding who changed what, and records the edit in a row of its own (``models.Repair``): the
trail goes with the job when it succeeds, the record stays for the dead letters' retention.
See docs/howto/repair.md.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, NamedTuple

from django.db import transaction
from django.utils.translation import gettext as _

from . import db, flow, registry
from .conf import get_config
from .payload import dump_arguments
from .schedules import unique_key_of

#: Replay rates: from one job an hour to ``MAX_REPLAY_RATE`` a second.
MAX_REPLAY_RATE = 10_000.0
MIN_REPLAY_RATE = 1 / 3600
RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}  # seconds per unit


class Rate(NamedTuple):
    per_second: float
    text: str  # as the operator wrote it, tidied: "50/s", "300/m", "1000/h"


def parse_rate(text: str) -> Rate:
    """A staggered replay's rate: ``50`` or ``50/s`` a second, ``300/m`` a minute, ``1000/h``
    an hour (Celery's ``rate_limit`` syntax); ``ValueError`` saying why not."""
    number, slash, unit = text.strip().partition("/")
    unit = unit.strip() if slash else "s"
    try:
        count = float(number)
    except ValueError:
        count = float("nan")
    if unit not in RATE_UNITS or count != count:  # NaN: not a number
        raise ValueError(
            _(
                "the rate must be a number of jobs per second, minute or hour (50, 50/s, 300/m, "
                "1000/h), not %(text)s"
            )
            % {"text": repr(text)}
        )
    per_second = count / RATE_UNITS[unit]
    if not MIN_REPLAY_RATE <= per_second <= MAX_REPLAY_RATE:
        raise ValueError(
            _("the rate must be more than 0, from 1/h to %(max)s/s, not %(text)s")
            % {"max": f"{MAX_REPLAY_RATE:g}", "text": repr(text)}
        )
    return Rate(per_second, f"{count:g}/{unit}")


class EditRefused(ValueError):
    """Edited arguments that cannot be requeued; the message says why."""


class CheckedArguments(NamedTuple):
    args_json: str
    kwargs_json: str
    version: int  # the job's payload version now: the arguments fit its current signature


def parse_arguments(args_text: str, kwargs_text: str) -> tuple[list, dict]:
    """The arguments of an edit form: a JSON array and a JSON object."""
    values: list[Any] = []
    for label, text, kind in (("args", args_text, list), ("kwargs", kwargs_text, dict)):
        try:
            value = json.loads(text or ("[]" if kind is list else "{}"))
        except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
            raise EditRefused(
                _("%(field)s is not valid JSON: %(error)s") % {"field": label, "error": error}
            ) from None
        if not isinstance(value, kind):
            what = _("a JSON array [...]") if kind is list else _("a JSON object {...}")
            raise EditRefused(
                _("%(field)s must be %(what)s, not %(type)s")
                % {"field": label, "what": what, "type": type(value).__name__}
            )
        values.append(value)
    return values[0], values[1]


def check_arguments(name: str, args: list, kwargs: dict) -> CheckedArguments:
    """``args``/``kwargs`` as ``enqueue()`` would store them for the job ``name``, or
    ``EditRefused`` saying why they would not be."""
    try:
        definition = registry.get(name)
    except registry.UnknownJobError:
        raise EditRefused(
            _("no job is registered as %(name)s in this release") % {"name": repr(name)}
        ) from None
    try:
        inspect.signature(definition.func).bind(*args, **kwargs)
    except TypeError as error:
        raise EditRefused(
            _("arguments do not fit %(call)s: %(error)s")
            % {"call": f"{name}{_signature(definition)}", "error": error}
        ) from None
    try:
        args_json, kwargs_json = dump_arguments(args, kwargs, get_config().MAX_PAYLOAD_BYTES)
    except (TypeError, ValueError) as error:
        raise EditRefused(str(error)) from None
    return CheckedArguments(args_json, kwargs_json, definition.version)


def _new_unique_key(
    connection: Any, dead_letter_id: int, name: str, args: list, kwargs: dict
) -> tuple[bool, str | None]:
    """Whether the requeued job's unique key is computed anew, and that key: when the job's
    ``unique_key`` function gave the dead letter's arguments its key (not a key given at the
    call, ``.using(unique_key=...)``: that one is kept), the new arguments get theirs. Kept from
    the old arguments, an order edited from #7 to #8 held #7's key. ``EditRefused`` when the
    function fails on the new arguments."""
    from .models import DeadLetter

    definition = registry.get(name)
    if getattr(definition, "unique_key", None) is None:
        return False, None
    row = DeadLetter.objects.using(connection.alias).filter(pk=dead_letter_id)
    old = row.values("args", "kwargs", "unique_key", "waiting_key").first()
    if old is None or (old["unique_key"] or old["waiting_key"]) is None:
        return False, None
    try:
        from_function = unique_key_of(definition, old["args"], old["kwargs"])
    except Exception:  # noqa: BLE001 (not its key, then: kept)
        return False, None
    if from_function != (old["unique_key"] or old["waiting_key"]):
        return False, None
    try:
        return True, unique_key_of(definition, args, kwargs)
    except Exception as error:  # noqa: BLE001 (the project's function, on the operator's input)
        raise EditRefused(
            _("the job's unique_key function fails on these arguments: %(error)s")
            % {"error": f"{type(error).__name__}: {error}"}
        ) from None


def _signature(definition: registry.JobDefinition) -> str:
    """The parameters as written (annotations evaluated when they can be: modules with
    ``from __future__ import annotations`` hold them as strings)."""
    try:
        return str(inspect.signature(definition.func, eval_str=True))
    except Exception:  # noqa: BLE001 (an annotation that cannot be evaluated: shown as a string)
        return str(inspect.signature(definition.func))


def signature_of(name: str) -> str:
    """``name(parameters)`` of a registered job as it is now, or "" when none is registered."""
    try:
        return name + _signature(registry.get(name))
    except registry.UnknownJobError:
        return ""


def requeue_edited(
    connection: Any, dead_letter_id: int, name: str, args: list, kwargs: dict, *, by: str
) -> int | None:
    """Check the edited arguments (``EditRefused`` when they would not be enqueued), then requeue
    dead letter ``dead_letter_id`` (of the job ``name``) with them, the edit recorded in
    ``pgjobs_repair`` by the same statement; returns the new job's id, or None when the dead
    letter is gone or its unique key is held by a waiting or running job (nothing recorded)."""
    checked = check_arguments(name, args, kwargs)
    new_key, key = _new_unique_key(connection, dead_letter_id, name, args, kwargs)
    params = {
        "id": dead_letter_id,
        "name": name,
        "args": checked.args_json,
        "kwargs": checked.kwargs_json,
        "by": by,
        "version": checked.version,
        "new_key": new_key,
        "edited_key": key,
        **flow.requeued_key_limits(connection, [dead_letter_id]),
    }
    with transaction.atomic(using=connection.alias):  # its workflow first: see queries.sql
        db.execute(connection, "lock_dead_letter_workflows", {"ids": [dead_letter_id]})
        rows = db.execute(connection, "requeue_edited_dead_letter", params)
    return rows[0]["id"] if rows else None
