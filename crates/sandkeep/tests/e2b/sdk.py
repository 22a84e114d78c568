"""The official E2B Python SDK against `sandkeep serve --e2b`.

Run by crates/sandkeep/tests/e2b/sdk.rs with E2B_API_URL, E2B_SANDBOX_URL
and E2B_API_KEY pointing at the server. Each check prints `ok NAME`; the
first failure raises and the script exits non-zero.
"""

import os
import sys
import time
import uuid

from e2b import Sandbox, SandboxQuery
from e2b.exceptions import NotFoundException, RateLimitException, TimeoutException
from e2b.sandbox.commands.command_handle import CommandExitException

only = set(sys.argv[1:])


def check(name):
    def wrap(fn):
        if not only or name in only:
            fn()
            print("ok", name, flush=True)
        return fn

    return wrap


def make(**kw):
    kw.setdefault("timeout", 120)
    return Sandbox.create(**kw)


@check("create_run_kill")
def _():
    run_id = uuid.uuid4().hex
    sbx = make(template="base", envs={"GREETING": "hi"}, metadata={"run": run_id})
    r = sbx.commands.run("echo $GREETING; echo err >&2")
    assert r.stdout == "hi\n", r
    assert r.stderr == "err\n", r
    assert r.exit_code == 0
    try:
        sbx.commands.run("exit 3")
        raise AssertionError("non-zero exit did not raise")
    except CommandExitException as e:
        assert e.exit_code == 3, e
    r = sbx.commands.run("pwd; printf %s \"$X\"", envs={"X": "y z"}, cwd="/tmp")
    assert r.stdout == "/tmp\ny z", r
    info = sbx.get_info()
    assert info.metadata == {"run": run_id}, info
    assert info.template_id == "base", info
    listed = Sandbox.list(query=SandboxQuery(metadata={"run": run_id})).next_items()
    assert [s.sandbox_id for s in listed] == [sbx.sandbox_id], listed
    assert Sandbox.list(query=SandboxQuery(metadata={"run": "nope"})).next_items() == []
    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False
    try:
        Sandbox.connect(sbx.sandbox_id)
        raise AssertionError("connect to a killed sandbox did not raise")
    except NotFoundException:
        pass


@check("background")
def _():
    sbx = make()
    try:
        h = sbx.commands.run("read line; echo got:$line", background=True, stdin=True)
        sbx.commands.send_stdin(h.pid, "hello\n")
        r = h.wait()
        assert r.stdout == "got:hello\n", r
        h = sbx.commands.run("sleep 30", background=True, timeout=0)
        pids = [p.pid for p in sbx.commands.list()]
        assert h.pid in pids, pids
        assert sbx.commands.kill(h.pid) is True
        try:
            h.wait()
            raise AssertionError("a killed process did not raise")
        except CommandExitException as e:
            assert e.exit_code == -1, e
        assert sbx.commands.kill(987654) is False
    finally:
        sbx.kill()


@check("connect_no_replay")
def _():
    sbx = make()
    try:
        # Output made while nobody is connected is not replayed (envd).
        h = sbx.commands.run(
            "echo early; read x; echo late", background=True, stdin=True, timeout=0
        )
        h.disconnect()
        time.sleep(0.3)
        h2 = sbx.commands.connect(h.pid, timeout=0)
        sbx.commands.send_stdin(h.pid, "\n")
        r = h2.wait()
        assert r.stdout == "late\n", r
        # The end event stays for a later connect.
        h3 = sbx.commands.connect(h.pid)
        r = h3.wait()
        assert r.exit_code == 0 and r.stdout == "", r
    finally:
        sbx.kill()


@check("connect_timeout_kills")
def _():
    sbx = make()
    try:
        t0 = time.monotonic()
        try:
            sbx.commands.run("sleep 20", timeout=1)
            raise AssertionError("timeout did not raise")
        except TimeoutException:
            pass
        assert time.monotonic() - t0 < 10
        # envd killed it at the deadline: it is gone from the list.
        deadline = time.monotonic() + 5
        while any(p.cmd == "/bin/bash" for p in sbx.commands.list()):
            assert time.monotonic() < deadline, sbx.commands.list()
            time.sleep(0.05)
    finally:
        sbx.kill()


@check("signal_leader_only")
def _():
    sbx = make()
    try:
        # envd signals the process, not its group: a child survives.
        h = sbx.commands.run(
            "sleep 300 & echo $! > /tmp/child; wait", background=True, timeout=0
        )
        deadline = time.monotonic() + 10
        while not sbx.files.exists("/tmp/child"):
            assert time.monotonic() < deadline, "the child's pid file never appeared"
            time.sleep(0.05)
        child = sbx.files.read("/tmp/child").strip()
        assert sbx.commands.kill(h.pid) is True
        try:
            h.wait()
            raise AssertionError("a killed process did not raise")
        except CommandExitException:
            pass
        assert sbx.commands.run(f"kill -0 {child}").exit_code == 0
        assert sbx.commands.kill(h.pid) is False
    finally:
        sbx.kill()


