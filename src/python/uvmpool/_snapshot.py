"""A uvmpool trace (UVMPOOL_TRACE) as a PyTorch memory snapshot, for pytorch.org/memory_viz and
torch.cuda._memory_viz:

    python3 -m uvmpool snapshot OUT.pickle TRACE.json   # from a trace file (finished, or still being written)
    python3 -m uvmpool snapshot OUT.pickle PID          # a running process started with UVMPOOL_TRACE
    uvmpool-stat --snapshot OUT.pickle (TRACE.json | PID)   # the same

PyTorch's own format (torch.cuda.memory._snapshot()): a pickled dict of
  segments       the mappings live at the end of the trace, one segment per mapped range
                 (is_expandable, as PyTorch's VMM segments), with its live allocations as
                 'active_allocated' blocks and the gaps as 'inactive' ones;
  device_traces  one list per device, in order: 'segment_map' / 'segment_unmap' when chunks are
                 mapped into or unmapped from a range, 'alloc' at an allocation, 'free_requested'
                 and 'free_completed' at its free, 'oom' at a refusal;
plus 'allocator_settings' and 'uvmpool' (where it came from, what was left out).

Host-resident memory (spilled chunks, premapped host runs, slabs in host memory) is on its own
pseudo-device, index 1 + the highest device in the trace (device 1 for a one-GPU process), as
PyTorch puts non-CUDA memory after its devices: a mapping's device chunks are a segment on its
device, its host chunks (its tail) a segment on the host device, and an allocation that straddles
both is a block in each.

The trace does not give a global order: each thread's events are in order, but times across threads
are approximate (docs/observability.md, Times). Events are merged by time, and an event that cannot
have happened yet (a free before its allocation reached the file from another thread, an allocation
in a range not yet mapped) waits for the events that make it possible. One that never becomes
possible (events the trace dropped) is left out and counted in snapshot['uvmpool'].

Standard library only; runs as a file too (uvmpool-stat runs an installed copy).
"""
import bisect
import heapq
import json
import os
import pickle
import re
import sys
from collections import deque

# How long an event may wait for the events that make it possible while later ones go ahead: far
# above the trace's timestamp error (at most 50 ms), so only an event that can never happen is
# left out.
_GIVE_UP_US = 1_000_000
_CATEGORY = re.compile(r"^device(\d+)$")
# Protocol 4: the highest the viewer's own unpickler reads (MemoryViz.js takes 2 to 4).
PICKLE_PROTOCOL = 4


class SnapshotError(Exception):
    """The source cannot be read or found; the message says why and what to do."""


# ---------------------------------------------------------------------------------------------
# Reading the trace


def _read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError as e:
        raise SnapshotError(f"cannot read {path}: {e.strerror}") from None


def load_trace_events(path):
    """The events of a trace file; a file still being written (no closing ']', a cut last line) is
    read as far as it goes. Returns (events, complete)."""
    text = _read_text(path)
    try:
        data = json.loads(text)
        events = data.get("traceEvents", []) if isinstance(data, dict) else data
        return [e for e in events if isinstance(e, dict)], True
    except json.JSONDecodeError:
        pass
    events = []
    for line in text.splitlines():  # uvmpool writes one event per line
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return events, False


class _Event:
    __slots__ = ("kind", "time", "seq", "tid", "device", "addr", "size", "host")

    def __init__(self, kind, time, seq, tid, device, addr, size, host):
        self.kind, self.time, self.seq, self.tid = kind, time, seq, tid
        self.device, self.addr, self.size, self.host = device, addr, size, host


def _int(v, default=0):
    try:
        return int(v, 0) if isinstance(v, str) else int(v)
    except (TypeError, ValueError):
        return default


