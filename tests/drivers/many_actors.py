"""A driver that starts N one-CPU actors at once and waits until every one answers (a node's CPUs' worth
of light workers, as RLlib's env runners are); exits 1 unless all do. Prints ACTORS {json}.

    python many_actors.py N [DEADLINE_S]
"""

import json
import sys
import time

import psutil
import ray

count = int(sys.argv[1])
deadline_s = float(sys.argv[2]) if len(sys.argv) > 2 else 600.0


@ray.remote(num_cpus=1)
class Light:
    def pid(self) -> int:
        import os

        return os.getpid()


ray.init()
started = time.monotonic()
actors = [Light.remote() for _ in range(count)]
pending = {actor.pid.remote(): index for index, actor in enumerate(actors)}
pids, errors = [], []
while pending and time.monotonic() - started < deadline_s:
    done, _ = ray.wait(list(pending), num_returns=1, timeout=5)
    for ref in done:
        pending.pop(ref)
        try:
            pids.append(ray.get(ref))
        except Exception as error:  # an actor that died: Ray's reason ("No available ports", ...)
            errors.append(str(error).splitlines()[0][:300])
ready_s = time.monotonic() - started
rss = uss = 0  # RSS counts the pages the workers share once per worker; USS only each one's own
for pid in pids:
    try:
        memory = psutil.Process(pid).memory_full_info()
    except psutil.NoSuchProcess:
        continue
    rss, uss = rss + memory.rss, uss + memory.uss
report = {"asked": count, "ready": len(set(pids)), "failed": len(errors), "pending": len(pending),
          "ready_s": round(ready_s, 2), "rss_mib": rss >> 20, "uss_mib": uss >> 20, "errors": errors[:3]}
print("ACTORS " + json.dumps(report), flush=True)
sys.exit(0 if len(set(pids)) == count else 1)
