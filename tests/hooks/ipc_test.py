#!/usr/bin/env python3
"""CUDA IPC between two processes on the simulated driver (docs/architecture.md "CUDA IPC"): an
exporter and an importer, each tests/clients/client_ipc driven line by line, each with or without
uvmpool. One scenario per run; every check fails the test with what it saw.

usage: ipc_test.py PRELOAD SIM_DIR CLIENT SCENARIO
"""
import glob
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

MIB = 1 << 20
INVALID_VALUE, INVALID_CONTEXT = 1, 201
ANSWER_DEADLINE_S = 45  # well inside ctest's 120 s, so that a hang is told here, with its stacks


def process_tree(pid):
    """pid and its descendants, read from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def report_hang(proc, what):
    """A client gave no answer in time: print every thread's stack of it and its forked children
    (gdb, where it can attach), then kill them all, so the read in progress sees the end."""
    print(f"FAILED: {what}: no answer in {ANSWER_DEADLINE_S} s; the stacks of its processes follow", flush=True)
    tree = process_tree(proc.pid)
    for pid in tree:
        try:
            out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            out = f"(no stacks: {e})"
        print(f"--- process {pid} ---\n{out}", flush=True)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fail(msg):
    print("FAILED: " + msg)
    sys.exit(1)


class Client:
    def __init__(self, args, uvmpool=True, pool=True, extra=None, max_fds=None, preexec=None, wrapper=()):
        env = dict(os.environ, LD_LIBRARY_PATH=SIM_DIR, UVMPOOL_LOG_LEVEL="info")
        env.pop("LD_PRELOAD", None)
        if uvmpool:
            env["LD_PRELOAD"] = PRELOAD
            if not pool:
                env["UVMPOOL_POOL"] = "0"
        env.update(extra or {})
        self.args = args
        def before_exec():
            if max_fds:  # soft and hard: the simulator raises a soft limit to the hard one
                resource.setrlimit(resource.RLIMIT_NOFILE, (max_fds, max_fds))
            if preexec:
                preexec()
        if wrapper and "LD_PRELOAD" in env:  # the client's, not the wrapper's (an ASan build's
            wrapper = (*wrapper, "env", f"LD_PRELOAD={env.pop('LD_PRELOAD')}")  # leak check fails in it)
        self.proc = subprocess.Popen([*wrapper, CLIENT, *args], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=before_exec if max_fds or preexec else None)

    def line(self):
        watchdog = threading.Timer(ANSWER_DEADLINE_S, report_hang, (self.proc, self.args[0]))
        watchdog.start()
        try:
            out = self.proc.stdout.readline().strip()
        finally:
            watchdog.cancel()
        if not out:
            self.proc.kill()
            fail(f"{self.args[0]}: no answer; stderr: {self.proc.stderr.read()}")
        return out

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.line()

    def expect(self, cmd, want):
        got = self.ask(cmd)
        if got != want:
            fail(f"{self.args[0]} '{cmd}': got '{got}', want '{want}'")

    def finish(self):
        try:
            self.proc.stdin.write("exit\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        out, err = self.proc.communicate(timeout=30)
        if self.proc.returncode != 0:
            fail(f"{self.args[0]} exited {self.proc.returncode}: {out}{err}")
        return err


def exporter(size, **kw):
    e = Client(["export", str(size)], **kw)
    words = e.line().split()
    if len(words) != 4 or words[0] != "handle":
        fail(f"exporter: {words}")
    return e, words[1], int(words[3])


def importer(handle, want=0, **kw):
    i = Client(["import", handle], **kw)
    got = i.line()
    if got != f"open {want}":
        fail(f"importer: '{got}', want 'open {want}'; stderr: {i.proc.stderr.read() if want == 0 else ''}")
    return i


def user_dir():
    return f"/dev/shm/uvmpool-{os.geteuid()}"


def socket_of(pid):
    """The exporter's socket: ipc-<pid>-<token>, the token drawn when its server started; a path that
    does not exist when it has none (or several)."""
    found = glob.glob(f"{user_dir()}/ipc-{pid}-*")
    return found[0] if len(found) == 1 else f"{user_dir()}/ipc-{pid}-(none or {len(found)})"


def share_both_ways(size):
    """Bytes written by the exporter are read by the importer, and the other way round."""
    e, handle, legacy = exporter(size)
    if legacy != 1:
        fail(f"pool memory should be IS_LEGACY_CUDA_IPC_CAPABLE under uvmpool, got {legacy}")
    if not handle.startswith("55564d5049504331"):
        fail(f"not a uvmpool handle: {handle}")
    e.expect("again", "again same")  # the same handle each time it is asked for
    e.expect("ipc", "ipc opens 0 closes 0")
    i = importer(handle)
    wait_ipc(e, 1, 0)
    i.expect(f"pattern {size}", "pattern ok")
    i.expect(f"write 77 {size}", "write done")
    e.expect("check 77", "check ok")
    i.expect("close", "close 0")
    wait_ipc(e, 1, 1)
    i.finish()
    e.finish()


def data_both_ways():
    """A large allocation: several chunks, not a multiple of the chunk."""
    share_both_ways(6 * MIB + 12345)


def extents_and_chunks():
    """An allocation of two extents (UVMPOOL_EXTENT_SIZE, 32 MiB) and a tail of chunks: pieces of
    two sizes, each mapped whole by the importer."""
    share_both_ways(64 * MIB + 6 * MIB + 12345)


def small_allocation():
    """A slab slot: the importer maps its chunk and gets the slot's address inside it."""
    share_both_ways(3000)


