"""What the ranks send each other (mpiray/rank/messages.py): named values that cross MPI as pickles."""

from __future__ import annotations

import pickle

from mpiray.errors import ConfigError, PortsPerHost
from mpiray.host.findings import WARN, Finding
from mpiray.host.portblocks import node_ports
from mpiray.host.resources import Share
from mpiray.rank.messages import LOCAL, Hello, HostPlan, Idle, Message, PlanRefused


def test_a_hello_crosses_mpi_as_it_was_sent():
    hello = Hello("n1", "/logs/job/rank-0001.log", {"python": "3.11.7", "ray": "2.60.0"},
                  [Finding(WARN, "ram", "90% of RAM in use", "fewer ranks per host")])
    assert pickle.loads(pickle.dumps(hello)) == hello
    assert len(pickle.dumps(hello)) < 600  # one per rank, all at rank 0


def test_a_host_plan_and_its_refusal_cross_mpi_as_they_were_sent():
    plan = HostPlan(Share(cpus=2, gpu_ids=("0",), memory=2**30, object_store=2**28), node_ports(20000))
    for sent in (plan, Idle(), PlanRefused("no room", "ports_per_host")):
        assert pickle.loads(pickle.dumps(sent)) == sent
    assert len(pickle.dumps(PlanRefused("no room", "ports_per_host"))) < 200  # small: one per rank of a host


def test_a_refused_plan_fails_as_its_cause_says():
    assert type(PlanRefused("ports", "ports_per_host").error()) is PortsPerHost
    refused = PlanRefused("the object store does not fit")  # no cause: a plain configuration error
    assert type(refused.error()) is ConfigError and str(refused.error()) == refused.message


def test_a_received_message_names_its_sender_tag_and_payload():
    message = Message(3, LOCAL, "payload")
    assert (message.source, message.tag, message.payload) == (3, LOCAL, "payload")
    source, tag, payload = message  # still unpacks where all three are wanted
    assert (source, tag, payload) == message
