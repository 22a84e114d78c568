"""Round-trip timing through the official MCP Python SDK, for
benches/clients.rs (beside the TypeScript SDK's, in the same run).

    python python_bench.py SAMPLES SANDKEEP_BIN SANDKEEP_HOME

Prints one JSON line: the median tools/list and get_task (on a running
task) round trips over stdio, in milliseconds.
"""

import asyncio
import json
import statistics
import sys
import time

from mcp import Client, StdioServerParameters


async def main():
    samples, binary, home = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = StdioServerParameters(command=binary, args=["serve"], env={"SANDKEEP_HOME": home})
    async with Client(server, mode="legacy") as c:
        listed = []
        for _ in range(samples):
            t = time.perf_counter()
            await c.list_tools()
            listed.append((time.perf_counter() - t) * 1000)
        sb = (await c.call_tool("create_sandbox", {"timeout": 600})).structured_content
        task = (await c.call_tool("start_task", {"command": "sleep 600"})).structured_content
        handle = {"sandbox_id": sb["sandbox_id"], "task_id": task["task_id"]}
        got = []
        for _ in range(samples):
            t = time.perf_counter()
            r = await c.call_tool("get_task", handle)
            got.append((time.perf_counter() - t) * 1000)
            assert not r.is_error, r
        await c.call_tool("kill_sandbox", {"sandbox_id": sb["sandbox_id"]})
    print(json.dumps({"tools_list_ms": statistics.median(listed),
                      "get_task_ms": statistics.median(got), "samples": samples}))


asyncio.run(main())
