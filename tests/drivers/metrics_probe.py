"""A driver that stays SECONDS (Ray logs a failed metrics-agent connection after ~20 s) and meanwhile
asks every node's Prometheus endpoint for its metrics.  metrics_probe.py SECONDS

Prints `METRICS {json}`: per node, its address, its metrics port and what an HTTP GET of /metrics gave.
"""

import json
import sys
import time
import urllib.request

import ray

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
started = time.monotonic()
ray.init()
time.sleep(min(10.0, seconds / 2))  # the agents export their first metrics a few seconds after start
report = []
for node in sorted((n for n in ray.nodes() if n["Alive"]), key=lambda n: n["NodeName"]):
    entry = {"node": node["NodeName"], "ip": node["NodeManagerAddress"], "port": node.get("MetricsExportPort")}
    if entry["port"] and entry["port"] > 0:
        url = f"http://{entry['ip']}:{entry['port']}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read().decode()
                entry.update(status=response.status, content_type=response.headers.get("Content-Type"),
                             types=sum(line.startswith("# TYPE ") for line in body.splitlines()),
                             ray_samples=sum(line.startswith("ray_") for line in body.splitlines()))
        except OSError as error:
            entry["error"] = repr(error)
    report.append(entry)
print("METRICS " + json.dumps(report), flush=True)
time.sleep(max(0.0, seconds - (time.monotonic() - started)))
