"""Two `sandkeep serve --e2b` builds side by side (docs/benchmarks-log.md):

    E2B_API_KEY=KEY python crates/sandkeep/tests/e2b/compare.py \
        http://BEFORE_ADDR http://AFTER_ADDR

One sandbox on each; N rounds (env N, default 50), each round timing on
both servers, in turn, the SDK's `commands.run("true")` and a raw envd
`Start` of `/bin/true` (no login shell): medians that share the load.
"""

import http.client
import os
import statistics
import sys
import time
from urllib.parse import urlparse

from e2b import Sandbox
from envd_start import envd_start

N = int(os.environ.get("N", "50"))
servers = {}
for name, url in zip(["before", "after"], sys.argv[1:3]):
    parsed = urlparse(url)
    sbx = Sandbox.create(timeout=600, api_url=url, sandbox_url=url)
    servers[name] = (sbx, http.client.HTTPConnection(parsed.hostname, parsed.port))


def timed(samples, call):
    t0 = time.perf_counter()
    call()
    samples.append(time.perf_counter() - t0)


times = {}
try:
    for sbx, conn in servers.values():
        sbx.commands.run("true")
        envd_start(conn, sbx, "/bin/true")
    for _ in range(N):
        for name, (sbx, conn) in servers.items():
            timed(times.setdefault((name, "SDK run('true')"), []), lambda: sbx.commands.run("true"))
            timed(times.setdefault((name, "Start /bin/true"), []), lambda: envd_start(conn, sbx, "/bin/true"))
    for what in ["SDK run('true')", "Start /bin/true"]:
        before = statistics.median(times[("before", what)]) * 1000
        after = statistics.median(times[("after", what)]) * 1000
        print(f"{what:18s} before {before:6.2f} ms, after {after:6.2f} ms, after/before {after / before:.2f}")
finally:
    for sbx, _ in servers.values():
        sbx.kill()