def free_while_open():
    """The exporter frees while the importer holds the memory: it stays valid and unchanged in the
    importer (the pool does not reuse the chunks, however much the exporter allocates), and the pool
    frees it when the importer closes."""
    size = 8 * MIB
    e, handle, _ = exporter(size)
    i = importer(handle)
    e.expect("free", "free 0")
    e.expect("free", f"free {INVALID_VALUE}")  # a double free is still caught
    e.expect("get", f"get {INVALID_VALUE}")  # freed memory cannot be exported (as the driver)
    e.expect("churn 4", "churn done")
    i.expect(f"pattern {size}", "pattern ok")
    held = int(e.ask("live").split()[1])
    if held != 5 * size:
        fail(f"exporter live bytes {held}, want {5 * size}: the freed allocation should be held while open")
    i.expect("close", "close 0")
    for _ in range(100):  # the exporter's server sees the close
        live = int(e.ask("live").split()[1])
        if live == 4 * size:
            break
        time.sleep(0.05)
    else:
        fail(f"after the importer closed, the exporter still holds {live} live bytes, want {4 * size}")
    # Freed and closed: the handle opens nothing now.
    j = importer(handle, want=INVALID_VALUE)
    j.finish()
    i.finish()
    e.finish()


def exporter_exits_while_open():
    """The exporter exits while the importer holds the memory: still readable until closed; the
    exporter's socket is gone."""
    size = 4 * MIB
    e, handle, _ = exporter(size)
    i = importer(handle)
    pid = e.proc.pid
    if not os.path.exists(socket_of(pid)):
        fail(f"no socket at {socket_of(pid)} while exporting")
    e.finish()
    if os.path.exists(socket_of(pid)):
        fail(f"{socket_of(pid)} left behind after a normal exit")
    i.expect(f"pattern {size}", "pattern ok")
    i.expect("close", "close 0")
    i.finish()
    k = importer(handle, want=INVALID_VALUE)
    err = k.finish()
    if "cannot reach the exporter" not in err:
        fail(f"no clear log line for a dead exporter: {err}")