class _Source:
    """What the converter takes from the trace: per-thread event queues and the trace's notes."""

    def __init__(self, events, complete):
        self.complete = complete
        self.queues = {}  # tid -> deque of _Event, in file order (= the thread's order)
        self.thread_names = {}
        self.command = None
        self.pid = None
        self.devices = set()
        self.driver_allocations = 0
        self.trace_dropped = 0
        self.trace_note = None
        seq = 0
        for e in events:
            ph, name, args = e.get("ph"), e.get("name", ""), e.get("args") or {}
            tid = e.get("tid", 0)
            if ph == "M":
                if name == "process_name":
                    self.command, self.pid = args.get("name"), e.get("pid")
                elif name == "thread_name":
                    self.thread_names[tid] = args.get("name", "")
                continue
            if name in ("uvmpool trace truncated", "uvmpool trace dropped events"):
                self.trace_note, self.trace_dropped = name, _int(args.get("dropped"))
                continue
            if name == "driver allocation":
                self.driver_allocations += ph == "b"
                continue
            m = _CATEGORY.match(e.get("cat", ""))
            if not m or "ts" not in e:
                continue
            device, ts = int(m.group(1)), float(e["ts"])
            if ph == "b" and name == "allocation":
                ev = ("alloc", ts, _int(args.get("address", e.get("id"))), _int(args.get("bytes")),
                      _int(args.get("host_bytes")))
            elif ph == "e" and name == "allocation":
                ev = ("free", ts, _int(e.get("id")), _int(args.get("bytes")), 0)
            elif ph == "X" and name == "mapping":  # at its end: the chunks are mapped once it is over
                ev = ("map", ts + float(e.get("dur", 0)), _int(args.get("address")), _int(args.get("bytes")),
                      _int(args.get("host_bytes")))
            elif ph == "i" and name == "unmap":
                ev = ("unmap", ts, _int(args.get("address")), _int(args.get("bytes")), _int(args.get("host_bytes")))
            elif ph == "i" and name == "out of memory":
                ev = ("oom", ts, 0, _int(args.get("bytes")), 0)
            else:
                continue
            kind, time, addr, size, host = ev
            self.devices.add(device)
            self.queues.setdefault(tid, deque()).append(_Event(kind, time, seq, tid, device, addr, size, host))
            seq += 1


# ---------------------------------------------------------------------------------------------
# The state the events are replayed into


class _Ranges:
    """Disjoint address ranges, each with its pseudo-device, sorted by start."""

    def __init__(self):
        self.starts, self.items = [], []  # items: [start, end, pdev]

    def overlaps(self, a, b):
        i = bisect.bisect_left(self.starts, b) - 1
        return i >= 0 and self.items[i][1] > a

    def cover(self, a, b):
        """The pieces (pdev, start, end) of [a, b) if mapped throughout, else None."""
        i = bisect.bisect_right(self.starts, a) - 1
        pieces, at = [], a
        while at < b:
            if i < 0 or i >= len(self.items) or self.items[i][0] > at or self.items[i][1] <= at:
                return None
            s, e, pdev = self.items[i]
            end = min(e, b)
            if pieces and pieces[-1][0] == pdev and pieces[-1][2] == at:
                pieces[-1] = (pdev, pieces[-1][1], end)
            else:
                pieces.append((pdev, at, end))
            at, i = end, i + 1
        return pieces

    def add(self, a, b, pdev):
        i = bisect.bisect_left(self.starts, a)
        self.starts.insert(i, a)
        self.items.insert(i, [a, b, pdev])

    def remove(self, a, b):
        """Removes [a, b) (mapped throughout), splitting the ranges it cuts."""
        i = bisect.bisect_right(self.starts, a) - 1
        while i < len(self.items) and self.items[i][0] < b:
            s, e, pdev = self.items[i]
            del self.starts[i], self.items[i]
            if e > b:
                self.starts.insert(i, b)
                self.items.insert(i, [b, e, pdev])
            if s < a:
                self.starts.insert(i, s)
                self.items.insert(i, [s, a, pdev])
                i += 1
            if e > b:
                break


