"""The link check across the job, before any Ray starts (one host's side: host/linkprobe.py).

Each host's first rank listens on its Ray address and says where in its HELLO (Hello.link). Rank 0, once every
HELLO is in, pairs the hosts in a ring both ways (each sends to the host before and after it: every host is
measured sending and receiving, against two peers) and sends each its PROBE; all measure at once, for under
a second, and send back what they received (PROBED). A host's figure is the smaller of its best send and its
best receive, so one slow peer does not make a host slow, and a host slow either way is. With 3 hosts or more,
a host below --slow-link times the median host's figure, or that no peer reached, is refused: --bad-nodes then
excludes it or ends the job (rank/preflight.py's judge). With 2 the figures are shown, not judged: which end of
a slow link is at fault cannot be told. Rank 0 then sends each its VERDICT (zero.py). --slow-link 0: no check at all.

    mpiray: pre-flight: links (TCP on the Ray addresses, 0.25 s each way): t1 15.4 Gbit/s out, 11.0 Gbit/s in,
    41.445 ms, t2 11.0 Gbit/s out, 15.4 Gbit/s in, 0.042 ms, t3 3.8 Mbit/s out, 10.4 Mbit/s in, 48.739 ms (slow)

(the testbed, t3's sends throttled by tc: its peers' pings wait behind its own stream, hence their round trips).
"""

from __future__ import annotations

import os
import statistics
import threading
from typing import Callable

from mpiray.deadline import Deadline, poll_until
from mpiray.errors import StartupTimeout
from mpiray.host import linkprobe, network
from mpiray.host.findings import REFUSE, Finding
from mpiray.host.linkprobe import Figures, Listener
from mpiray.rank.messages import PROBE, PROBED, Hello, Probe
from mpiray.rank.state import Rank

CHECK = "slow_link"
# From PROBE to the last figure: connects, pings and the window, with room for a loaded host; a peer not heard
# from by then is named as such.
PROBE_SECONDS = 10.0
POLL = 0.01  # between looks at the check's threads: it lasts ~0.5 s, on the start's critical path


def listen(me: Rank) -> Listener | None:
    """This host's listener for the check, if it takes part: its first rank, a real start, --slow-link not 0.
    On the address its Ray node will advertise: the head's (rank 0 of a cluster of its own), else a worker's."""
    config = me.config
    if me.host_comm.rank != 0 or not config.slow_link or config.dry_run:
        return None
    session = me.current_session
    head = me.rank == 0 and not session.own_job_id
    ip = session.head_ip if head else network.worker_address(config.interface, session.head_ip, config.address_rule)
    try:
        return Listener(ip)
    except OSError as error:
        me.log.event("link_check_failed", problem=f"cannot listen on {ip}: {error}")
        return None


def ring(hosts: list[str]) -> dict[str, list[str]]:
    """Each host -> the hosts it sends to: the one before it and the one after it (one peer with 2 hosts)."""
    count = len(hosts)
    if count < 2:
        return {}
    return {host: sorted({hosts[(i + 1) % count], hosts[(i - 1) % count]}) for i, host in enumerate(hosts)}


def rate(mbit: float) -> str:
    return f"{mbit / 1000:.1f} Gbit/s" if mbit >= 1000 else f"{mbit:.1f} Mbit/s"


def judge(figures: dict[str, Figures], sends: dict[str, list[str]], floor: float) -> tuple[dict, dict[str, str]]:
    """(each host's figures: send and receive Mbit/s, round trip ms; host -> why it is refused). A host's send is
    the best of what its peers received from it, its receive the best it received."""
    table: dict[str, dict] = {}
    for host, peers in sends.items():
        sent = [figures[peer].received[host] for peer in peers if host in figures.get(peer, Figures()).received]
        got = list(figures.get(host, Figures()).received.values())
        trips = list(figures.get(host, Figures()).rtt_ms.values())
        table[host] = {"send_mbit": round(max(sent), 1) if sent else None,
                       "receive_mbit": round(max(got), 1) if got else None,
                       "rtt_ms": round(statistics.median(trips), 3) if trips else None,
                       "errors": figures.get(host, Figures()).errors}
    refused: dict[str, str] = {}
    if len(sends) < 3:
        return table, refused
    worst = {host: min(row["send_mbit"], row["receive_mbit"]) for host, row in table.items()
             if row["send_mbit"] is not None and row["receive_mbit"] is not None}
    median = statistics.median(worst.values()) if worst else 0.0
    for host, row in table.items():
        if host not in worst:
            way = "from" if row["receive_mbit"] is None else "to"
            failed = [f"{peer}: {error}" for peer, error in sorted(row["errors"].items())] or [
                f"{peer}: {figures[peer].errors[host]}" for peer in sends[host] if host in figures.get(peer, Figures()).errors]
            refused[host] = (f"no link {way} its peers on its Ray address measured"
                             + (f" ({'; '.join(failed)})" if failed else ""))
        elif worst[host] < floor * median:
            slow = [f"{way} at {rate(row[key])}" for way, key in (("sends", "send_mbit"), ("receives", "receive_mbit"))
                    if row[key] < floor * median]
            refused[host] = (f"its link {' and '.join(slow)}, below --slow-link {floor:g} of its peers' "
                             f"median {rate(median)}")
    return table, refused


