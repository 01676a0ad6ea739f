"""A publisher for tests/test_outbox_brokers.py: publishes to RabbitMQ for real, then stops
dead before the relay can mark the events published, for the test to SIGKILL it there."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django_pgjobs.outbox.publishers import RabbitMQPublisher


class HangAfterPublish(RabbitMQPublisher):
    def publish_batch(self, messages):
        outcomes = super().publish_batch(messages)  # confirmed by RabbitMQ
        Path(os.environ["PGJOBS_TEST_HANG_FILE"]).write_text(repr(outcomes))
        time.sleep(3600)  # killed here, between the confirms and the delete


hang_after_publish = HangAfterPublish(os.environ.get("PGJOBS_TEST_AMQP_URL", ""))
