#!/usr/bin/env python3
"""Writes the launches of a uvmpool trace (UVMPOOL_TRACE=file, with tiering on) as a launch sequence
that the tiering policy can be replayed on (build/bin/uvmpool-policy-replay, tests/tiering/policy_test.cpp):

    python3 scripts/uvmpool-launches.py TRACE.json [-o out.launches]

One line a launch, in the order the hooks saw them: "l F B[+OFF][h] ...", F the launch's function
and each B a buffer it touched ("h": the buffer lay in host memory at the launch), numbered from 0 in
order of first sight, OFF the pointer's offset in it in bytes (left out when 0; a launch passing two
pointers into one buffer has a word for each). A buffer is the allocation a pointer lies in (from
the trace's allocation events, at the launch's time), so pointers into one allocation are one
buffer, as the policy counts them; a buffer's first appearance is preceded by "b B BYTES", and its
allocation's end by "f B". Only the first device's launches are written.
"""
import argparse
import bisect
import os
import sys

# The trace reader of uvmpool's Python package (src/python), which reads a killed process's trace too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "python"))
from uvmpool._snapshot import load_trace_events  # noqa: E402


class Allocations:
    """The live allocations, by address, as the trace's allocation begin/end events say."""

    def __init__(self):
        self.starts, self.sizes = [], {}

    def add(self, address, size):
        if address not in self.sizes:
            bisect.insort(self.starts, address)
        self.sizes[address] = size

    def remove(self, address):
        if address in self.sizes:
            del self.sizes[address]
            self.starts.remove(address)

    def base(self, pointer):
        i = bisect.bisect_right(self.starts, pointer) - 1
        if i >= 0 and pointer < self.starts[i] + self.sizes[self.starts[i]]:
            return self.starts[i]
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", default="-")
    args = ap.parse_args()
    evs = [e for e in load_trace_events(args.trace)[0] if e.get("cat") == "device0"]
    evs.sort(key=lambda e: float(e.get("ts", 0)))  # stable: a launch's touches stay behind it
    allocations = Allocations()
    functions, buffers, count = {}, {}, 0
    lines, launch = [], {}  # by thread: the launch whose touches come next (threads launch at once)

    for e in evs:
        name, a = e.get("name"), e.get("args", {})
        if name == "allocation" and e.get("ph") == "b":
            allocations.add(int(a["address"], 16), int(a["bytes"]))
        elif name == "allocation" and e.get("ph") == "e":
            address = int(e["id"], 16)
            size = allocations.sizes.get(address)
            allocations.remove(address)
            if (address, size) in buffers:  # freed: the address may come back as another buffer
                lines.append(f"f {buffers.pop((address, size))}")
        elif name == "launch":
            # Its line now, in launch order; its touches fill it in as they come.
            function = functions.setdefault(a["function"], len(functions))
            launch[e.get("tid")] = (function, [], len(lines))
            lines.append(f"l {function}")
        elif name == "touch" and e.get("tid") in launch:
            function, words, at = launch[e.get("tid")]
            pointer = int(a["address"], 16)
            base = allocations.base(pointer)
            key = (base, int(a["bytes"])) if base is not None else (pointer, int(a["bytes"]))
            if key not in buffers:
                buffers[key] = count
                count += 1
                lines.insert(at, f"b {buffers[key]} {key[1]}")  # before the launch's line
                for t, (f, w, i) in launch.items():  # every open launch's line moved down by one
                    if i >= at:
                        launch[t] = (f, w, i + 1)
                function, words, at = launch[e.get("tid")]
            offset = pointer - base if base is not None else 0
            word = str(buffers[key]) + (f"+{offset}" if offset else "") + ("h" if int(a.get("host_bytes", 0)) > 0 else "")
            if word.rstrip("h") not in (w.rstrip("h") for w in words):
                words.append(word)
            lines[at] = "l " + " ".join([str(function)] + words)
    out = sys.stdout if args.output == "-" else open(args.output, "w")
    out.write(f"# uvmpool launch sequence ({len(functions)} functions, {count} buffers), from a trace "
              "by scripts/uvmpool-launches.py\n")
    out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
