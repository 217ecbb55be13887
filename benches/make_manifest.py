"""Writes a synthetic archive manifest of N valid chained lines (adds), spread over a year of
partition dates, for timing `toolwatch verify`. Usage: make_manifest.py DATA_DIR N"""
import hashlib, json, os, sys
data, n = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(data, "manifest"), exist_ok=True)
prev = "genesis"
t0 = 1767225600_000_000_000
with open(os.path.join(data, "manifest", "0badc0de.jsonl"), "w") as f:
    for i in range(1, n + 1):
        day = (i * 365) // n
        date = f"2026-{1 + day // 31 % 12:02d}-{1 + day % 28:02d}"
        e = {"seq": i, "time_ns": t0 + i * 1_000_000, "op": "add",
             "path": f"spans/tenant=tenant-{i % 1000}/date={date}/hour={i % 24:02d}/part-20260101T000000000Z-0badc0de-{i:06d}_j0123abcd_{i}-{i}.parquet",
             "table": "spans", "rows": 1000, "bytes": 52000,
             "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
             "records": [i, i], "reason": "flush", "prev": prev}
        line = json.dumps(e, separators=(",", ":"))
        prev = hashlib.sha256(line.encode()).hexdigest()
        f.write(line + "\n")