class _Replay:
    def __init__(self, source, host_device):
        self.src = source
        self.host = host_device
        self.traces = [[] for _ in range(host_device + 1)]
        self.mapped = _Ranges()
        self.live = {}          # address -> (pieces, bytes, frames)
        self.live_starts = []   # sorted addresses of live allocations (they never overlap)
        self.left_out = {"alloc": 0, "free": 0, "map": 0, "unmap": 0}
        self.split_mismatch = 0  # allocations whose host_bytes disagree with where their mapping's chunks lie
        self.frames = {}

    # Frames: PyTorch shows a stack per event; the trace has the thread that caused it.
    def _frames(self, tid, what):
        key = (tid, what)
        f = self.frames.get(key)
        if f is None:
            name = self.src.thread_names.get(tid, "")
            thread = f"thread {name} ({tid})" if name else f"thread {tid}"
            f = self.frames[key] = [{"filename": "uvmpool", "line": 0, "name": f"{what}, {thread}"}]
        return f

    def _entry(self, pdev, action, addr, size, ev, frames):
        # compile_context and user_metadata: keys torch 2.11's own entries carry (empty: uvmpool knows neither).
        self.traces[pdev].append({"action": action, "addr": addr, "size": size, "stream": 0,
                                  "time_us": int(ev.time), "frames": frames, "compile_context": "",
                                  "user_metadata": ""})

    def _live_overlaps(self, a, b):
        i = bisect.bisect_left(self.live_starts, a)
        if i < len(self.live_starts) and self.live_starts[i] < b:
            return True
        if i > 0:
            s = self.live_starts[i - 1]
            return s + self.live[s][1] > a
        return False

    def ready(self, ev):
        if ev.kind == "alloc":
            return ev.size > 0 and ev.addr not in self.live and self.mapped.cover(ev.addr, ev.addr + ev.size) is not None
        if ev.kind == "free":
            return ev.addr in self.live
        if ev.kind == "map":
            return ev.size > 0 and not self.mapped.overlaps(ev.addr, ev.addr + ev.size)
        if ev.kind == "unmap":
            a, b = ev.addr, ev.addr + ev.size
            return ev.size > 0 and self.mapped.cover(a, b) is not None and not self._live_overlaps(a, b)
        return True  # oom

    def apply(self, ev):
        a, b = ev.addr, ev.addr + ev.size
        if ev.kind == "map":
            host = min(ev.host, ev.size)
            frames = self._frames(ev.tid, "mapped")
            if ev.size > host:
                self.mapped.add(a, b - host, ev.device)
                self._entry(ev.device, "segment_map", a, ev.size - host, ev, frames)
            if host:
                self.mapped.add(b - host, b, self.host)
                self._entry(self.host, "segment_map", b - host, host, ev, frames)
        elif ev.kind == "unmap":
            frames = self._frames(ev.tid, "unmapped")
            for pdev, s, e in self.mapped.cover(a, b):
                self._entry(pdev, "segment_unmap", s, e - s, ev, frames)
            self.mapped.remove(a, b)
        elif ev.kind == "alloc":
            pieces = self.mapped.cover(a, b)
            host = sum(e - s for pdev, s, e in pieces if pdev == self.host)
            if host != ev.host:
                self.split_mismatch += 1
            what = f"allocation of {_size(ev.size)}" + (f", {_size(host)} of it in host memory" if host else "")
            frames = self._frames(ev.tid, what)
            for pdev, s, e in pieces:
                self._entry(pdev, "alloc", s, e - s, ev, frames)
            self.live[a] = (pieces, ev.size, frames)
            bisect.insort(self.live_starts, a)
        elif ev.kind == "free":
            pieces, _, _ = self.live.pop(a)
            del self.live_starts[bisect.bisect_left(self.live_starts, a)]
            frames = self._frames(ev.tid, "freed")
            for pdev, s, e in pieces:
                self._entry(pdev, "free_requested", s, e - s, ev, frames)
                self._entry(pdev, "free_completed", s, e - s, ev, frames)
        elif ev.kind == "oom":
            # PyTorch's refusal names what CUDA had free; uvmpool refuses when device and host are both full.
            self.traces[ev.device].append({"action": "oom", "device_free": 0, "size": ev.size, "stream": 0,
                                           "time_us": int(ev.time), "frames": self._frames(ev.tid, "refused"),
                                           "compile_context": "", "user_metadata": ""})

    def run(self):
        """Merges the threads' queues by time; an event waits until it is possible (see the top)."""
        queues = {tid: q for tid, q in self.src.queues.items() if q}
        pending = [(q[0].time, q[0].seq, tid) for tid, q in queues.items()]
        heapq.heapify(pending)
        blocked = {}  # tid -> (time, seq) of a head that is not possible yet

        def advance(tid):
            q = queues[tid]
            q.popleft()
            if q:
                heapq.heappush(pending, (q[0].time, q[0].seq, tid))

        def unblock():
            for tid, (t, s) in blocked.items():
                heapq.heappush(pending, (t, s, tid))
            blocked.clear()

        while pending or blocked:
            oldest = min(blocked.items(), key=lambda kv: kv[1]) if blocked else None
            if oldest and (not pending or oldest[1][0] < pending[0][0] - _GIVE_UP_US):
                tid = oldest[0]
                del blocked[tid]
                self.left_out[queues[tid][0].kind] += 1
                advance(tid)
                unblock()
                continue
            t, s, tid = heapq.heappop(pending)
            ev = queues[tid][0]
            if self.ready(ev):
                self.apply(ev)
                advance(tid)
                if blocked:
                    unblock()
            else:
                blocked[tid] = (t, s)

    def segments(self):
        """The final state: one segment per mapped range (ranges that a live allocation spans are
        one segment), its live allocations as blocks and the gaps between them."""
        groups = []
        for s, e, pdev in self.mapped.items:
            if groups and groups[-1][2] == pdev and groups[-1][1] == s and self._spans(s):
                groups[-1][1] = e
            else:
                groups.append([s, e, pdev])
        pieces = sorted((s, e, pdev, size, frames) for _, (ps, size, frames) in self.live.items() for pdev, s, e in ps)
        out, k = [], 0
        for s, e, pdev in groups:
            blocks, at, active = [], s, 0
            while k < len(pieces) and pieces[k][0] < e:
                ps, pe, ppdev, _, frames = pieces[k]
                k += 1
                if ppdev != pdev or ps < s:  # cannot happen: pieces come from the mapped ranges
                    continue
                if ps > at:
                    blocks.append(_block(at, ps - at, 0, "inactive", []))
                blocks.append(_block(ps, pe - ps, pe - ps, "active_allocated", frames))
                active += pe - ps
                at = pe
            if at < e:
                blocks.append(_block(at, e - at, 0, "inactive", []))
            out.append({"device": pdev, "address": s, "total_size": e - s, "allocated_size": active,
                        "active_size": active, "requested_size": active, "stream": 0, "segment_type": "large",
                        "segment_pool_id": (0, 0), "is_expandable": True, "frames": [], "blocks": blocks})
        return out

    def _spans(self, x):
        """Whether a live allocation covers both sides of address x."""
        i = bisect.bisect_right(self.live_starts, x - 1) - 1
        return i >= 0 and self.live_starts[i] < x < self.live_starts[i] + self.live[self.live_starts[i]][1]