def tampered_handles():
    """A wrong secret, another allocation id, and an exporter pid that is not the socket's owner are
    refused with INVALID_VALUE and a log line; the real one still works afterwards."""
    size = 2 * MIB
    e, handle, _ = exporter(size)
    b = bytearray.fromhex(handle)
    secret = bytearray(b)
    secret[40] ^= 0x01  # the secret: bytes 32..47
    i = importer(secret.hex(), want=INVALID_VALUE)
    err = i.finish()
    if "refused" not in err:
        fail(f"importer: no clear log line for a wrong secret: {err}")
    other = bytearray(b)
    other[16] ^= 0x40  # the allocation id
    importer(other.hex(), want=INVALID_VALUE).finish()
    mine = bytearray(b)
    mine[8:12] = os.getpid().to_bytes(4, "little")  # a live process with no socket
    importer(mine.hex(), want=INVALID_VALUE).finish()
    ok = importer(handle)
    ok.expect(f"pattern {size}", "pattern ok")
    ok.expect("close", "close 0")
    ok.finish()
    err = e.finish()
    if "wrong secret" not in err:
        fail(f"exporter: no log line for the refused opens: {err}")


def double_close():
    """Closing twice: the second is refused with INVALID_VALUE and a log line."""
    e, handle, _ = exporter(2 * MIB)
    i = importer(handle)
    i.expect("close", "close 0")
    i.expect("close", f"close {INVALID_VALUE}")
    err = i.finish()
    if "closed already" not in err:
        fail(f"no log line for a double close: {err}")
    e.finish()


def driver_handles_pass_through():
    """The driver's own handles (cuMemAlloc memory under UVMPOOL_POOL=0, and without uvmpool at all)
    pass through uvmpool untouched to the simulated driver's legacy IPC, in every combination."""
    size = 3 * MIB
    for exp_uvmpool, imp_uvmpool in ((True, True), (False, True), (True, False), (False, False)):
        e, handle, legacy = exporter(size, uvmpool=exp_uvmpool, pool=False)
        if handle.startswith("55564d5049504331"):
            fail("UVMPOOL_POOL=0 memory got a uvmpool handle")
        if legacy != 1:
            fail(f"the driver's cuMemAlloc memory should be legacy-IPC capable, got {legacy}")
        i = importer(handle, uvmpool=imp_uvmpool)
        i.expect(f"pattern {size}", "pattern ok")
        i.expect(f"write 5 {size}", "write done")
        e.expect("check 5", "check ok")
        e.expect("free", "free 0")  # the driver's semantics: valid in the importer until closed
        i.expect(f"check 5 {size}", "check ok")
        i.expect("close", "close 0")
        i.finish()
        e.finish()


def importer_without_uvmpool():
    """A uvmpool handle reaching a process without uvmpool: a clear error, not a crash."""
    e, handle, _ = exporter(2 * MIB)
    i = importer(handle, want=INVALID_VALUE, uvmpool=False)
    err = i.finish()
    if "only a process running under uvmpool can open it" not in err:
        fail(f"no clear error without uvmpool: {err}")
    e.finish()


def retain_fallback():
    """NCCL's registration on pool memory: cuMemRetainAllocationHandle refuses (one chunk is not the
    allocation cuMemGetAddressRange describes), the memory is legacy-IPC capable, so NCCL takes the
    legacy path, which works; under UVMPOOL_POOL=0 the driver answers as before."""
    e, handle, _ = exporter(6 * MIB)
    e.expect("retain", f"retain legacy_capable 1 retain {INVALID_VALUE} path legacy")
    e.finish()
    n, _, _ = exporter(6 * MIB, pool=False)
    n.expect("retain", f"retain legacy_capable 1 retain {INVALID_VALUE} path legacy")
    n.finish()


