"""Where mpiray lies and what its helpers and the default driver are given to find it (mpiray/package.py)."""

from __future__ import annotations

import pytest

from mpiray import package


@pytest.mark.parametrize("command, trainer", [
    (["python", "-m", "train"], True),
    (["/opt/conda/bin/python", "-u", "-m", "train", "--num-gpus", "4"], True),
    (["python", "train.py"], False),
    (["python", "-m", "trainer"], False),
    (["python", "-c", "import train"], False),
])
def test_a_driver_runs_the_trainer_when_it_runs_the_train_module(command, trainer):
    assert package.runs_trainer(command) is trainer


def test_only_the_trainers_driver_gets_the_checkout_on_its_path(monkeypatch):
    monkeypatch.setattr(package, "found_without_help", lambda name="mpiray": False)  # a checkout run by path
    env = package.driver_env({"PYTHONPATH": "/mine"}, ["python", "-m", "train"])
    assert env["PYTHONPATH"] == f"{package.PARENT}:/mine"  # the user's own entries stay, after it
    assert package.driver_env({"PYTHONPATH": "/mine"}, ["python", "my_driver.py"]) == {"PYTHONPATH": "/mine"}
    monkeypatch.setattr(package, "found_without_help", lambda name="mpiray": True)  # installed: found anyway
    assert "PYTHONPATH" not in package.driver_env({}, ["python", "-m", "train"])