def _block(addr, size, requested, state, frames):
    return {"address": addr, "size": size, "requested_size": requested, "state": state, "frames": frames}


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0


# ---------------------------------------------------------------------------------------------
# The API


def from_trace(path):
    """The snapshot dict of the trace file at `path`."""
    events, complete = load_trace_events(path)
    src = _Source(events, complete)
    host = max(src.devices) + 1 if src.devices else 1
    r = _Replay(src, host)
    r.run()
    left_out = sum(r.left_out.values())
    return {
        "segments": r.segments(),
        "device_traces": r.traces,
        "allocator_settings": {"expandable_segments": True},
        "external_annotations": [],  # torch 2.11's snapshot has it (annotations from record_annotation)
        "uvmpool": {
            "source": path, "pid": src.pid, "command": src.command, "host_device": host,
            "devices": sorted(src.devices), "trace_complete": complete,
            "trace_dropped_events": src.trace_dropped, "events_left_out": left_out,
            "events_left_out_by_kind": dict(r.left_out), "host_split_mismatches": r.split_mismatch,
            "driver_allocations_not_shown": src.driver_allocations,
        },
    }


def find_trace(pid):
    """The trace file of the running process `pid` (started with UVMPOOL_TRACE): a path to read it
    by (its open descriptor when it has one) and its name."""
    proc = f"/proc/{pid}"
    try:
        with open(f"{proc}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except FileNotFoundError:
        raise SnapshotError(f"no process {pid}") from None
    except PermissionError:
        raise SnapshotError(f"cannot read the environment of process {pid} (another user's; run as that user or root)") \
            from None
    value = None
    for item in env:
        if item.startswith(b"UVMPOOL_TRACE="):
            value = item[len(b"UVMPOOL_TRACE="):].decode(errors="replace")
    if not value:
        raise SnapshotError(
            f"process {pid} was not started with UVMPOOL_TRACE, and the live statistics hold counters only: "
            f"start it with UVMPOOL_TRACE=/path/trace-%p.json (or uvmpool-run --trace FILE) to take snapshots of it")
    name = value.replace("%p", str(pid))
    cwd = None
    try:
        cwd = os.readlink(f"{proc}/cwd")
    except OSError:
        pass
    wanted = os.path.normpath(name if os.path.isabs(name) or cwd is None else os.path.join(cwd, name))
    # The writer keeps the file open: its descriptor reads it even if the name has moved since.
    try:
        for fd in os.listdir(f"{proc}/fd"):
            try:
                target = os.readlink(f"{proc}/fd/{fd}")
            except OSError:
                continue
            if target == wanted or (not os.path.isabs(name) and target.endswith("/" + os.path.normpath(name))):
                return f"{proc}/fd/{fd}", target
    except OSError:
        pass
    if os.path.isfile(wanted):
        return wanted, wanted
    raise SnapshotError(
        f"process {pid} has UVMPOOL_TRACE={value}, but {wanted} is not open in it nor readable "
        f"(has it reached uvmpool yet? its log says whether the trace started)")


def snapshot(source, out=None):
    """The snapshot of `source` (a trace file, or the pid of a running process started with
    UVMPOOL_TRACE) as PyTorch's dict; written to `out` (pickle) when given."""
    if isinstance(source, int) or (isinstance(source, str) and source.isdigit() and not os.path.exists(source)):
        read, name = find_trace(int(source))
        data = from_trace(read)
        data["uvmpool"]["source"] = name
    else:
        data = from_trace(str(source))
    if out is not None:
        tmp = f"{out}.tmp{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                pickle.dump(data, f, protocol=PICKLE_PROTOCOL)
            os.replace(tmp, out)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise SnapshotError(f"cannot write {out}: {e.strerror}") from None
    return data


def summary(data):
    u = data["uvmpool"]
    lines = []
    for dev in range(len(data["device_traces"])):
        segs = [s for s in data["segments"] if s["device"] == dev]
        entries = len(data["device_traces"][dev])
        if not segs and not entries:
            continue
        label = f"host (device {dev})" if dev == u["host_device"] else f"device {dev}"
        mapped = sum(s["total_size"] for s in segs)
        live = sum(s["allocated_size"] for s in segs)
        lines.append(f"  {label}: {len(segs)} segments, {_size(mapped)} mapped, {_size(live)} live; {entries} trace entries")
    notes = []
    if not u["trace_complete"]:
        notes.append("the trace was still being written (or its process was killed): read as far as it goes")
    if u["trace_dropped_events"]:
        notes.append(f"the trace itself dropped {u['trace_dropped_events']} events ({u.get('source')})")
    if u["events_left_out"]:
        notes.append(f"{u['events_left_out']} events did not fit what came before and were left out")
    if u["driver_allocations_not_shown"]:
        notes.append(f"{u['driver_allocations_not_shown']} allocations passed to the driver are not shown")
    return "\n".join(lines + [f"  note: {n}" for n in notes])


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] in ("-h", "--help"):
        print("usage: snapshot OUT (TRACE.json | PID)\n"
              "Writes a PyTorch memory snapshot (open it at https://pytorch.org/memory_viz) of a uvmpool trace\n"
              "file, or of the running process PID started with UVMPOOL_TRACE.",
              file=sys.stdout if args[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    out, source = args
    try:
        data = snapshot(source, out)
    except SnapshotError as e:
        print(f"uvmpool snapshot: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} from {data['uvmpool']['source']}; open it at https://pytorch.org/memory_viz")
    s = summary(data)
    if s:
        print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
