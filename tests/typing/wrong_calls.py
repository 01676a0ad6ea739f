# Calls that type checkers refuse (tests/test_typing.py): each line marked "wrong" is an error.
from testproject.handlers.developing import resize_image

resize_image.enqueue("42", 640)  # wrong: image_id is an int
resize_image.delay(42)  # wrong: width is missing
resize_image.using(queue="thumbnails").enqueue(42, 640, keep_ratio="yes")  # wrong: a str
resize_image.enqueue(42, 640, size=3)  # wrong: no such parameter
width: str = resize_image.get_result(1).return_value  # wrong: dict[str, int] | None
