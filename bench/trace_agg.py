#!/usr/bin/env python3
"""trace_agg.py — the spans of `strata run --trace` files summed per thread
and name: count, total ms and mean ms, largest first, without the queue
waits ("wait input"/"wait output"). A text view of where a step's time goes
when Perfetto's UI is not at hand (bench/device.sh runs it on the lent
machine, so only the summary has to come back).

    trace_agg.py TRACE.json [TRACE.json ...] [--top N]   (N: 24)
"""
import collections
import json
import sys


def main(argv):
    top = 24
    files = []
    i = 0
    while i < len(argv):
        if argv[i] == "--top":
            top = int(argv[i + 1])
            i += 2
            continue
        files.append(argv[i])
        i += 1
    for f in files:
        with open(f) as fh:
            t = json.load(fh)
        ev = t["traceEvents"] if isinstance(t, dict) else t
        names = {}
        for e in ev:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                names[e["tid"]] = e["args"]["name"]
        agg = collections.defaultdict(lambda: [0, 0.0])
        for e in ev:
            if e.get("ph") == "X" and not e["name"].startswith("wait "):
                k = (names.get(e["tid"], str(e["tid"])), e["name"])
                agg[k][0] += 1
                agg[k][1] += e.get("dur", 0) / 1e3
        print(f)
        for (thr, name), (n, ms) in sorted(agg.items(), key=lambda x: -x[1][1])[:top]:
            print(f"  {thr:14s} {name:20s} n={n:6d} ms={ms:10.1f} mean={ms / n:8.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
