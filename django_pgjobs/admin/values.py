"""JSON columns as the admin shows them: read as PostgreSQL's text, bounded, redacted.

A job's arguments or result can weigh megabytes, and a row written by hand can hold any JSON
at all: a number of 5,000 digits or an array nested 3,000 deep, which Python's ``json`` refuses
(and with it the ORM, failing the page). So the detail pages never load these columns through
the ORM: they read ``left(column::text, PREVIEW_CHARS)`` and ``octet_length(column::text)``
(``preview_annotations``), pretty-print a value that fits, show the head of one that does not
with how many bytes are left, and link to a view that returns the whole value as JSON.

Redaction (``PGJOBS["REDACT_KEYS"]``) applies to all of it: a head in which no redacted key
appears is shown as it is (``redaction.may_redact``); otherwise the value is read whole,
redacted, and cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import Func, TextField
from django.db.models.functions import Cast
from django.utils.html import format_html
from django.utils.translation import gettext as _

from .. import redaction

#: Characters of a long value shown on its detail page (about 4 KB of JSON).
PREVIEW_CHARS = 4096
UNREADABLE = object()


def not_shown() -> str:
    """Why a value is not shown, in the current language."""
    return _("(not shown: keys to redact may be inside, and the value cannot be read)")


def stored_text(column: str) -> Cast:
    """``column::text``: PostgreSQL's JSON text, which Python gets as a plain string."""
    return Cast(column, TextField())


class HeadAndSize(Func):
    """``[left(column::text, PREVIEW_CHARS), octet_length(column::text)]`` as JSON text. The
    column is printed once (a megabyte takes milliseconds to print): ``OFFSET 0`` keeps
    PostgreSQL from inlining the subquery, which would print it once per use."""

    template = (
        "(SELECT json_build_array(left(stored.text, %(chars)d), octet_length(stored.text))::text "
        "FROM (SELECT %(expressions)s::text AS text OFFSET 0) AS stored)"
    )
    output_field = TextField()

    def __init__(self, column: str) -> None:
        super().__init__(column, chars=PREVIEW_CHARS)


#: Errors a detail page shows of a row's ``errors`` history: the newest ones.
ERRORS_SHOWN = 20
#: Characters shown of an error's traceback: all of a shorter one, else its head and its tail
#: (the innermost frames and the exception), with how many characters are left out between.
TRACEBACK_HEAD_CHARS = 2_000
TRACEBACK_TAIL_CHARS = 6_000
#: Characters shown of an error's message, and of each of its other fields.
MESSAGE_CHARS = 2_000
FIELD_CHARS = 200


class NewestErrors(Func):
    """``[count, entries]`` as JSON text: how many errors a row's ``errors`` column holds, and
    its newest ``ERRORS_SHOWN`` (oldest first), cut in PostgreSQL so that a history of tens of
    megabytes never leaves the database.

    Each entry is an object of text: ``at``, ``attempt``, ``type``, ``worker`` (at most
    ``FIELD_CHARS + 1`` characters), ``message`` (``MESSAGE_CHARS + 1``: one more than shown
    tells that it goes on), ``traceback`` (whole up to ``TRACEBACK_HEAD_CHARS +
    TRACEBACK_TAIL_CHARS`` characters, else its head), ``traceback_end`` (the tail of a cut one)
    and ``traceback_cut`` (characters left out between them). A value that is not text is its
    JSON text (a row written by hand); an item that is not an object is an entry of its
    ``message`` alone; a column that is not a list is one entry, or none when it is ``null``.

    ``#> '{}'`` in a subquery that ``OFFSET 0`` keeps apart decompresses the column once; each
    function reading the column itself would decompress it again (half a second for 40 MB).
    """

    template = (
        "(SELECT json_build_array("
        "CASE jsonb_typeof(whole.value) WHEN 'array' THEN jsonb_array_length(whole.value) "
        "WHEN 'null' THEN 0 ELSE 1 END, "
        "(SELECT coalesce(json_agg(CASE WHEN jsonb_typeof(newest.entry) = 'object' "
        "THEN json_build_object("
        "'at', left(newest.entry ->> 'at', %(other)d), "
        "'attempt', left(newest.entry ->> 'attempt', %(other)d), "
        "'type', left(newest.entry ->> 'type', %(other)d), "
        "'worker', left(newest.entry ->> 'worker', %(other)d), "
        "'message', left(newest.entry ->> 'message', %(message)d), "
        "'traceback', CASE WHEN length(field.traceback) > %(shown)d "
        "THEN left(field.traceback, %(head)d) ELSE field.traceback END, "
        "'traceback_end', CASE WHEN length(field.traceback) > %(shown)d "
        "THEN right(field.traceback, %(tail)d) END, "
        "'traceback_cut', greatest(length(field.traceback) - %(shown)d, 0)) "
        "ELSE json_build_object('message', left(newest.entry #>> '{}', %(message)d)) END "
        "ORDER BY newest.position), '[]') "
        "FROM jsonb_path_query(whole.value, '$[last - %(back)d to last]') "
        "WITH ORDINALITY AS newest(entry, position) "
        "CROSS JOIN LATERAL (SELECT newest.entry ->> 'traceback' AS traceback) AS field "
        "WHERE jsonb_typeof(whole.value) <> 'null'))::text "
        "FROM (SELECT %(expressions)s #> '{}' AS value OFFSET 0) AS whole)"
    )
    output_field = TextField()

    def __init__(self, column: str) -> None:
        super().__init__(
            column,
            back=ERRORS_SHOWN - 1,  # lax mode: a column that is no list is a list of itself
            other=FIELD_CHARS + 1,
            message=MESSAGE_CHARS + 1,
            shown=TRACEBACK_HEAD_CHARS + TRACEBACK_TAIL_CHARS,
            head=TRACEBACK_HEAD_CHARS,
            tail=TRACEBACK_TAIL_CHARS,
        )


