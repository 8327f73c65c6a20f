"""Opens a uvmpool memory snapshot with torch's own viewer functions (torch.cuda._memory_viz), the code
behind pytorch.org/memory_viz, and compares its keys with a snapshot PyTorch takes of itself.
  python3 snapshot_viz.py SNAPSHOT.pickle OUT_DIR
Prints one line 'UVMPOOL_SNAPSHOT_VIZ ok|FAIL ...'; writes the rendered HTML pages into OUT_DIR."""
import os, pickle, sys
import torch
from torch.cuda import _memory_viz as viz

path, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
with open(path, "rb") as f:
    ours = pickle.load(f)
problems = []
# PyTorch's own snapshot of a small allocation history, for the key sets.
torch.cuda.memory._record_memory_history(max_entries=1000)
x = torch.empty(1 << 20, device="cuda"); del x
theirs = torch.cuda.memory._snapshot()
torch.cuda.memory._record_memory_history(enabled=None)
def keys(d): return set(d.keys()) if isinstance(d, dict) else set()
for what, a, b in [("top", ours, theirs),
                   ("segment", (ours["segments"] or [{}])[0], (theirs["segments"] or [{}])[0]),
                   ("block", ((ours["segments"] or [{}])[0].get("blocks") or [{}])[0],
                    ((theirs["segments"] or [{}])[0].get("blocks") or [{}])[0]),
                   ("trace entry", next((e for t in ours["device_traces"] for e in t), {}),
                    next((e for t in theirs["device_traces"] for e in t), {}))]:
    missing = keys(b) - keys(a)
    if missing: problems.append(f"{what} lacks {sorted(missing)}")
# The flamegraph renderers (memory, segments) download flamegraph.pl, which a GPU machine without a
# network cannot: only the two HTML pages the browser viewer also draws are rendered.
for name, render in [("segment_plot", viz.segment_plot), ("trace_plot", viz.trace_plot)]:
    try:
        html = render(ours)
        with open(os.path.join(out, f"{name}.html"), "w") as f: f.write(html if isinstance(html, str) else str(html))
    except Exception as e:  # a renderer that chokes on the file is what this check is for
        problems.append(f"{name}: {type(e).__name__}: {e}")
n = sum(len(t) for t in ours["device_traces"])
print(f"UVMPOOL_SNAPSHOT_VIZ {'ok' if not problems else 'FAIL'} torch {torch.__version__}: "
      f"{len(ours['segments'])} segments, {n} trace entries on {len(ours['device_traces'])} devices"
      + ("" if not problems else "; " + "; ".join(problems)))
sys.exit(1 if problems else 0)