def check(me: Rank, hellos: dict[int, Hello]) -> dict[str, list[Finding]]:
    """rank 0, once every HELLO is in: the check run across the hosts that listen; the figures printed and
    logged. Returns host -> its refusal as a finding (none where fewer than 3 hosts took part)."""
    listener = listen(me)
    takers = {hello.host: (rank, hello.link) for rank, hello in sorted(hellos.items()) if hello.link}
    if listener is None or not takers:
        if listener is not None:
            listener.close()
        release(me, hellos)
        return {}
    try:
        addresses = {me.host: listener.address, **{host: link for host, (_, link) in takers.items()}}
        sends = ring(sorted(addresses))
        key = os.urandom(linkprobe.KEY_BYTES)
        receives = {host: sum(host in peers for peers in sends.values()) for host in sends}
        for host, (rank, _) in takers.items():
            me.comm.send(Probe(key, tuple((peer, addresses[peer]) for peer in sends[host]), receives[host]), rank, PROBE)
        deadline = Deadline.after(PROBE_SECONDS)
        figures = {me.host: measure(listener, key, [(p, addresses[p]) for p in sends[me.host]],
                                    expected=receives[me.host], name=me.host, deadline=deadline,
                                    between=me.raise_if_stopped)}
        ranks = [rank for rank, _ in takers.values()]
        heard = me.comm.receive_each(ranks, PROBED, deadline, me.raise_if_stopped)
        figures.update({hellos[rank].host: found for rank, found in heard.items()})
    finally:
        listener.close()
    table, refused = judge(figures, sends, me.config.slow_link)
    missing = sorted(host for host, (rank, _) in takers.items() if rank not in heard)
    for host in missing:
        refused.setdefault(host, f"its link check did not answer within {PROBE_SECONDS:g} s")
    shown = ", ".join(f"{host} {_row(table[host])}{' (slow)' if host in refused else ''}" for host in sorted(table))
    how = f"TCP on the Ray addresses, {linkprobe.WINDOW:g} s each way"
    print(f"mpiray: pre-flight: links ({how}): {shown}", flush=True)
    me.log.event("link_check", summary=f"{how}: {shown}", hosts=table, refused=refused, floor=me.config.slow_link,
                 judged=len(sends) >= 3)
    return {host: [Finding(REFUSE, CHECK, why, "leave the host out of the next job (the exclude line), and ask the "
                           "site to check its network link")] for host, why in refused.items()}


def _row(row: dict) -> str:
    if row["send_mbit"] is None or row["receive_mbit"] is None:
        return "unmeasured"
    trip = f", {row['rtt_ms']:g} ms" if row["rtt_ms"] is not None else ""
    return f"{rate(row['send_mbit'])} out, {rate(row['receive_mbit'])} in{trip}"


def measure(listener: Listener, key: bytes, peers: list[tuple[str, str]], *, expected: int, name: str,
            deadline: Deadline, between: Callable[[], None]) -> Figures:
    """This host's part: receive from `expected` peers while sending to each of peers, all at once. between() runs
    while it waits: MPI's progress (a netmod moves a message only while its sender calls into MPI)."""
    listener.serve(key, expected, deadline)
    trips: dict[str, tuple[float, str]] = {}

    def send(host: str, address: str) -> None:
        trips[host] = linkprobe.send_to(address, key, name)

    senders = [threading.Thread(target=send, args=peer, daemon=True, name="link-send") for peer in peers]
    for sender in senders:
        sender.start()
    poll_until(lambda: not listener.busy() and not any(s.is_alive() for s in senders), deadline, POLL, between)
    figures = listener.wait(deadline)
    for host, (trip, error) in dict(trips).items():
        if error:
            figures.errors[host] = error
        else:
            figures.rtt_ms[host] = round(trip, 3)
    return figures


def release(me: Rank, hellos: dict[int, Hello]) -> None:
    """rank 0, where no check runs: each worker that listens, let go (it waits for its PROBE)."""
    for rank, hello in sorted(hellos.items()):
        if hello.link:
            me.comm.send(Probe(b"", (), 0), rank, PROBE)


def take_part(me: Rank, listener: Listener) -> None:
    """A worker host's first rank: its part of the check, when rank 0 sends the PROBE (the verdict follows in
    rank 0's VERDICT)."""
    try:
        wait = Deadline.since(me.current_session.started, me.config.startup_timeout)
        probe = me.comm.receive(0, PROBE, wait, me.raise_if_stopped)
        if probe is None:
            raise StartupTimeout(f"rank 0 sent no link check within --startup-timeout {me.config.startup_timeout:g} s")
        if not probe.key:
            return
        figures = measure(listener, probe.key, list(probe.peers), expected=probe.expected, name=me.host,
                          deadline=Deadline.after(PROBE_SECONDS), between=me.raise_if_stopped)
    finally:
        listener.close()
    me.comm.send(figures, 0, PROBED)
