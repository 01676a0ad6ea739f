"""docs/howto/developing.md: typed jobs, and a job that reports its progress. mypy checks this
module in CI (pyproject.toml, ``[tool.mypy]``); tests/test_typing.py shows it refusing wrong
calls."""

from __future__ import annotations

from django_pgjobs import job
from django_pgjobs.context import current_job


@job(queue="handlers", keep_result=True)
def resize_image(image_id: int, width: int, *, keep_ratio: bool = True) -> dict[str, int]:
    return {"image_id": image_id, "width": width, "keep_ratio": int(keep_ratio)}


def resize_for_the_gallery(image_id: int) -> list[int]:
    """Every spelling of a call, each checked against resize_image's parameters."""
    jobs = [
        resize_image.enqueue(image_id, 640),
        resize_image.delay(image_id, width=320, keep_ratio=False),
        resize_image.using(priority=10).enqueue(image_id, 1280),
    ]
    return [queued.pk for queued in jobs]


def width_of(job_id: int) -> int | None:
    """``return_value`` is typed as resize_image returns: ``dict[str, int] | None``."""
    result = resize_image.get_result(job_id)
    if result.return_value is None:
        return None
    return result.return_value["width"]


@job(queue="handlers", keep_result=True)
def import_rows(count: int) -> int:
    """Reports its progress at every row: written at most once a second, and at the last."""
    running = current_job()
    assert running is not None  # always, inside a job
    running.set_metadata(source="upload.csv", rows=count)
    for done in range(1, count + 1):
        ...  # import one row
        running.set_progress(done, count, note=f"row {done} of {count}")
    return count
