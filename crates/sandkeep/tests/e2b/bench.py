"""Speed of `sandkeep serve --e2b` through the official Python SDK.

    E2B_API_URL=http://ADDR E2B_SANDBOX_URL=http://ADDR E2B_API_KEY=KEY \
        python crates/sandkeep/tests/e2b/bench.py

Prints the medians docs/benchmarks.md records: create + run("true") + kill
(and each of the three apart), run("true") in a live sandbox, and 100 MiB
upload and download; and each figure once more as a `BENCH name=… value=…
unit=… baseline=… ratio=… target=…` line, which scripts/bench collects.
"""

import os
import statistics
import time

from e2b import Sandbox


def bench_line(name, value, unit, target):
    print(f"BENCH name={name} value={value:.3f} unit={unit} baseline=- ratio=- target={target}")


def ms(samples):
    return f"median {statistics.median(samples) * 1000:.1f} ms (n={len(samples)})"


Sandbox.create(timeout=60).kill()  # warm-up

cycle, create, first_run, kill = [], [], [], []
for _ in range(20):
    t0 = time.perf_counter()
    sbx = Sandbox.create(timeout=60)
    t1 = time.perf_counter()
    sbx.commands.run("true")
    t2 = time.perf_counter()
    sbx.kill()
    t3 = time.perf_counter()
    cycle.append(t3 - t0)
    create.append(t1 - t0)
    first_run.append(t2 - t1)
    kill.append(t3 - t2)
print("create + run('true') + kill:", ms(cycle))
print(f"  of which create {ms(create)}, first run {ms(first_run)}, kill {ms(kill)}")
bench_line("e2b.create_run_kill", statistics.median(cycle) * 1000, "ms", "<=50")

sbx = Sandbox.create(timeout=120)
try:
    sbx.commands.run("true")
    runs = []
    for _ in range(50):
        t0 = time.perf_counter()
        sbx.commands.run("true")
        runs.append(time.perf_counter() - t0)
    print("run('true') in a live sandbox:", ms(runs))
    bench_line("e2b.run_true", statistics.median(runs) * 1000, "ms", "<=10")

    data = os.urandom(100 << 20)
    t0 = time.perf_counter()
    sbx.files.write("big.bin", data)
    up = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = sbx.files.read("big.bin", format="bytes")
    down = time.perf_counter() - t0
    assert bytes(back) == data
    print(f"100 MiB upload: {100 / up:.0f} MiB/s; download: {100 / down:.0f} MiB/s")
    bench_line("e2b.upload", 100 / up, "MiB/s", ">=200")
    bench_line("e2b.download", 100 / down, "MiB/s", ">=200")
finally:
    sbx.kill()