def fork_keeps_server():
    """A forked child of the exporter that exits (running atexit handlers) leaves the parent's server
    and socket alone; a forked child of the importer that lives on does not keep the exporter from
    seeing the close."""
    size = 4 * MIB
    e, handle, _ = exporter(size)
    e.expect("fork", "fork done")
    if not os.path.exists(socket_of(e.proc.pid)):
        fail("the exporter's socket went with its forked child")
    i = importer(handle)  # served after the fork
    i.expect(f"pattern {size}", "pattern ok")
    i.expect("fork_hold 20", "fork_hold done")
    e.expect("free", "free 0")
    i.expect("close", "close 0")
    for _ in range(100):
        live = int(e.ask("live").split()[1])
        if live == 0:
            break
        time.sleep(0.05)
    else:
        fail(f"the importer's forked child kept the connection open: the exporter still holds {live} bytes")
    i.finish()
    e.finish()


def spilled_allocation():
    """An allocation partly in host memory (spilled past UVMPOOL_DEVICE_LIMIT) is exported too: its
    host chunks lie at the host NUMA node, which can have POSIX descriptors. Then a device handle
    the program creates itself is placed in host memory and still described as device memory."""
    size = 96 * MIB
    extra = {"UVMPOOL_DEVICE_LIMIT": "64M", "UVMPOOL_DEVICE_HEADROOM": "0"}
    e, handle, legacy = exporter(size, extra=extra)
    host = int(e.ask("live").split()[2])
    if host == 0:
        fail("the allocation did not spill: the test needs host chunks")
    if legacy != 1:
        fail(f"a spilled allocation should be exportable, got legacy capable {legacy}")
    i = importer(handle)
    i.expect(f"pattern {size}", "pattern ok")
    i.expect(f"write 3 {size}", "write done")
    e.expect("check 3", "check ok")
    i.expect("close", "close 0")
    i.finish()
    # The device is full: the program's own device cuMemCreate lands in host memory, and the handle's
    # properties still say device, as the program asked.
    e.expect("create", "create 0 location 1")
    e.finish()


def wait_live(e, want):
    for _ in range(100):
        live = int(e.ask("live").split()[1])
        if live == want:
            return
        time.sleep(0.05)
    fail(f"the exporter holds {live} live bytes, want {want}")


def wait_ipc(e, opens, closes):
    """Until the exporter has served `opens` opens of its exports and dealt with `closes` closes in
    all (ipc_opens_served, ipc_closes_seen: its server thread counts them after the importer's call
    returned)."""
    for _ in range(200):
        got = e.ask("ipc")
        if got == f"ipc opens {opens} closes {closes}":
            return
        if "-1" in got.split():
            fail(f"the exporter lacks a figure: {got}")
        time.sleep(0.01)
    fail(f"the exporter says '{got}', want {opens} opens and {closes} closes")


def freed_on_a_held_stream_and_closed(how):
    """An exported allocation open in an importer, freed with cuMemFreeAsync on a stream whose work
    the simulator holds (`how`: held, or held_elsewhere, a stream of a second context), then closed:
    still live in the exporter, since the stream's work has not completed. The exporter, importer and
    size, for the rest of the scenario."""
    size = 8 * MIB
    e, handle, _ = exporter(size)
    i = importer(handle)
    e.expect(f"free_async {how}", "free_async 0")
    i.expect("close", "close 0")
    wait_ipc(e, 1, 1)
    live = int(e.ask("live").split()[1])
    if live != size:
        fail(f"freed on a busy stream ({how}) and closed: live {live}, want {size} (freed before the stream's work ended)")
    return e, i, size


def async_free_while_open():
    """cuMemFreeAsync of memory open elsewhere, on a stream whose work is not done: after the last
    close the pool still does not free it (nor reuse it) until that work completes."""
    e, i, size = freed_on_a_held_stream_and_closed("held")
    # Freed already, though the pool has not freed it yet: a second free is a double free, and an
    # export of it is refused (before, the entry went at the close: both went through, and the deferred
    # free then freed the next allocation at that address).
    e.expect("free", "free 1")
    e.expect("get", "get 1")
    e.expect("alloc_same", "alloc_same other")
    e.expect("release", "release done")
    wait_live(e, size)  # the first allocation went; the new one is live
    i.finish()
    e.finish()


