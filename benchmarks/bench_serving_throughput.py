"""Invoke throughput through an endpoint's router to one instance at concurrency 64, against a bare
aiohttp hello-world server on this machine, with the same client in the same run (interleaved rounds).

Goals: throughput >= 0.5x the bare server's; p99 latency <= 2x the bare server's.
Run: python benchmarks/bench_serving_throughput.py
"""

from __future__ import annotations

from _serving import drive, free_port, load_average, median, p99, served_workspace, start_bare_server, stop_workspace

CONCURRENCY, SECONDS, ROUNDS = 64, 3.0, 3


def main() -> None:
    url, token = served_workspace("--min 1 --max 1 --tick-seconds 0")
    port = free_port()
    bare = start_bare_server(port)
    bare_url = f"http://127.0.0.1:{port}/invoke"
    body = {"record": {"x": 1}}
    try:
        drive(url, token, CONCURRENCY, 1.0, body)  # warm: the version loaded, connections open
        drive(bare_url, token, CONCURRENCY, 1.0, body)
        ours_rps, bare_rps, ours_p99, bare_p99 = [], [], [], []
        for _ in range(ROUNDS):
            ours = drive(url, token, CONCURRENCY, SECONDS, body)
            base = drive(bare_url, token, CONCURRENCY, SECONDS, body)
            ours_rps.append(len(ours) / SECONDS)
            bare_rps.append(len(base) / SECONDS)
            ours_p99.append(p99(ours))
            bare_p99.append(p99(base))
    finally:
        bare.terminate()
        bare.wait()
        stop_workspace()
    throughput = median(ours_rps) / median(bare_rps)
    latency = median(ours_p99) / median(bare_p99)
    print(f"router -> 1 instance: {median(ours_rps):.0f} req/s, p99 {median(ours_p99) * 1000:.1f} ms")
    print(f"bare aiohttp server:  {median(bare_rps):.0f} req/s, p99 {median(bare_p99) * 1000:.1f} ms")
    print(f"throughput ratio {throughput:.2f} (goal >= 0.5): {'met' if throughput >= 0.5 else 'NOT met'}")
    print(f"p99 ratio {latency:.2f} (goal <= 2): {'met' if latency <= 2 else 'NOT met'}")
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
