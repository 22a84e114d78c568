"""One raw envd `Start` over the Connect protocol, for the profiling
scripts beside it (profile.py, cpu.py, compare.py): what the SDK sends for
a process, without the SDK."""

import json
import struct


def envd_start(conn, sbx, *argv):
    """Starts `argv` in `sbx` through the HTTP connection `conn`, reads the
    whole event stream, and asserts the process exited 0."""
    body = json.dumps({"process": {"cmd": argv[0], "args": list(argv[1:]), "envs": {}}, "stdin": False})
    body = body.encode()
    conn.request(
        "POST",
        "/process.Process/Start",
        body=b"\0" + struct.pack(">I", len(body)) + body,
        headers={
            "e2b-sandbox-id": sbx.sandbox_id,
            "x-access-token": sbx._envd_access_token,
            "content-type": "application/connect+json",
            "connect-protocol-version": "1",
            "connect-timeout-ms": "60000",
        },
    )
    answer = conn.getresponse().read()
    assert b'"exitCode":0' in answer, answer
