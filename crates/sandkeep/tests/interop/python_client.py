"""Interop check: the official MCP Python SDK drives sandkeep.

Run by tests/mcp/interop.rs as
    python python_client.py SANDKEEP_BIN SANDKEEP_HOME HTTP_URL
with SANDKEEP_HOME also set in the environment. It walks the acceptance
path of SPEC.md section 9 with an independent client implementation:
phase 1 over stdio with the legacy initialize handshake, phase 2 over stdio
with the SDK's default negotiation (2026-07-28 discover when offered), and
two short phases over Streamable HTTP: the default negotiation, and a legacy
session whose disconnect (a DELETE) must not make the SDK warn. Any failed check raises, which makes
the interpreter exit non-zero with the reason on stderr.
"""

import asyncio
import logging
import sys
import time

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOOLS = {
    "cancel_task", "create_sandbox", "get_task", "kill_sandbox", "list_files",
    "list_sandboxes", "read_file", "run_command", "start_task", "write_file",
    "wait_task", "list_tasks", "delete_task", "expose_port",
    "start_interactive_task", "send_input", "resize_terminal",
    "list_changes", "apply_changes", "pause_sandbox", "resume_sandbox",
    "snapshot_sandbox", "list_snapshots", "delete_snapshot", "fork_sandbox",
}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


async def ok(client, tool, args):
    r = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in r.content)
    check(not r.is_error, f"{tool} {args} failed: {text}")
    check(isinstance(r.structured_content, dict), f"{tool}: no structuredContent")
    return r.structured_content


async def err(client, tool, args):
    r = await client.call_tool(tool, args)
    check(r.is_error, f"{tool} {args} should be a tool error")
    return " ".join(getattr(c, "text", "") for c in r.content)


async def phase_one(server):
    async with Client(server, mode="legacy") as c:
        tools = (await c.list_tools()).tools
        check({t.name for t in tools} == TOOLS, f"tools: {[t.name for t in tools]}")
        for t in tools:
            check(t.input_schema.get("additionalProperties") is False, f"{t.name}: open inputSchema")
            check(t.output_schema and t.output_schema.get("type") == "object", f"{t.name}: outputSchema")
        m = await err(c, "start_task", {"command": "true"})
        check("no default sandbox" in m, m)
        m = await err(c, "get_task", {"sandbox_id": "x", "task_id": "0" * 32, "limit": 0})
        check("`limit`" in m and "1 to 65536" in m, m)
        sb = await ok(c, "create_sandbox", {"timeout": 600})
        task = await ok(c, "start_task", {"command": "printf BEFORE; sleep 10; printf AFTER", "timeout": 120})
        check(task["state"] == "running", f"{task}")
        return sb["sandbox_id"], task["task_id"]


async def phase_two(server, sandbox_id, task_id):
    async with Client(server) as c:
        deadline = time.monotonic() + 30
        while True:
            v = await ok(c, "get_task", {"sandbox_id": sandbox_id, "task_id": task_id})
            if v["state"] != "running":
                break
            check(time.monotonic() < deadline, f"still running: {v}")
            await asyncio.sleep(0.1)
        check(v["state"] == "succeeded" and v["exit_code"] == 0, f"{v}")
        out, offset = "", 0
        while True:
            page = await ok(c, "get_task", {"sandbox_id": sandbox_id, "task_id": task_id,
                                            "stdout_offset": offset, "limit": 4})
            out += page["stdout"]
            if page["stdout_next_offset"] == offset:
                break
            offset = page["stdout_next_offset"]
        check(out == "BEFOREAFTER", f"stdout by offsets: {out!r}")
        second = await ok(c, "start_task", {"sandbox_id": sandbox_id, "command": "sleep 300"})
        t = time.monotonic()
        cancelled = await ok(c, "cancel_task", {"sandbox_id": sandbox_id, "task_id": second["task_id"]})
        check(cancelled["state"] == "cancelled", f"{cancelled}")
        check(time.monotonic() - t < 4, "cancel took too long")
        killed = await ok(c, "kill_sandbox", {"sandbox_id": sandbox_id})
        check(killed["killed"] is True, f"{killed}")
        return c.protocol_version


async def phase_http(url, token):
    # The server requires its bearer token on every request, loopback included.
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http)) as c:
        tools = (await c.list_tools()).tools
        check({t.name for t in tools} == TOOLS, "HTTP tool list")
        sb = await ok(c, "create_sandbox", {"timeout": 60})
        run = await ok(c, "run_command", {"sandbox_id": sb["sandbox_id"], "command": "echo hi"})
        check(run["stdout"] == "hi\n" and run["exit_code"] == 0, f"{run}")
        await ok(c, "kill_sandbox", {"sandbox_id": sb["sandbox_id"]})
        return c.protocol_version


class Warnings(logging.Handler):
    """Collects the SDK's warnings (a legacy disconnect the server answers
    wrongly logs "Session termination failed")."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())


async def phase_http_legacy(url, token):
    # A legacy (initialize) session over HTTP ends with a DELETE when the
    # client closes: the server must answer it as the transport says.
    warnings = Warnings()
    logging.getLogger("mcp").addHandler(warnings)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(url, http_client=http), mode="legacy") as c:
        sb = await ok(c, "create_sandbox", {"timeout": 60})
        await ok(c, "kill_sandbox", {"sandbox_id": sb["sandbox_id"]})
        version = c.protocol_version
    logging.getLogger("mcp").removeHandler(warnings)
    check(not warnings.seen, f"the SDK warned at the legacy disconnect: {warnings.seen}")
    return version


async def main():
    binary, home, url, token = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    server = StdioServerParameters(command=binary, args=["serve"], env={"SANDKEEP_HOME": home})
    sandbox_id, task_id = await phase_one(server)
    stdio_version = await phase_two(server, sandbox_id, task_id)
    http_version = await phase_http(url, token)
    legacy_version = await phase_http_legacy(url, token)
    print(f"interop ok: stdio {stdio_version}, http {http_version}, legacy http {legacy_version}")


asyncio.run(main())