@check("end_retention")
def _():
    sbx = make()
    try:
        h = sbx.commands.run("exit 7", background=True, timeout=0)
        try:
            h.wait()
        except CommandExitException as e:
            assert e.exit_code == 7, e
        ended = time.monotonic()
        assert h.pid not in [p.pid for p in sbx.commands.list()]
        # envd keeps the end event 30 s for Connect, then forgets the pid.
        while True:
            try:
                sbx.commands.connect(h.pid).wait()
            except CommandExitException as e:
                assert e.exit_code == 7, e
                assert time.monotonic() - ended < 31, "the end event outlived 30 s"
                time.sleep(0.5)
                continue
            except NotFoundException:
                break
        assert time.monotonic() - ended >= 29, "the end event was dropped before 30 s"
    finally:
        sbx.kill()


@check("files")
def _():
    sbx = make()
    try:
        info = sbx.files.write("dir/a.txt", "hello")
        assert info.name == "a.txt" and info.path.endswith("/dir/a.txt"), info
        assert sbx.files.read("dir/a.txt") == "hello"
        assert bytes(sbx.files.read("dir/a.txt", format="bytes")) == b"hello"
        assert sbx.files.exists("dir/a.txt")
        assert not sbx.files.exists("dir/none")
        entries = sbx.files.list("dir")
        assert [e.name for e in entries] == ["a.txt"], entries
        assert entries[0].size == 5
        assert sbx.files.make_dir("dir/sub") is True
        assert sbx.files.make_dir("dir/sub") is False
        sbx.files.write("dir/sub/b.txt", "b")
        deep = sbx.files.list("dir", depth=2)
        assert sorted(e.name for e in deep) == ["a.txt", "b.txt", "sub"], deep
        moved = sbx.files.rename("dir/a.txt", "other/c.txt")
        assert moved.name == "c.txt", moved
        assert not sbx.files.exists("dir/a.txt")
        st = sbx.files.get_info("other/c.txt")
        assert st.size == 5 and st.type.value == "file", st
        sbx.files.remove("other")
        assert not sbx.files.exists("other/c.txt")
        try:
            sbx.files.read("missing.txt")
            raise AssertionError("reading a missing file did not raise")
        except NotFoundException:
            pass
    finally:
        sbx.kill()


@check("slow_reader")
def _():
    # ~38 MiB produced far faster than this reader takes it: the stream
    # must hold the producer back, never drop chunks.
    sbx = make()
    try:
        chunks = []

        def slow(chunk):
            if len(chunks) in (0, 300):
                time.sleep(2)
            chunks.append(chunk)

        r = sbx.commands.run("seq 1 5000000", on_stdout=slow, timeout=0)
        expected = "".join(f"{i}\n" for i in range(1, 5000001))
        got = "".join(chunks)
        assert len(got) == len(expected), (len(got), len(expected))
        assert got == expected, "the output arrived out of order or altered"
        assert r.stdout == expected
    finally:
        sbx.kill()


@check("large_files")
def _():
    sbx = make()
    try:
        data = os.urandom(100 << 20)
        t0 = time.monotonic()
        sbx.files.write("big.bin", data)
        up = time.monotonic() - t0
        t0 = time.monotonic()
        back = sbx.files.read("big.bin", format="bytes")
        down = time.monotonic() - t0
        assert bytes(back) == data
        print(f"  100 MiB up {100 / up:.0f} MiB/s, down {100 / down:.0f} MiB/s", flush=True)
    finally:
        sbx.kill()


@check("set_timeout_and_expiry")
def _():
    sbx = make(timeout=300)
    sbx.set_timeout(2)
    info = sbx.get_info()
    assert (info.end_at - info.started_at).total_seconds() < 30, info
    deadline = time.monotonic() + 15
    while sbx.is_running():
        assert time.monotonic() < deadline, "the sandbox outlived its timeout"
        time.sleep(0.2)
    assert Sandbox.kill(sbx.sandbox_id) is False


@check("no_internet")
def _():
    # allow_internet_access=False is the local sandbox's network "none":
    # no egress proxy to reach (the default sandbox has one), and the
    # detail says so.
    cut = make(allow_internet_access=False)
    default = make()
    try:
        assert cut.get_info().allow_internet_access is False, cut.get_info()
        assert default.get_info().allow_internet_access is True, default.get_info()
        probe = 'printf "proxy=%s\\n" "$HTTPS_PROXY"'
        r = cut.commands.run(probe)
        assert r.stdout == "proxy=\n", r
        r = default.commands.run(probe)
        assert r.stdout.startswith("proxy=http://127.0.0.1:"), r
    finally:
        cut.kill()
        default.kill()


