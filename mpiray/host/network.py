"""Which address a node advertises: never a hostname (it may resolve to 127.0.1.1), never loopback unless the
whole job is on one host without a network; an interface, a site's address rule, or the route to the head.
Which ports it uses: portblocks.py. Whether an address takes a connect: connects()."""

from __future__ import annotations

import socket

from mpiray.errors import ConfigError

# A documentation address (RFC 5737): connecting a UDP socket to it sends nothing but asks the
# kernel which source address the default route would use.
_PROBE_ADDRESS = "192.0.2.1"


def interface_addresses() -> dict[str, str]:
    """Interface name -> its first IPv4 address, for interfaces that are up."""
    import psutil  # at its first use: a rank's start (a dry run's) needs none of it

    stats = psutil.net_if_stats()
    found = {}
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        for addr in addrs:
            if addr.family == socket.AF_INET:
                found[name] = addr.address
                break
    return found


def interface_holding(address: str) -> str | None:
    """The name of the (up) interface that holds the IPv4 address, or None."""
    import psutil

    stats = psutil.net_if_stats()
    for name, addrs in psutil.net_if_addrs().items():
        if name in stats and not stats[name].isup:
            continue
        if any(addr.family == socket.AF_INET and addr.address == address for addr in addrs):
            return name
    return None


def address_of_interface(name: str) -> str:
    addresses = interface_addresses()
    if name not in addresses:
        listing = ", ".join(f"{n} ({a})" for n, a in sorted(addresses.items())) or "none"
        raise ConfigError(
            f"--interface {name}: no such interface with an IPv4 address on "
            f"{socket.gethostname()}; interfaces here: {listing}"
        )
    return addresses[name]


RULE_FIELDS = ("host", "hostname")  # what an address rule may name: {host} the short hostname, {hostname} the whole


def rule_name(rule: str, hostname: str) -> str:
    """The name a site's address rule gives a host: '{host}.hsn.cm.polaris.alcf.anl.gov' or '{host}i'."""
    return rule.format(host=hostname.split(".")[0], hostname=hostname)


def address_by_rule(rule: str) -> str:
    """This host's address on the network a site's naming rule names (--address-rule), resolved here.

    The name must resolve to an address this host holds: a name of another host, or one the resolver
    does not know, is an error that names the host, the rule and what it resolved to."""
    hostname = socket.gethostname()
    name = rule_name(rule, hostname)
    try:
        resolved = sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)})
    except OSError as error:
        raise ConfigError(f"--address-rule {rule}: {name} (for host {hostname}) does not resolve: {error}; "
                          f"check the rule against `getent hosts {name}` on a compute node") from None
    held = interface_addresses()
    here = [address for address in resolved if address in held.values()]
    if not here:
        listing = ", ".join(f"{n} ({a})" for n, a in sorted(held.items())) or "none"
        raise ConfigError(f"--address-rule {rule}: {name} (for host {hostname}) resolves to {', '.join(resolved)}, "
                          f"which no interface of {hostname} holds (interfaces here: {listing}); the rule must name "
                          f"this host's own address on the fast network")
    return here[0]


def chosen_address(interface: str | None, address_rule: str | None) -> str | None:
    """The address a node advertises when the network was chosen (--interface, else --address-rule), or None."""
    if interface:
        return address_of_interface(interface)
    if address_rule:
        return address_by_rule(address_rule)
    return None


def route_source(destination: str) -> str | None:
    """The local address the kernel would use to reach destination (None: no route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((destination, 9))
        except OSError:
            return None
        return probe.getsockname()[0]


def connects(address: str, timeout: float) -> bool:
    """Whether a TCP connect to address ("ip:port") is accepted within timeout s (closed at once)."""
    ip, port = address.rsplit(":", 1)
    try:
        socket.create_connection((ip, int(port)), timeout=timeout).close()
    except OSError:
        return False
    return True


def is_loopback(address: str) -> bool:
    import ipaddress  # ~10 ms of import a rank: only when needed

    return ipaddress.ip_address(address).is_loopback


def head_address(interface: str | None, address_rule: str | None = None) -> str:
    """The head's address: --interface or --address-rule, else the default route's source, else any non-loopback."""
    chosen = chosen_address(interface, address_rule)
    if chosen:
        return chosen
    source = route_source(_PROBE_ADDRESS)
    if source and not is_loopback(source):
        return source
    others = [a for a in interface_addresses().values() if not is_loopback(a)]
    # Only loopback: a laptop without a network, where every rank is on this host.
    return sorted(others)[0] if others else "127.0.0.1"


def worker_address(interface: str | None, head_ip: str, address_rule: str | None = None) -> str:
    """A worker's address: --interface or --address-rule, else the source address of its route to the head."""
    chosen = chosen_address(interface, address_rule)
    if chosen:
        return chosen
    source = route_source(head_ip)
    if source is None:
        raise ConfigError(
            f"no route from {socket.gethostname()} to the head at {head_ip}; pick the network "
            f"that connects the nodes with --interface (e.g. ib0, hsn0) or --address-rule"
        )
    return source
