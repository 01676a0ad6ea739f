"""The deploy files of deploy/ (shown on docs/howto/deploy.md) work as they are.

The systemd units pass ``systemd-analyze verify`` without a warning; the commands they run are
commands ``runjobs`` accepts; each stop timeout is longer than the ``--shutdown-grace`` it
follows; the Kubernetes probes answer "no" without a worker, "yes" once one runs (a real ``runjobs``
touching its liveness file) and "no" again when the file grows stale.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from helpers import ROOT, wait_until

from django_pgjobs.management.commands.runjobs import Command as RunJobs

DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "pgjobs-worker@.service"
TARGET = DEPLOY / "pgjobs-workers.target"
CHECK = DEPLOY / "pgjobs-worker-check@.service"
CHECK_TIMER = DEPLOY / "pgjobs-worker-check@.timer"
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


@pytest.mark.parametrize(
    "path", [UNIT, TARGET, CHECK, CHECK_TIMER, KUBERNETES], ids=lambda path: path.name
)
def test_the_docs_show_each_file_as_it_is(path):
    assert path.read_text().strip() in DOCS.read_text(), f"{DOCS.name} does not show {path.name}"


def test_systemd_accepts_the_units_without_a_warning(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (it comes with systemd)")
    app = tmp_path / "app"
    (app / ".venv" / "bin").mkdir(parents=True)
    (app / ".venv" / "bin" / "python").symlink_to(sys.executable)
    units = (UNIT, TARGET, CHECK, CHECK_TIMER)
    for source in units:
        text = source.read_text().replace(INSTALL_DIR, str(app))
        (tmp_path / source.name).write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(unit.name for unit in units)],
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


def test_the_check_restarts_a_worker_whose_liveness_file_is_stale_only(tmp_path):
    worker = unit_settings(UNIT.read_text())
    path = runjobs_options(shlex.split(worker["ExecStart"])[1:]).liveness_file
    assert path == f"/run/{worker['RuntimeDirectory']}/alive"
    command = shlex.split(unit_settings(CHECK.read_text())["ExecStart"])
    alive = tmp_path / "alive"
    script = (
        command[-1]
        .replace(path, str(alive))
        .replace("systemctl restart pgjobs-worker@%i.service", "echo restart")
    )
    assert command[:2] == ["/bin/sh", "-c"] and "%i" not in script

    def check() -> str:
        result = subprocess.run(command[:2] + [script], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    assert check() == ""  # no file yet: a worker still starting
    alive.touch()
    assert check() == ""
    stale = time.time() - 61
    os.utime(alive, (stale, stale))
    assert check() == "restart"


def test_the_deployment_runs_runjobs_and_waits_longer_than_its_grace():
    deployment, container = worker_container()
    options = runjobs_options(container["command"][1:])
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > options.shutdown_grace
    assert options.liveness_file
    for probe in ("readinessProbe", "livenessProbe"):
        command = container[probe]["exec"]["command"]
        assert command[:2] == ["python", "-c"] and options.liveness_file in command[-1]


def run_probe(command: list[str]) -> subprocess.CompletedProcess:
    """The probe's ``python -c`` as the container runs it (no Django, no database)."""
    return subprocess.run(
        [sys.executable, *command[1:]], capture_output=True, text=True, timeout=60
    )


@pytest.mark.django_db(transaction=True)
def test_the_probes_answer_no_without_a_worker_and_yes_with_one(start_worker, tmp_path):
    _, container = worker_container()
    probes = {
        tuple(container[name]["exec"]["command"]) for name in ("readinessProbe", "livenessProbe")
    }
    [probe] = probes  # the same question for both, with different patience
    path = runjobs_options(container["command"][1:]).liveness_file
    seconds = int(re.search(r"> (\d+)\)", probe[-1]).group(1))
    alive = tmp_path / "pgjobs-alive"
    command = [part.replace(path, str(alive)) for part in probe]
    assert run_probe(command).returncode == 1  # no file: no worker
    worker = start_worker(
        "--queue", "probe-only", "--liveness-file", str(alive),
        env={"PGJOBS_HEARTBEAT_SECONDS": "1"},
    )  # fmt: skip
    wait_until(lambda: run_probe(command).returncode == 0, timeout=60, interval=0.5)
    # paused while the probe reads a stale file: under load the probe's interpreter can take
    # longer to start than the worker's next touch is away
    worker.signal(signal.SIGSTOP)
    stale = time.time() - seconds - 1
    os.utime(alive, (stale, stale))
    assert run_probe(command).returncode == 1
    worker.signal(signal.SIGCONT)
    # the worker's loop touches it again within a heartbeat
    wait_until(lambda: run_probe(command).returncode == 0, timeout=30, interval=0.2)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, worker.output()
