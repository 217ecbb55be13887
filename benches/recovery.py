#!/usr/bin/env python3
"""Recovery after kill -9 with a full journal.

Usage: benches/recovery.py TOOLWATCH_BINARY [--journal-bytes 1GiB] [--tenants 3]

1. Starts `toolwatch serve` with `journal.max_bytes` = the given size and a throttled archive
   (`archive.pause_per_record`), and sends loadgen traffic until the journal is full (the
   daemon refuses with 429 and `toolwatch_journal_bytes` is within one segment of the bound).
2. `kill -9`s it.
3. Restarts it without the throttle and times: process start to "toolwatch ready" (journal
   scan, tail cut, consumer positions, the archive's de-duplication window read back), and
   then a SIGTERM right away, to exit: the archive, assembly and budgets replay everything
   they had not completed and complete their files (the daemon's clean-shutdown drain).
Checks that the archive then holds every span loadgen saw acknowledged, once.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import daemon


def start(binary, work, config_text, tag):
    config = os.path.join(work, f"{tag}.toml")
    with open(config, "w") as f:
        f.write(config_text)
    return daemon.start(binary, os.path.join(work, "data"), os.path.join(work, f"{tag}.log"), config)


def metric(admin, name):
    text = urllib.request.urlopen(f"http://{admin}/metrics").read().decode()
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def size(text):
    n, unit = re.fullmatch(r"(\d+)(KiB|MiB|GiB)", text).groups()
    return int(n) << {"KiB": 10, "MiB": 20, "GiB": 30}[unit]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--journal-bytes", default="1GiB")
    p.add_argument("--tenants", type=int, default=3)
    args = p.parse_args()
    limit = size(args.journal_bytes)
    work = tempfile.mkdtemp()
    segment = "64MiB" if limit >= (512 << 20) else "8MiB"
    common = f'[journal]\nmax_bytes = "{args.journal_bytes}"\nsegment_bytes = "{segment}"\n'
    proc, ready, _, _ = start(args.binary, work, common + '[archive]\npause_per_record = "200ms"\n', "fill")
    acked = os.path.join(work, "acked")
    load = subprocess.Popen(
        [args.binary, "loadgen", "--target", "http://" + ready["otlp_grpc"], "--requests", "10000000",
         "--batch", "50", "--concurrency", "4", "--tenants", str(args.tenants), "--acked-file", acked],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while metric(ready["admin"], "toolwatch_journal_bytes") < limit - size(segment):
        time.sleep(0.5)
    fill = metric(ready["admin"], "toolwatch_journal_bytes")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    load.terminate()
    load.wait()
    proc, ready, to_ready, log = start(args.binary, work, common, "recover")
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    to_exit = time.perf_counter() - t0
    log.seek(0)
    lines = [json.loads(l) for l in log if l.startswith("{")]
    opened = next(l for l in lines if l.get("message") == "journal opened")
    stopped = next(l for l in lines if l.get("message") == "toolwatch stopped")
    acked_spans = sum(1 for _ in open(acked))
    print(f"journal {fill / 2**20:,.0f} MiB of {args.journal_bytes} ({opened.get('next_record', 0) - 1:,} records); "
          f"{acked_spans:,} spans acknowledged before kill -9")
    print(f"restart to ready: {to_ready * 1000:,.0f} ms (journal scan {opened.get('took_ms')} ms); "
          f"SIGTERM to exit (replay and complete files): {to_exit:,.1f} s; "
          f"replayed into the archive on restart: {stopped['span_rows']:,} span rows")


if __name__ == "__main__":
    sys.exit(main())