def async_free_on_another_contexts_stream():
    """The same on a stream of a second context of the device while the first is current: the event
    covering the stream's work is made in the stream's context (before, made in the current one, the
    driver refused to record it and the exporter waited for the stream on the spot, under its lock)."""
    e, i, _ = freed_on_a_held_stream_and_closed("held_elsewhere")
    e.expect("release", "release done")
    wait_live(e, 0)
    i.finish()
    err = e.finish()
    if "no event for its work" in err:
        fail(f"no event recorded on the other context's stream: {err}")


def capture_free_while_open():
    """cuMemFreeAsync during a graph capture of memory open elsewhere: never reused, also after the
    last close."""
    size = 8 * MIB
    e, handle, _ = exporter(size)
    i = importer(handle)
    e.expect("free_async capture", "free_async 0")
    i.expect("close", "close 0")
    wait_ipc(e, 1, 1)
    e.expect("alloc_same", "alloc_same other")
    i.finish()
    e.finish()


def low_descriptor_limit():
    """An allocation of more chunks than half the open-file limit (each simulated chunk is itself a
    descriptor in both processes): the descriptors travel in batches, so it is shared anyway."""
    size = 600 * MIB  # 300 chunks of 2 MiB, under a limit of 512 descriptors
    e, handle, _ = exporter(size, max_fds=512)
    i = importer(handle, max_fds=512)
    i.expect(f"pattern {size}", "pattern ok")
    i.expect("close", "close 0")
    i.finish()
    e.finish()


def slow_peers():
    """Peers that connect and say nothing, or send part of a request and stall, hold the exporter's
    server at most its deadline: an importer is served meanwhile, the silent ones are dropped, and
    the exporter exits promptly with one stalled mid-request."""
    size = 2 * MIB
    e, handle, _ = exporter(size)
    path = socket_of(e.proc.pid)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(path)
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.connect(path)
    stalled.send(b"I")  # one byte of a request, and no more
    t0 = time.monotonic()
    i = importer(handle)
    took = time.monotonic() - t0
    if took > 6:
        fail(f"an importer waited {took:.1f} s behind a stalled peer")
    i.expect("close", "close 0")
    i.finish()
    silent.settimeout(10)
    t0 = time.monotonic()
    try:
        got = silent.recv(1)
    except socket.timeout:
        fail("a connection that never sent a request was not dropped within 10 s")
    if got != b"" or time.monotonic() - t0 > 6:
        fail(f"a silent connection: got {got!r} after {time.monotonic() - t0:.1f} s, want it closed within its deadline")
    late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    late.connect(path)
    late.send(b"I")
    time.sleep(0.2)  # the server is in the middle of this request now
    t0 = time.monotonic()
    e.finish()
    if time.monotonic() - t0 > 5:
        fail(f"the exporter took {time.monotonic() - t0:.1f} s to exit with a stalled peer")
    for s_ in (silent, stalled, late):
        s_.close()


def wait_all_threads_stopped(pid, seconds=60):
    tasks = f"/proc/{pid}/task"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that exited meanwhile
                pass
        if states and all(s == "T" for s in states):
            return
        time.sleep(0.01)
    fail(f"process {pid} did not stop within {seconds} s of SIGSTOP")


