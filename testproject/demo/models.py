from django.db import models


class Signup(models.Model):
    """A row the demo view creates together with its welcome-email job."""

    email = models.EmailField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    welcomed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.email


class Execution(models.Model):
    """One row per execution of a test job. No unique constraint on purpose: the tests count
    rows per job to prove a job ran exactly once (or how many times it ran)."""

    job_id = models.BigIntegerField(db_index=True)
    attempt = models.IntegerField(default=0)
    label = models.CharField(max_length=200, blank=True, default="")
    pid = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.label} (job #{self.job_id}, attempt {self.attempt})"


class Counter(models.Model):
    """Written by atomic jobs: the tests check their writes happen exactly once."""

    name = models.CharField(max_length=100, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"
