"""Where the time of `commands.run("true")` goes, through a release
`sandkeep serve --e2b` on the local provider (docs/benchmarks-log.md):

    E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=KEY \
        python crates/sandkeep/tests/e2b/profile.py SANDKEEP_HOME_OF_THE_SERVER

One sandbox; each case is timed N times (env N, default 40), the cases
interleaved so that they share the machine's load; medians. The SDK's
command is `/bin/bash -l -c true`; raw `Start` calls peel it layer by layer
(the SDK, one more shell, the login profile, bash, the endpoint), and the
sandbox's fork server driven directly (its socket in the server's
SANDKEEP_HOME; the endpoint's own command line `exec ARGV…`, run by the
sandbox's `bash -c`) is the floor under the endpoint. Then, in the same
sandbox, run("true") with /etc/profile's `$(id -u)` replaced by bash's own
`$EUID` (an experiment: what a cheap login profile gives), between runs
with the unchanged profile.
"""

import array
import http.client
import json
import os
import socket
import statistics
import sys
import time
from urllib.parse import urlparse

from e2b import Sandbox
from envd_start import envd_start

N = int(os.environ.get("N", "40"))
home = sys.argv[1]
url = urlparse(os.environ["E2B_API_URL"])
sbx = Sandbox.create(timeout=600)
envd = http.client.HTTPConnection(url.hostname, url.port)
routed = {"e2b-sandbox-id": sbx.sandbox_id, "x-access-token": sbx._envd_access_token}


def start(*argv):
    return lambda: envd_start(envd, sbx, *argv)


def fork_server(command):
    path = f"{home}/sb/{sbx.sandbox_id}/sock"

    def call():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(path)
        null = os.open("/dev/null", os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = array.array("i", [null, out_w, err_w])
        request = json.dumps({"op": "exec", "command": command}).encode()
        s.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        for fd in (null, out_w, err_w):
            os.close(fd)
        reply = s.recv(4096)
        os.read(out_r, 4096)
        os.read(err_r, 4096)
        for fd in (out_r, err_r):
            os.close(fd)
        s.close()
        assert b'"exited":0' in reply, reply

    return call


def unary():
    envd.request("POST", "/process.Process/List", body=b"{}", headers={**routed, "content-type": "application/json"})
    envd.getresponse().read()


def sdk_run():
    sbx.commands.run("true")


def medians(cases):
    times = {name: [] for name, _ in cases}
    for _, call in cases:
        call()
    for _ in range(N):
        for name, call in cases:
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    for name, samples in times.items():
        print(f"{name:50s} {statistics.median(samples) * 1000:6.2f} ms", flush=True)


try:
    medians(
        [
            ("SDK run('true')", sdk_run),
            ("Start /bin/bash -l -c true (the SDK's argv)", start("/bin/bash", "-l", "-c", "true")),
            ("Start, one more bash around it", start("/bin/bash", "-c", "exec /bin/bash -l -c true")),
            ("Start /bin/bash --noprofile -l -c true", start("/bin/bash", "--noprofile", "-l", "-c", "true")),
            ("Start /bin/bash -c true", start("/bin/bash", "-c", "true")),
            ("Start /bin/true", start("/bin/true")),
            ("fork server: exec /bin/true", fork_server("exec '/bin/true'")),
            ("fork server: exec /bin/bash -l -c true", fork_server("exec '/bin/bash' '-l' '-c' 'true'")),
            ("List (a unary RPC)", unary),
        ]
    )
    cheap = "sed -i 's/\\$(id -u)/${EUID:-$(id -u)}/' /etc/profile"
    plain = "sed -i 's/${EUID:-$(id -u)}/$(id -u)/' /etc/profile"
    for label, change in [("", None), (", $EUID profile", cheap), (", unchanged again", plain)]:
        if change:
            sbx.commands.run(change)
        medians([(f"SDK run('true'){label}", sdk_run)])
finally:
    sbx.kill()
