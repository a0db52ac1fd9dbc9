"""Emulator cost per request as a session goes on: kmock's keep-every-request vs forgetting.

The same requests in batches, against an emulator that keeps every request (kmock 0.8's way,
`keep_requests = True`) and one that forgets answered ones (the default); the claim is the
ratio of the last batch's time to the first within each. Usage:

    python bench/emulator_growth.py [--batches 4 --per-batch 200]
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request

import common

from harness import EmulatorServer, make_emulator


def batch_seconds(keep: bool, batches: int, per_batch: int) -> list[float]:
    emulator = make_emulator()
    emulator.keep_requests = keep
    server = EmulatorServer(emulator)
    server.start()
    url = f"{server.url}/api/v1/namespaces/default/configmaps/missing"
    out = []
    try:
        for _ in range(batches):
            start = time.perf_counter()
            for _ in range(per_batch):
                try:
                    urllib.request.urlopen(url, timeout=5).close()
                except urllib.error.HTTPError as e:
                    e.close()  # 404: what the operator's GETs of missing children get
            out.append(time.perf_counter() - start)
    finally:
        server.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--per-batch", type=int, default=200)
    args = common.parse(p, argv, batches=2, per_batch=10)
    rows = []
    for keep in (True, False):
        times = batch_seconds(keep, args.batches, args.per_batch)
        label = "keeps every request (kmock 0.8)" if keep else "forgets answered (now)"
        rows.append([label, *(t * 1000 / args.per_batch for t in times), times[-1] / times[0]])
    header = ["emulator", *(f"ms/req batch {i + 1}" for i in range(args.batches)), "last/first"]
    print(common.table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
