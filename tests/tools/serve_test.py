#!/usr/bin/env python3
"""uvmpool-stat --serve on the simulated driver: while a preloaded program that spills holds its
memory, curl reads /metrics and finds the program's figures with their labels (pid, program, device,
uuid, and pod/namespace/container from the program's environment); promtool accepts the text; bad
requests get 400/404, slow clients neither stall a scrape nor keep their connection; SIGTERM stops it.

usage: serve_test.py PRELOAD SIM_DIR CLIENT UVMPOOL_STAT CURL PROMTOOL
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


def curl(curl_bin, url, *args):
    start = time.monotonic()
    r = subprocess.run([curl_bin, "-sS", "--max-time", "5", *args, url], capture_output=True, text=True, timeout=30)
    return r, time.monotonic() - start


def start_server(tool, address):
    server = subprocess.Popen([tool, "--serve", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    m = re.match(r"uvmpool-stat: serving http://127\.0\.0\.1:(\d+)/metrics", line)
    if not m:
        server.kill()
        fail(f"the server did not start: {line!r} {server.stderr.read()}")
    return server, int(m.group(1))


def check_usage_errors(tool, port):
    for bad in ["nonsense", "127.0.0.1:99999", ":80", "[::1]"]:
        r = subprocess.run([tool, "--serve", bad], capture_output=True, text=True, timeout=10)
        if r.returncode != 2 or "bad address" not in r.stderr:
            fail(f"--serve {bad!r}: exit {r.returncode}, {r.stderr!r}; expected 2 and 'bad address'")
    r = subprocess.run([tool, "--serve", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=10)
    if r.returncode != 1 or "cannot listen" not in r.stderr:
        fail(f"a port in use: exit {r.returncode}, {r.stderr!r}; expected 1 and 'cannot listen'")


def check_bad_and_slow_clients(curl_bin, port, url):
    # Six connections that never finish their request, one that trickles a byte a second, and one
    # that sends garbage: each holds at most one worker, for at most the read timeout.
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
    for s in slow:
        s.sendall(b"GET /metr")
    trickle = socket.create_connection(("127.0.0.1", port))
    garbage = socket.create_connection(("127.0.0.1", port))
    garbage.sendall(b"\x00\xff\xfe NOT HTTP \x01\r\n\r\n")
    garbage.settimeout(5)
    answer = garbage.recv(4096)
    if not answer.startswith(b"HTTP/1.1 400"):
        fail(f"garbage got {answer[:80]!r}, expected a 400")
    trickle.sendall(b"G")
    r, took = curl(curl_bin, url)
    if r.returncode != 0 or "uvmpool_up" not in r.stdout or took > 1.5:
        fail(f"a scrape beside slow clients: exit {r.returncode} after {took:.2f} s: {r.stderr}")
    # The server drops a connection whose request has not come within its read timeout (2 s).
    start = time.monotonic()
    for s in slow:
        s.settimeout(6)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
    if time.monotonic() - start > 5:
        fail("slow clients kept their connections past the read timeout")
    for s in [*slow, trickle, garbage]:
        s.close()
    r, _ = curl(curl_bin, f"http://127.0.0.1:{port}/nope", "-o", "/dev/null", "-w", "%{http_code}")
    if r.stdout != "404":
        fail(f"/nope answered {r.stdout}, expected 404")


def main():
    preload, sim_dir, client, tool, curl_bin, promtool = sys.argv[1:7]
    for needed in (curl_bin, promtool):
        if not os.access(needed, os.X_OK):
            fail(f"{needed} is missing: bash scripts/install-deps.sh installs curl and prometheus (promtool)")
    env = dict(os.environ, LD_PRELOAD=preload, LD_LIBRARY_PATH=sim_dir, UVMPOOL_DEVICE_LIMIT="256M",
               UVMPOOL_SIM_DEVICE_MEMORY="1G", UVMPOOL_STATS_INTERVAL="10", POD_NAME="trainer-0",
               POD_NAMESPACE="ml", CONTAINER_NAME="main")
    proc = subprocess.Popen([client, "--hold"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    server = None
    try:
        m = re.match(r"ready (\d+) (\d+) (\d+)", proc.stdout.readline())
        if not m:
            fail("the client did not get ready")
        pid, live = int(m.group(1)), int(m.group(2))
        server, port = start_server(tool, "127.0.0.1:0")
        url = f"http://127.0.0.1:{port}/metrics"
        labels = (rf'pid="{pid}",program="client_observe",pod="trainer-0",namespace="ml",container="main",'
                  rf'device="0",uuid="GPU-[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}"')
        want = re.compile(rf"^uvmpool_live_bytes\{{{labels}\}} {live}$", re.M)
        for _ in range(300):  # the publisher refreshes every 10 ms
            r, _ = curl(curl_bin, url, "-D", "-")
            if r.returncode == 0 and want.search(r.stdout):
                break
            time.sleep(0.01)
        if not want.search(r.stdout):
            fail(f"no uvmpool_live_bytes of {live} with the labels {labels}:\n{r.stdout[:3000]}{r.stderr}")
        if not re.search(r"^Content-Type: text/plain; version=0\.0\.4", r.stdout, re.M | re.I):
            fail(f"content type:\n{r.stdout[:500]}")
        body = r.stdout.split("\n\n", 1)[1]  # text mode turned each CRLF into LF
        for family in ("uvmpool_up", "uvmpool_budget_bytes", "uvmpool_live_host_bytes", "uvmpool_allocations_total",
                       "uvmpool_hook_calls_total", "uvmpool_spilled_allocations_total", "uvmpool_exporter_processes"):
            if not re.search(rf"^# TYPE {family} ", body, re.M):
                fail(f"no family {family}")
        check = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            fail(f"promtool check metrics:\n{check.stdout}{check.stderr}")
        check_bad_and_slow_clients(curl_bin, port, url)
        check_usage_errors(tool, port)
        server.send_signal(signal.SIGTERM)
        if server.wait(timeout=5) != 0:
            fail(f"the server exited {server.returncode} on SIGTERM")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
        proc.communicate("go\n", timeout=60)
    print(f"serve: ok (pid {pid}, {live} bytes live, promtool clean)")


if __name__ == "__main__":
    main()
