#!/usr/bin/env python3
"""Load generator for an edgemu gateway, with OpenAI's own Python client.

N workers each send streamed chat completions back to back for S seconds
and time them as a client sees them (time to first content token, end to
end). Prints one JSON object: requests, completed, content chunks (one
per token from a modeled server), errors by kind and message, and client-side latency percentiles (ms).

    python3 scripts/gateway-load.py --url http://127.0.0.1:8000/v1 \\
        --model edgemu-modeled --concurrency 64 --seconds 60

`edgemu bench gateway` runs this against a cluster of its own and reads
the gateway's own figures next to it (docs/gateway.md).
"""

import argparse
import asyncio
import json
import os
import sys
import time

try:
    import openai
except ImportError:
    sys.exit("the `openai` package is needed: python3 -m pip install openai")


def pct(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(q * len(s) + 0.999999) - 1))]


async def worker(client, args, deadline, out):
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        first = None
        chunks = 0
        out["requests"] += 1
        try:
            stream = await client.chat.completions.create(
                model=args.model,
                messages=[{"role": "user", "content": args.prompt}],
                max_tokens=args.max_tokens,
                stream=True,
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    if first is None:
                        first = time.monotonic()
                    chunks += 1
            end = time.monotonic()
        except Exception as e:  # every failure is counted, by kind and message
            key = f"{type(e).__name__}: {str(e)[:120]}"
            out["errors"][key] = out["errors"].get(key, 0) + 1
            continue
        out["completed"] += 1
        out["chunks"] += chunks
        if first is not None:
            out["ttft"].append(first - t0)
        out["e2e"].append(end - t0)


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="edgemu-modeled")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt", default="Describe the edge network in one paragraph.")
    args = p.parse_args()
    client = openai.AsyncOpenAI(
        base_url=args.url, api_key=args.api_key, max_retries=0, timeout=120.0
    )
    out = {"requests": 0, "completed": 0, "chunks": 0, "errors": {}, "ttft": [], "e2e": []}
    t0 = time.monotonic()
    cpu0 = time.process_time()
    deadline = t0 + args.seconds
    await asyncio.gather(*(worker(client, args, deadline, out) for _ in range(args.concurrency)))
    wall = time.monotonic() - t0
    cpu = time.process_time() - cpu0
    await client.close()
    ms = lambda v: None if v is None else round(v * 1e3, 3)
    print(json.dumps({
        "client": f"openai {openai.__version__}",
        "concurrency": args.concurrency,
        "seconds": round(wall, 3),
        "client_cpu_cores": round(cpu / wall, 3),
        "requests": out["requests"],
        "completed": out["completed"],
        "chunks": out["chunks"],
        "errors": out["errors"],
        "ttft_ms": {"p50": ms(pct(out["ttft"], 0.5)), "p99": ms(pct(out["ttft"], 0.99))},
        "e2e_ms": {"p50": ms(pct(out["e2e"], 0.5)), "p99": ms(pct(out["e2e"], 0.99))},
    }))


if __name__ == "__main__":
    asyncio.run(main())