@check("host_bound")
def _():
    # Past the server's host-wide bound (the test starts it with
    # --max-sandboxes 2) a create is E2B's rate limit error, at once (no
    # retries), saying which bound and how to raise it; a kill makes room.
    made = []
    try:
        started = time.monotonic()
        while True:
            assert len(made) < 64, "no bound was reached"
            try:
                made.append(make())
            except RateLimitException as e:
                assert "--max-sandboxes" in str(e), e
                break
        assert time.monotonic() - started < 60
        made.pop().kill()
        made.append(make())
    finally:
        for sbx in made:
            sbx.kill()


@check("share")
def _():
    # sdk.rs starts the server with `--share SK_SHARE:cow`: every sandbox
    # made here mounts it at its own path, and the host copy stays intact.
    share = os.environ["SK_SHARE"]
    sbx = make()
    r = sbx.commands.run(f"cat {share}/README; echo sdk >> {share}/README")
    assert r.stdout == "hello\n", r
    assert sbx.files.read(f"{share}/README") == "hello\nsdk\n"
    with open(f"{share}/README") as f:
        assert f.read() == "hello\n", "the host's copy changed"
    print("sandbox", sbx.sandbox_id, flush=True)
def _through_endpoint(host, path="/", timeout=5.0):
    """A GET of `path` sent to the endpoint (E2B_SANDBOX_URL) as a request
    for `host`, as E2B's edge receives a request for a get_host() URL."""
    import httpx

    return httpx.get(
        os.environ["E2B_SANDBOX_URL"] + path, headers={"Host": host}, timeout=timeout
    )


def _websocket_echo(host, text):
    """A websocket handshake with the endpoint for `host`, one masked text
    frame, and the echoed frame's payload."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["E2B_SANDBOX_URL"])
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall(
            (
                "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                % host
            ).encode()
        )
        f = s.makefile("rb")
        status = f.readline().decode()
        assert status.startswith("HTTP/1.1 101"), status
        head = {}
        while (line := f.readline().decode()) not in ("\r\n", ""):
            k, _, v = line.partition(":")
            head[k.strip().lower()] = v.strip()
        assert head.get("sec-websocket-accept") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", head
        mask = b"\x12\x34\x56\x78"
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(text.encode()))
        s.sendall(bytes([0x81, 0x80 | len(data)]) + mask + data)
        h = f.read(2)
        assert h[0] == 0x81, h
        return f.read(h[1] & 127).decode()


@check("get_host")
def _():
    # get_host(port) names PORT-ID.DOMAIN; a request for that name reaching
    # the endpoint goes to the sandbox's server on that port.
    sbx = make()
    try:
        marker = "served-by-" + sbx.sandbox_id
        sbx.files.write("/tmp/www/index.html", marker)
        sbx.commands.run(
            "python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www",
            background=True,
        )
        ws = open(os.path.join(os.path.dirname(__file__), "..", "support", "ws_echo.py")).read()
        sbx.files.write("/tmp/ws_echo.py", ws)
        sbx.commands.run("python3 /tmp/ws_echo.py 8765", background=True)
        host = sbx.get_host(8000)
        assert host.startswith("8000-" + sbx.sandbox_id + "."), host
        deadline = time.monotonic() + 20
        while True:
            r = _through_endpoint(host, "/index.html")
            if r.status_code == 200:
                break
            assert r.status_code == 502, (r.status_code, r.text)
            assert time.monotonic() < deadline, "the server never answered: " + r.text
            time.sleep(0.05)
        assert r.text == marker, r.text
        # Nothing listens: E2B's 502 with its JSON error body, at once.
        started = time.monotonic()
        r = _through_endpoint(sbx.get_host(9))
        assert r.status_code == 502, (r.status_code, r.text)
        assert "port is not open" in r.json()["message"], r.text
        assert r.json()["code"] == 502, r.text
        assert time.monotonic() - started < 5
        # A websocket through the same kind of name.
        deadline = time.monotonic() + 20
        while True:
            try:
                echoed = _websocket_echo(sbx.get_host(8765), "hello through get_host")
                break
            except AssertionError:
                assert time.monotonic() < deadline, "no websocket server"
                time.sleep(0.05)
        assert echoed == "hello through get_host", echoed
        # Another sandbox's name, or none at all: E2B's "not found".
        r = _through_endpoint("8000-sb-0000000000000000.e2b.app")
        assert r.status_code == 502 and "was not found" in r.json()["message"], r.text
        r = _through_endpoint("0-" + sbx.sandbox_id + ".e2b.app")
        assert r.status_code == 400, (r.status_code, r.text)
    finally:
        sbx.kill()
    # Gone with the sandbox.
    r = _through_endpoint(host, "/index.html")
    assert r.status_code == 502 and "was not found" in r.json()["message"], r.text
