"""CPU time per `commands.run("true")`, which a loaded machine inflates far
less than wall time (docs/benchmarks-log.md):

    E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=KEY \
        python crates/sandkeep/tests/e2b/cpu.py SERVER_PID SANDKEEP_HOME_OF_THE_SERVER

For N runs (env N, default 200) of each case, in one sandbox: the server's
own CPU (utime+stime of SERVER_PID), the sandbox's (the cutime+cstime its
init collects from the commands it reaps: the shells, the profile's `id`)
and this client's (the SDK), per run. Cases: the SDK's run("true")
(`/bin/bash -l -c true`), a raw envd Start of /bin/true, the same inside
one more `bash -c` (the cost of a shell layer), and run("true") again with
/etc/profile's `$(id -u)` replaced by bash's `$EUID`.
"""

import http.client
import json
import os
import sys
import time
from urllib.parse import urlparse

from e2b import Sandbox
from envd_start import envd_start

N = int(os.environ.get("N", "200"))
server_pid, home = int(sys.argv[1]), sys.argv[2]
TICK = os.sysconf("SC_CLK_TCK")
url = urlparse(os.environ["E2B_API_URL"])
sbx = Sandbox.create(timeout=600)
init_pid = json.load(open(f"{home}/sb/{sbx.sandbox_id}/meta.json"))["init"]["pid"]
envd = http.client.HTTPConnection(url.hostname, url.port)


def ticks(pid, fields):
    stat = open(f"/proc/{pid}/stat").read()
    rest = stat[stat.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): utime is field 14, cutime field 16.
    return sum(int(rest[f - 3]) for f in fields)


def start(*argv):
    envd_start(envd, sbx, *argv)


def measure(label, call):
    call()
    server, sandbox, client = ticks(server_pid, (14, 15)), ticks(init_pid, (16, 17)), time.process_time()
    t0 = time.perf_counter()
    for _ in range(N):
        call()
    wall = (time.perf_counter() - t0) / N * 1000
    per = lambda t: t * 1000 / TICK / N
    print(
        f"{label:34s} CPU per run: server {per(ticks(server_pid, (14, 15)) - server):5.2f} ms, "
        f"sandbox {per(ticks(init_pid, (16, 17)) - sandbox):5.2f} ms, "
        f"SDK {(time.process_time() - client) * 1000 / N:5.2f} ms; wall mean {wall:6.2f} ms",
        flush=True,
    )


try:
    measure("SDK run('true')", lambda: sbx.commands.run("true"))
    measure("raw Start /bin/true", lambda: start("/bin/true"))
    measure("raw Start, one more bash around it", lambda: start("/bin/bash", "-c", "exec /bin/true"))
    sbx.commands.run("sed -i 's/\\$(id -u)/${EUID:-$(id -u)}/' /etc/profile")
    measure("SDK run('true'), $EUID profile", lambda: sbx.commands.run("true"))
finally:
    sbx.kill()