def stopped_exporter():
    """An exporter that is stopped (SIGSTOP) with its listen backlog full: cuIpcOpenMemHandle gives up
    with an error and a log line instead of hanging in connect."""
    e, handle, _ = exporter(2 * MIB)
    path = socket_of(e.proc.pid)
    os.kill(e.proc.pid, signal.SIGSTOP)
    # kill() returns before every thread has stopped: until the last one has, the exporter's server
    # may still accept, and the importer below would then connect and wait for an answer instead.
    wait_all_threads_stopped(e.proc.pid)
    filler = []
    try:
        while len(filler) < 1000:  # fills the backlog (64) of a server that accepts nothing now
            s_ = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s_.setblocking(False)
            try:
                s_.connect(path)
            except (BlockingIOError, OSError):
                s_.close()
                break
            filler.append(s_)
        i = Client(["import", handle])
        try:
            out, err = i.proc.communicate(timeout=75)
        except subprocess.TimeoutExpired:
            i.proc.kill()
            fail("cuIpcOpenMemHandle hung in connect to a stopped exporter")
        if f"open {INVALID_VALUE}" not in out or "cannot reach the exporter" not in err:
            fail(f"a stopped exporter: got '{out.strip()}', log: {err}")
    finally:
        os.kill(e.proc.pid, signal.SIGCONT)
        for s_ in filler:
            s_.close()
    e.finish()


def same_pid_elsewhere():
    """Another process of the exporter's pid, in another pid namespace sharing /dev/shm (containers
    run with --ipc=host), serves at the name of the pid alone, as uvmpool before tokens named its
    socket: the exporter leaves that live socket alone, removes the stale ones of its pid (nothing
    listening), and serves at a name of its own, which its handle carries. Here the other process is
    this script: its listening socket is moved to the exporter's pid's names from the exporter's
    child before exec, so the names exist before the exporter starts serving."""
    live_path = f"{user_dir()}/ipc-test-live-{os.getpid()}"
    os.makedirs(user_dir(), mode=0o700, exist_ok=True)
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(live_path)
    live.listen(4)
    live_inode = os.stat(live_path).st_ino

    def plant():  # in the exporter's child, before exec
        pid = os.getpid()
        os.rename(live_path, f"{user_dir()}/ipc-{pid}")
        for name in (f"ipc-{pid}-00000000deadbeef", f"ipc-{pid}-x"):  # bound, then closed: stale
            stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stale.bind(f"{user_dir()}/{name}")
            stale.close()

    size = 2 * MIB
    e = Client(["export", str(size)], preexec=plant)
    words = e.line().split()
    if len(words) != 4 or words[0] != "handle":
        fail(f"exporter: {words}")
    handle, pid = words[1], e.proc.pid
    left = sorted(os.listdir(user_dir()))
    mine = [n for n in left if n == f"ipc-{pid}" or n.startswith(f"ipc-{pid}-")]
    if f"ipc-{pid}" not in mine or os.stat(f"{user_dir()}/ipc-{pid}").st_ino != live_inode:
        fail(f"the live socket of another process of pid {pid} was removed or replaced: {mine}")
    if any(n.endswith("-00000000deadbeef") or n.endswith("-x") for n in mine):
        fail(f"stale sockets of pid {pid} were left: {mine}")
    if len(mine) != 2:
        fail(f"want the other process's socket and one of the exporter's: {mine}")
    token = bytes.fromhex(handle)[48:56]
    if mine[1] != f"ipc-{pid}-{int.from_bytes(token, 'little'):016x}":
        fail(f"the exporter's socket {mine[1]} is not the one its handle names ({token.hex()})")
    i = importer(handle)
    i.expect(f"pattern {size}", "pattern ok")
    i.expect("close", "close 0")
    i.finish()
    err = e.finish()
    if "request did not arrive" in err or "sent no request" in err:
        fail(f"the exporter's liveness probe of the other socket was logged as a failed request: {err}")
    live.settimeout(5)
    try:
        probe, _ = live.accept()  # the exporter's liveness probe of it
        probe.close()
    except socket.timeout:
        fail("the exporter removed nothing and probed nothing: the live socket saw no connection")
    live.close()
    os.unlink(f"{user_dir()}/ipc-{pid}")


# A process of its own pid namespace (pid 1 there), as a container's first process is, with its own
# /proc (LeakSanitizer reads /proc/<its pid>/task); /dev/shm shared, as containers run with
# --ipc=host share it.
NEW_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--kill-child", "--mount-proc")
NOT_RUN = 77  # ctest's SKIP_RETURN_CODE for these tests: "Not Run", never "Passed"