class LastError(Func):
    """``[type, message]`` of the last entry of a row's ``errors`` column as JSON text, the
    message cut to ``chars`` characters (a list's column). The column is decompressed once for
    both, as in ``NewestErrors``."""

    template = (
        "(SELECT json_build_array(last.entry ->> 'type', left(last.entry ->> 'message', "
        "%(chars)d))::text FROM (SELECT %(expressions)s -> -1 AS entry OFFSET 0) AS last)"
    )
    output_field = TextField()

    def __init__(self, column: str, chars: int) -> None:
        super().__init__(column, chars=chars)


def preview_annotations(columns) -> dict[str, Any]:
    """Annotations giving each JSON column's head and size in bytes (``<column>_preview``:
    JSON text of ``[head, bytes]``, both null for SQL NULL), for ``Preview.of``."""
    return {f"{column}_preview": HeadAndSize(column) for column in columns}


def loads(text: str | None) -> Any:
    """The JSON value of ``text``, or ``UNREADABLE`` when Python cannot read it (an integer past
    ``sys.get_int_max_str_digits()``, nesting past the recursion limit)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return UNREADABLE


def compact(value: Any, limit: int = 200) -> str:
    """A short one-line text of any value (a string as it is), for table cells."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str | None:
    """``value`` indented, keys sorted; None when it nests too deep to print."""
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except (RecursionError, ValueError):
        return None


@dataclass(frozen=True)
class Preview:
    """What a detail page shows of one JSON column."""

    text: str
    more_bytes: int = 0  # bytes of the value not shown
    total_bytes: int = 0

    @classmethod
    def of(
        cls,
        head: str | None,
        total_bytes: int | None,
        *,
        redact: Callable[[Any], Any],
        needs_redaction: Callable[[str], bool],
        whole_text: Callable[[], str | None],
    ) -> Preview:
        """The preview of a column whose first ``PREVIEW_CHARS`` characters are ``head`` and
        whose text weighs ``total_bytes``. ``redact`` redacts a value, ``needs_redaction``
        tells whether a text may hold something to redact, ``whole_text`` reads the column
        whole (only called when the head must be redacted and is not the whole value)."""
        if head is None:
            return cls(_("(none: SQL NULL)"))
        head_bytes = len(head.encode())
        if head_bytes >= (total_bytes or 0):
            return cls._whole(head, redact, needs_redaction)
        if not needs_redaction(head):
            return cls(head, total_bytes - head_bytes, total_bytes)
        value = loads(whole_text())
        if value is UNREADABLE:
            return cls(not_shown())
        shown = json.dumps(redact(value), ensure_ascii=False)  # PostgreSQL's separators
        shown_bytes = len(shown.encode())
        cut = shown[:PREVIEW_CHARS]
        return cls(cut, shown_bytes - len(cut.encode()), shown_bytes)

    @classmethod
    def _whole(cls, text: str, redact, needs_redaction) -> Preview:
        value = loads(text)
        if value is not UNREADABLE:
            shown = pretty(redact(value))
            if shown is not None:
                return cls(shown)
        if needs_redaction(text):
            return cls(not_shown())
        return cls(text)  # as PostgreSQL prints it

    def html(self, whole_url: str) -> str:
        if not self.more_bytes:
            return format_html('<pre class="pgjobs-pre">{}</pre>', self.text)
        return format_html(
            '<pre class="pgjobs-pre">{}…</pre><p class="pgjobs-more">{}</p>',
            self.text,
            format_html(
                _(
                    "{} more bytes not shown (the first {} characters of {} bytes). "
                    '<a href="{}">Open the whole value</a> (JSON).'
                ),
                f"{self.more_bytes:,}",
                f"{len(self.text):,}",
                f"{self.total_bytes:,}",
                whole_url,
            ),
        )


def redactor(column: str, name: str) -> tuple[Callable[[Any], Any], Callable[[str], bool]]:
    """(redact, needs_redaction) for a column of the job ``name``: positional arguments are
    redacted by their parameter's name, keyword arguments and results by key."""
    if column == "args":
        return (
            lambda value: redaction.redact_job_call(name, value, {})[0],
            lambda text: redaction.may_redact(text, name),
        )
    if column == "kwargs":
        return (
            lambda value: redaction.redact_job_call(name, [], value)[1],
            lambda text: redaction.may_redact(text, name),
        )
    return redaction.redact_value, redaction.may_redact


def whole_value_text(stored: str | None, column: str, name: str) -> str:
    """The whole value of a column as the full-value view returns it: the stored text when
    nothing in it is redacted, else the value redacted (``null`` for SQL NULL)."""
    if stored is None:
        return "null"
    redact, needs_redaction = redactor(column, name)
    if not needs_redaction(stored):
        return stored
    value = loads(stored)
    if value is UNREADABLE:
        raise ValueError("the value cannot be read to redact it")
    return json.dumps(redact(value), ensure_ascii=False)
