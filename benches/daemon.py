"""`toolwatch serve` for the benchmark scripts: a fresh data directory, free ports, JSON logs,
and a wait for its "toolwatch ready" line."""

import json
import os
import subprocess
import time


def start(binary, data_dir, log_path, config=None, timeout=20.0):
    """Starts the daemon; returns (process, the ready line as a dict, seconds to ready, log)."""
    log = open(log_path, "w+")
    cmd = [binary, "serve", "--data-dir", data_dir, "--otlp-grpc", "127.0.0.1:0",
           "--otlp-http", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
    if config:
        cmd += ["--config", config]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=log, env=dict(os.environ, TOOLWATCH_LOG__FORMAT="json"))
    while time.perf_counter() - t0 < timeout:
        log.seek(0)
        ready = next((json.loads(l) for l in log if '"toolwatch ready"' in l), None)
        if ready:
            return proc, ready, time.perf_counter() - t0, log
        assert proc.poll() is None, "toolwatch exited:\n" + open(log_path).read()
        time.sleep(0.01)
    raise AssertionError("toolwatch did not start")
