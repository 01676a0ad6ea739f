"""The deploy files of deploy/ (shown on docs/howto/deploy.md) work as they are.

The systemd units pass ``systemd-analyze verify`` without a warning; the commands they run are
commands ``runjobs`` accepts; each stop timeout is longer than the ``--shutdown-grace`` it
follows; the Kubernetes probes answer "no" without a worker and "yes" once one runs, with real
``manage.py`` processes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from helpers import MANAGE, ROOT, database_url_for_tests, wait_until

from django_pgjobs.management.commands.runjobs import Command as RunJobs

DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "pgjobs-worker@.service"
TARGET = DEPLOY / "pgjobs-workers.target"
KUBERNETES = DEPLOY / "kubernetes.yaml"
DOCS = ROOT / "docs" / "howto" / "deploy.md"
INSTALL_DIR = "/srv/app"  # where the unit expects the project; replaced by a real one to verify


def unit_settings(text: str) -> dict[str, str]:
    """``Key=value`` lines of a unit file (the last one of a key wins, as in systemd)."""
    settings = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings


def runjobs_options(argv: list[str]):
    """``argv`` after ``manage.py runjobs``, parsed by runjobs's own parser (exits on an error)."""
    assert argv[:2] == ["manage.py", "runjobs"], argv
    return RunJobs().create_parser("manage.py", "runjobs").parse_args(argv[2:])


def worker_container() -> dict:
    deployment = yaml.safe_load(KUBERNETES.read_text())
    assert deployment["kind"] == "Deployment"
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, container


@pytest.mark.parametrize("path", [UNIT, TARGET, KUBERNETES], ids=lambda path: path.name)
def test_the_docs_show_each_file_as_it_is(path):
    assert path.read_text().strip() in DOCS.read_text(), f"{DOCS.name} does not show {path.name}"


def test_systemd_accepts_the_units_without_a_warning(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (it comes with systemd)")
    app = tmp_path / "app"
    (app / ".venv" / "bin").mkdir(parents=True)
    (app / ".venv" / "bin" / "python").symlink_to(sys.executable)
    for source in (UNIT, TARGET):
        text = source.read_text().replace(INSTALL_DIR, str(app))
        (tmp_path / source.name).write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", UNIT.name, TARGET.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify exits 0 on a value it ignores ("45  # comment"): its warnings count as failures
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_the_unit_runs_runjobs_and_waits_longer_than_its_grace():
    settings = unit_settings(UNIT.read_text())
    command = shlex.split(settings["ExecStart"])
    assert command[0] == f"{INSTALL_DIR}/.venv/bin/python"
    options = runjobs_options(command[1:])
    assert settings["KillSignal"] == "SIGTERM"
    assert float(settings["TimeoutStopSec"]) > options.shutdown_grace
    assert "%i" in settings.get("Description", ""), "the template names its instance"


def test_the_deployment_runs_runjobs_and_waits_longer_than_its_grace():
    deployment, container = worker_container()
    options = runjobs_options(container["command"][1:])
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > options.shutdown_grace
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"][:3] == ["python", "manage.py", "shell"]


def run_probe(command: list[str]) -> subprocess.CompletedProcess:
    environment = {**os.environ, "DATABASE_URL": database_url_for_tests()}
    return subprocess.run(
        [sys.executable, str(MANAGE), *command[2:]],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db(transaction=True)
def test_the_probes_answer_no_without_a_worker_and_yes_with_one(start_worker):
    _, container = worker_container()
    probes = {
        container[name]["exec"]["command"][-1] for name in ("readinessProbe", "livenessProbe")
    }
    [probe] = probes  # the same question for both, with different patience
    command = container["livenessProbe"]["exec"]["command"]
    assert re.search(r"seconds=\d+", probe)
    refused = run_probe(command)
    assert refused.returncode == 1, refused.stderr
    worker = start_worker("--queue", "probe-only")
    wait_until(lambda: run_probe(command).returncode == 0, timeout=60, interval=1)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
