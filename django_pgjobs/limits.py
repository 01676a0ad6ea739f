"""Bounds shared by validation, the models and the docs."""

PRIORITY_MIN = -100
PRIORITY_MAX = 100
QUEUE_NAME_MAX = 100
NAME_MAX = 255
UNIQUE_KEY_MAX = 255
MAX_ATTEMPTS_MAX = 1000