def across_pid_namespaces():
    """CUDA IPC between containers that share /dev/shm but not pids (docker --ipc=host without
    --pid=host; vLLM's prefill and decode containers, Triton's server and client): the driver's own
    IPC fails there ("invalid device context"), uvmpool's does not. The exporter is pid 1 of a pid
    namespace of its own; its handle opens from this namespace, which sees it under another pid (its
    innermost pid is the handle's), and from a second new namespace, which cannot see it at all and
    whose importer is pid 1 too (the same pid as the handle's, yet not the exporter); the exporter's
    own open of it is still refused, as the driver refuses it. A socket at the handle's name whose
    owner is visible and another process is still refused."""
    try:
        subprocess.run([*NEW_PID_NAMESPACE, "true"], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"across_pid_namespaces: not run: cannot make a pid namespace here ({e})")
        sys.exit(NOT_RUN)
    size = 6 * MIB + 12345
    e = Client(["export", str(size)], wrapper=NEW_PID_NAMESPACE)
    words = e.line().split()
    if len(words) != 4 or words[0] != "handle":
        fail(f"exporter: {words}")
    handle = words[1]
    if int.from_bytes(bytes.fromhex(handle)[8:12], "little") != 1:
        fail(f"the exporter is not pid 1 of its own namespace: {handle}")
    e.expect("open_own", f"open_own {INVALID_CONTEXT}")  # its own handle, as the driver answers
    here = importer(handle)  # sees the exporter as a pid of this namespace
    here.expect(f"pattern {size}", "pattern ok")
    here.expect(f"write 77 {size}", "write done")
    e.expect("check 77", "check ok")
    elsewhere = importer(handle, wrapper=NEW_PID_NAMESPACE)  # pid 1, and sees pid 0 as the owner
    elsewhere.expect(f"check 77 {size}", "check ok")  # what the first importer wrote
    elsewhere.expect(f"write 78 {size}", "write done")
    e.expect("check 78", "check ok")
    wait_ipc(e, 2, 0)
    for i in (here, elsewhere):
        i.expect("close", "close 0")
        i.finish()
    wait_ipc(e, 2, 2)
    # A visible process that is not the one the handle names, listening at the handle's name (here
    # this script, at the name of a pid that no process of this namespace has): refused before the
    # secret is sent.
    b = bytearray.fromhex(handle)
    token = int.from_bytes(b[48:56], "little")
    absent = 4194304 - 7  # the kernel's highest pids: no process of this namespace has it here
    squatter_path = f"{user_dir()}/ipc-{absent}-{token:016x}"
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(squatter_path)
    squatter.listen(4)
    try:
        b[8:12] = absent.to_bytes(4, "little")
        i = importer(b.hex(), want=INVALID_VALUE)
        err = i.finish()
        if "is not the exporter" not in err:
            fail(f"importer: no clear log line for a socket owned by another process: {err}")
    finally:
        squatter.close()
        os.unlink(squatter_path)
    e.finish()


SCENARIOS = {f.__name__: f for f in (data_both_ways, extents_and_chunks, small_allocation, free_while_open, exporter_exits_while_open,
                                     tampered_handles, double_close, driver_handles_pass_through,
                                     importer_without_uvmpool, retain_fallback, fork_keeps_server,
                                     spilled_allocation, async_free_while_open, async_free_on_another_contexts_stream,
                                     capture_free_while_open,
                                     low_descriptor_limit, slow_peers, stopped_exporter, same_pid_elsewhere,
                                     across_pid_namespaces)}

if __name__ == "__main__":
    PRELOAD, SIM_DIR, CLIENT, scenario = sys.argv[1:5]
    SCENARIOS[scenario]()
    print(f"{scenario}: ok")
