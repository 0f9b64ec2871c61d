"""Where no PBS is installed, the PBS tier is skipped, in one line that says what it needs and where it was
looked for (tests/pbs/testbed.py available: the one decision tests/run.sh, tests/envs.sh and the fixture
share), and nothing is built or installed for it; where one is, the testbed installs only the packages
it needs to run, and the job user. The machine's own PBS, if any, is never looked at (each test points
MPIRAYTEST_PBS_PREFIX or testbed.PBS_EXEC at a directory of its own), and apt-get, dpkg-query, useradd and id
are fakes that log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from pbs import testbed

TIMEOUT_S = 120
NEEDS = "the PBS tier needs an installed OpenPBS 23.06 or PBS Professional, looked for in"


def logging_fakes(bin_dir: Path, *names: str) -> Path:
    """Executables that only note that they ran (in bin_dir/ran), for what must not run without PBS."""
    bin_dir.mkdir()
    for name in names:
        fake = bin_dir / name
        fake.write_text(f'#!/bin/sh\necho "{name} $*" >> "{bin_dir}/ran"\n')
        fake.chmod(0o755)
    return bin_dir / "ran"


def without_pbs(prefix: Path, bin_dir: Path | None = None) -> dict[str, str]:
    env = {**os.environ, testbed.PREFIX_ENV: str(prefix)}
    if bin_dir is not None:
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def test_an_installed_pbs_is_known_by_the_files_the_testbed_runs(tmp_path):
    assert testbed.not_installed_reason(tmp_path) == (
        f"{NEEDS} {tmp_path} (MPIRAYTEST_PBS_PREFIX, default /opt/pbs): none there")
    for name in testbed.INSTALLED_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    assert testbed.not_installed_reason(tmp_path) is None
    (tmp_path / "sbin" / "pbs_mom").unlink()
    assert testbed.not_installed_reason(tmp_path).endswith(": it lacks sbin/pbs_mom")


def test_available_says_in_one_line_what_is_missing_and_where_it_looked(tmp_path):
    result = subprocess.run([sys.executable, "tests/pbs/testbed.py", "available"], cwd=ROOT, capture_output=True,
                            text=True, timeout=TIMEOUT_S, env=without_pbs(tmp_path / "pbs"))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"{NEEDS} {tmp_path / 'pbs'} (MPIRAYTEST_PBS_PREFIX, default /opt/pbs): none there"]


def test_the_pbs_environments_are_neither_built_nor_installed_for(tmp_path):
    ran = logging_fakes(tmp_path / "bin", "apt-get", "dpkg-query", "useradd", "pip")
    for name in ("pbs", "pbs-openmpi"):
        result = subprocess.run(["bash", "tests/envs.sh", name], cwd=ROOT, capture_output=True, text=True,
                                timeout=TIMEOUT_S, env=without_pbs(tmp_path / "pbs", tmp_path / "bin"))
        assert result.returncode == 0, result.stderr
        assert result.stderr.splitlines() == [f"tests/envs.sh: skipping {name}: {NEEDS} {tmp_path / 'pbs'} "
                                              f"(MPIRAYTEST_PBS_PREFIX, default /opt/pbs): none there"]
    assert not ran.exists(), ran.read_text()


def test_the_pbs_tests_skip_with_that_line(tmp_path):
    ran = logging_fakes(tmp_path / "bin", "apt-get", "useradd", "runuser", "ip", "unshare")
    result = subprocess.run([sys.executable, "-m", "pytest", "-m", "pbs", "-rs", "-q", "-p", "no:cacheprovider",
                             "tests/real/pbs/test_pbs_testbed.py::test_three_moms_are_free_and_each_is_a_host_of_its_own"],
                            cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S,
                            env=without_pbs(tmp_path / "pbs", tmp_path / "bin"))
    assert result.returncode == 0, result.stdout[-3000:]
    (skipped,) = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped.endswith(f": {NEEDS} {tmp_path / 'pbs'} (MPIRAYTEST_PBS_PREFIX, default /opt/pbs): none there")
    assert "1 skipped" in result.stdout and not ran.exists()


def installed_pbs(prefix: Path) -> Path:
    """A prefix holding every file the testbed runs (empty ones: nothing here runs them)."""
    for name in testbed.INSTALLED_FILES:
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).touch()
    return prefix


@pytest.fixture
def machine(tmp_path, monkeypatch) -> Path:
    """dpkg-query that knows the packages listed in bin/installed, and apt-get, useradd and id that log into
    bin/ran (id: the user exists once bin/user_exists does); Debian's createcluster.conf in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "dpkg-query": f'grep -qx -- "${{@: -1}}" "{bin_dir}/installed" && printf "install ok installed"; exit 0',
        "apt-get": f'echo "apt-get $*" >> "{bin_dir}/ran"',
        "useradd": f'echo "useradd $*" >> "{bin_dir}/ran"',
        "id": f'[ -e "{bin_dir}/user_exists" ]',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(testbed, "CREATECLUSTER_CONF", tmp_path / "postgresql-common" / "createcluster.conf")
    monkeypatch.setattr(testbed, "_unavailable", lambda what: None)  # root and network namespaces: not asked here
    return bin_dir


def ran(bin_dir: Path) -> list[str]:
    return (bin_dir / "ran").read_text().splitlines() if (bin_dir / "ran").exists() else []


def test_without_pbs_the_testbed_installs_nothing_and_makes_no_user(tmp_path, machine, monkeypatch):
    monkeypatch.setattr(testbed, "PBS_EXEC", tmp_path / "pbs")
    with pytest.raises(testbed.TestbedError, match="needs an installed OpenPBS 23.06 or PBS Professional"):
        testbed.prepare("mpiraypbs")
    assert ran(machine) == [] and not testbed.CREATECLUSTER_CONF.exists()


def test_with_pbs_it_installs_only_the_missing_runtime_packages_and_makes_the_user(tmp_path, machine, monkeypatch):
    prefix = installed_pbs(tmp_path / "pbs")
    monkeypatch.setattr(testbed, "PBS_EXEC", prefix)
    with pytest.raises(testbed.TestbedError, match="pbs_iff is not setuid root"):
        testbed.prepare("mpiraypbs")
    assert ran(machine) == []
    (prefix / "sbin" / "pbs_iff").chmod(0o4755)
    (machine / "installed").write_text("\n".join(p for p in testbed.RUNTIME_PACKAGES if p not in ("postgresql", "tk")))
    testbed.prepare("mpiraypbs")
    assert ran(machine) == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends postgresql tk",
                            "useradd --create-home --shell /bin/bash mpiraypbs"]
    # Debian's own PostgreSQL cluster is not made (PBS runs its datastore), set before postgresql is installed.
    assert testbed.CREATECLUSTER_CONF.read_text() == "create_main_cluster = false\n"
    (machine / "ran").unlink()
    (machine / "installed").write_text("\n".join(testbed.RUNTIME_PACKAGES))
    (machine / "user_exists").touch()
    testbed.prepare("mpiraypbs")
    assert ran(machine) == []  # all there: not even apt-get update
