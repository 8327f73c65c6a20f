"""Scoreboard rows 5 and 5b, fragmentation: the smallest device cap, as a fraction of the peak allocated
memory P, at which a training job with varying batch sizes and sequence lengths completes, spill off.

Workload: a GPT-2-small shape (transformers' GPT2LMHeadModel from a config; a plain-torch GPT-2 if that
fails), random weights from a fixed seed, bf16 autocast, AdamW, LM loss, over a fixed schedule of --steps
(batch 1-8, 32-1024 tokens of any length: irregular sizes are what cut up a caching allocator) drawn from
a fixed seed, its largest step in the second half. "Completes": no step raises out of memory.
P = torch.cuda.max_memory_allocated() over the whole schedule, model and optimizer states included, in
an uncapped native run, which also measures the context overhead (device memory beyond PyTorch's
allocator). Each configuration gets caps r x P for r on a grid 1.00 ... 1.50: 1.00 (the floor) and 1.02
(the target) are probed first, then the grid is bisected, assuming completion is monotonic in the cap
(a contradiction among the probes run is reported):
  native           PyTorch's caching allocator with set_per_process_memory_fraction(r P / total);
  expandable       the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (for both: one child,
                   probes in-process, everything dropped and the cache emptied between probes);
  uvmpool          PyTorch's default allocator, uncapped, on uvmpool: UVMPOOL_DEVICE_LIMIT = r P + the
                   context overhead, UVMPOOL_SPILL=0 (a child per probe: the limit is read at start);
  uvmpool-nocache  the same with PYTORCH_NO_CUDA_MEMORY_CACHING=1: uvmpool serves every tensor.
Fairness: PyTorch's cap bounds what its allocator reserves, UVMPOOL_DEVICE_LIMIT all the process holds
on the device; with the context overhead added, every allocator gets the same bytes for tensors, r x P.
Row 5: uvmpool (target <= 1.02); 5b: uvmpool-nocache (a figure). About 2 minutes on an H200.

  python3 score_frag.py --lib build/lib/libuvmpool.so [--configs native,expandable,uvmpool,uvmpool-nocache]
                        [--steps 24] [--timeout 90] [--budget 210] [--confirm]
"""
import argparse, copy, gc, os, random, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import (GIB, MIB, base_env, child_result, context_overhead_bytes, device_figures, fmt_bytes,
                               lib_path, run_child, score, uvmpool_env, uvmpool_report)

SHAPE = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)  # GPT-2 small
GRID = [1.00, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08, 1.09, 1.10, 1.12, 1.15, 1.20, 1.30, 1.50]
CONFIGS = {"native": {}, "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
           "uvmpool": {}, "uvmpool-nocache": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}}
SEED = 1234


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libuvmpool.so (default $UVMPOOL_LIB, else build/lib/libuvmpool.so)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="those to run (default all; native always measures P)")
    p.add_argument("--steps", type=int, default=24, help="training steps in the schedule")
    p.add_argument("--timeout", type=int, default=90, help="seconds each child may take")
    p.add_argument("--budget", type=int, default=210, help="seconds for the whole run: uvmpool probes stop past it "
                   "(scripts/scoreboard.sh gives 240)")
    p.add_argument("--confirm", action="store_true", help="uvmpool: also probe the grid ratio above the answer")
    p.add_argument("--child", choices=list(CONFIGS))
    p.add_argument("--search", action="store_true", help="child: bisect in-process (native, expandable)")
    p.add_argument("--peak", type=int, default=0, help="child: P in bytes (0: measure it uncapped first)")
    p.add_argument("--ratio", type=float, help="child: the ratio this uvmpool child probes (for its report)")
    return p.parse_args(argv)


def schedule(steps):
    rng = random.Random(SEED)
    s = [(rng.randint(1, 8), rng.randint(32, 1024)) for _ in range(steps)]
    # The largest step late: fragmentation costs most when the peak comes after the cache was cut up.
    big, late = max(range(steps), key=lambda i: s[i][0] * s[i][1]), max(0, steps - 2)
    if big < steps // 2:
        s[big], s[late] = s[late], s[big]
    return s


def search(probe, confirm):
    """1.00 and 1.02 first (the answers that matter), then bisection of the grid. probe(r) gives True
    (completed), False (out of memory) or None (crashed: stop)."""
    lo, hi, seen = -1, len(GRID), set()  # GRID[lo] failed, GRID[hi] completed (len: none did yet)

    def run(i):
        nonlocal lo, hi
        seen.add(i)
        ok = probe(GRID[i])
        if ok is not None:
            hi, lo = (min(hi, i), lo) if ok else (hi, max(lo, i))
        return ok is not None

    for i in (0, 2):
        if lo < i < hi and not run(i):
            return
    while hi - lo > 1:
        if not run((lo + hi) // 2):
            return
    if confirm and hi + 1 < len(GRID) and hi + 1 not in seen:  # monotonicity, checked where it matters
        run(hi + 1)


# ---------------------------------------------------------------------------------------------- child
def build_model(torch):
    """(model on the CPU in train mode, loss_fn(model, ids), description): the same weights everywhere."""
    torch.manual_seed(SEED)
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(**SHAPE)).train()
        if getattr(model.config, "tie_word_embeddings", True):  # as GPT-2: the head is the token embedding
            model.lm_head.weight = model.transformer.wte.weight
        loss_fn = lambda m, ids: m(input_ids=ids, labels=ids).loss
        with torch.no_grad():  # an API difference fails here, on the CPU, not in a probe
            loss_fn(model, torch.randint(0, SHAPE["vocab_size"], (1, 8))).item()
        attention = getattr(model.config, "_attn_implementation", "?")
        return model, loss_fn, f"transformers GPT2LMHeadModel, {attention} attention"
    except Exception as e:
        print(f"transformers' GPT-2 failed ({type(e).__name__}: {str(e)[:200]}); a plain-torch GPT-2 instead",
              flush=True)
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h, self.ln_1, self.ln_2 = h, nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = (t.view(B, T, self.h, D // self.h).transpose(1, 2) for t in self.qkv(self.ln_1(x)).split(D, 2))
            p = 0.1 if self.training else 0.0  # GPT2Config's dropouts
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True).transpose(1, 2).reshape(B, T, D)
            x = x + F.dropout(self.proj(y), p, self.training)
            return x + F.dropout(self.out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")), p, self.training)

    class GPT2(nn.Module):
        def __init__(self, vocab_size, n_positions, n_embd, n_layer, n_head):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(n_positions, n_embd)
            self.blocks, self.ln_f = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer)), nn.LayerNorm(n_embd)

        def forward(self, ids):
            x = F.dropout(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)), 0.1, self.training)
            for block in self.blocks:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # the head tied to the embedding
            return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), ids[:, 1:].flatten())

    torch.manual_seed(SEED)
    return GPT2(**SHAPE).train(), lambda m, ids: m(ids), "plain-torch GPT-2 (SDPA attention)"


def is_oom(torch, e):
    text = str(e)
    return (isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in text.lower()
            or "ALLOC_FAILED" in text)  # cuBLAS's word for a refused allocation


def probe(torch, base, loss_fn, sched, config, r, cap):
    """One run of the schedule on a fresh copy of the model; cap: bytes for PyTorch's allocator, or None."""
    if cap is not None:  # a fraction of cudaMemGetInfo's total: the figure the allocator multiplies
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / torch.cuda.mem_get_info()[1]))
    torch.manual_seed(SEED)  # the same dropout masks in every probe
    gen = torch.Generator().manual_seed(SEED + 1)
    res = {"config": config, "r": r, "cap": cap, "ok": False, "oom_at": None, "error": None, "loss": None}
    t0, at = time.perf_counter(), 0  # at: the step running (0: moving the model to the device)
    try:
        model = copy.deepcopy(base).to("cuda")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        for at, (b, t) in enumerate(sched, 1):
            ids = torch.randint(0, SHAPE["vocab_size"], (b, t), generator=gen).to("cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(model, ids)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            res["loss"] = loss.item()
        res["ok"] = True
    except Exception as e:  # the exception, and the frames holding tensors, go at the end of this block
        if is_oom(torch, e):
            res["oom_at"], res["shape"] = at, (list(sched[at - 1]) if at else None)
        else:
            res["error"] = f"{type(e).__name__} at step {at}: {str(e)[:300]}"
    try:
        torch.cuda.synchronize()
        res.update(max_alloc=torch.cuda.max_memory_allocated(), max_reserved=torch.cuda.max_memory_reserved())
    except Exception as e:  # a broken context: the probe is an error whatever it said
        res["error"] = res["error"] or f"after the run: {type(e).__name__}: {str(e)[:300]}"
    res["seconds"] = time.perf_counter() - t0
    return res


def cleanup(torch):
    """Drops what a probe left, so that the next starts as in a fresh process; returns memory_reserved()."""
    gc.collect()
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # they come from the caching allocator
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_reserved()


def probe_line(p, steps):
    where = "model load" if p.get("oom_at") == 0 else f"step {p.get('oom_at')}/{steps} ({p.get('shape')})"
    outcome = "ERROR " + p["error"] if p.get("error") else "ok" if p.get("ok") else f"OOM at {where}"
    figs = [f"allocated max {fmt_bytes(p.get('max_alloc'))}", f"reserved max {fmt_bytes(p.get('max_reserved'))}"]
    if p.get("uvmpool"):
        figs += [f"pool peak held {fmt_bytes(p.get('held'))}", f"peak live {fmt_bytes(p.get('live'))}",
                 f"{p.get('refused')} refused", f"limit {fmt_bytes(p.get('limit'))}"]
    if (p.get("leftover") or 0) > 64 * MIB:
        figs.append(f"WARNING: started with {fmt_bytes(p['leftover'])} reserved")
    r = "none" if p.get("r") is None else f"{p['r']:.2f}"
    return (f"probe {p['config']} r={r} cap={fmt_bytes(p.get('cap')) if p.get('cap') else 'none'} : {outcome} "
            f"({', '.join(figs)}, last loss {p.get('loss') or 0:.4f}, {p.get('seconds') or 0:.1f} s)")


def child(args):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no network: never look anything up
    import torch
    base, loss_fn, kind = build_model(torch)
    sched = schedule(args.steps)
    res = {"config": args.child, "kind": kind, "probes": []}
    if args.child.startswith("uvmpool"):  # one probe, uncapped: the limit is uvmpool's
        p = probe(torch, base, loss_fn, sched, args.child, args.ratio, None)
        try:
            report = uvmpool_report()
        except Exception as e:
            report, p["error"] = None, p["error"] or f"uvmpool_report: {type(e).__name__}: {e}"
        d = device_figures(report)
        p.update(uvmpool=report is not None, held=d.get("peak_held_bytes"), live=d.get("peak_live_bytes"),
                 refused=d.get("out_of_memory"), budget=d.get("budget"))
        print(probe_line(p, args.steps), flush=True)
        child_result(dict(res, **p))
        return 1 if p["error"] else 0
    peak = args.peak
    if not peak:  # native: P, uncapped, in a fresh process (as every uvmpool child is)
        p = res["uncapped"] = probe(torch, base, loss_fn, sched, args.child, None, None)
        print(probe_line(p, args.steps), flush=True)
        if p["error"] or not p["ok"]:
            child_result(res)
            return 1
        res["overhead_uncapped"], peak = context_overhead_bytes(torch), p["max_alloc"]

    def capped(r):
        try:
            left = cleanup(torch)
            p = probe(torch, base, loss_fn, sched, args.child, r, r * peak)
        except Exception as e:  # a broken context: no probe can run
            left, p = None, {"config": args.child, "r": r, "cap": r * peak, "ok": False,
                             "error": f"before the run: {type(e).__name__}: {e}"}
        p["leftover"] = left
        res["probes"].append(p)
        print(probe_line(p, args.steps), flush=True)
        return None if p["error"] else p["ok"]

    if args.search:
        search(capped, confirm=True)  # in-process probes cost ~2 s: always check above the answer
    try:
        cleanup(torch)
        res["overhead"] = context_overhead_bytes(torch)  # after all the work: every module loaded
    except Exception as e:
        print(f"overhead at the end: {type(e).__name__}: {e}", flush=True)
    print(f"{args.child}: {kind}; P {fmt_bytes(peak)}; context overhead {fmt_bytes(res.get('overhead'))} "
          f"(after the uncapped run {fmt_bytes(res.get('overhead_uncapped'))})", flush=True)
    child_result(res)
    return 0


# --------------------------------------------------------------------------------------------- driver
def summary(probes):
    """(smallest ratio that completed or None, its text, (completed r, failed r) pairs out of order)."""
    errors = [p for p in probes if p.get("error")]
    passed = sorted(p["r"] for p in probes if p["ok"] and not p.get("error"))
    failed = sorted(p["r"] for p in probes if not p["ok"] and not p.get("error"))
    contra = [(a, b) for a in passed for b in failed if a < b]
    if errors:
        return None, f"no result: r={errors[0]['r']:.2f}: {errors[0]['error'][:160]}", contra
    if passed:
        return passed[0], f"{passed[0]:.2f}x", contra
    return None, (f"> {failed[-1]:.2f}x" if failed else "no result: not run"), contra


def main():
    args = parse(sys.argv[1:])
    if args.child:
        return child(args)
    configs = [c for c in args.configs.split(",") if c]
    if any(c not in CONFIGS for c in configs):
        sys.exit(f"--configs: choose among {', '.join(CONFIGS)}")
    lib = lib_path(args.lib) if any(c.startswith("uvmpool") for c in configs) else None
    me = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps)]
    t0, crashed, notes, probes, kinds = time.perf_counter(), [], [], {c: [] for c in configs}, set()
    print(f"schedule (batch x tokens): {' '.join(f'{b}x{t}' for b, t in schedule(args.steps))}", flush=True)

    def inproc(name, peak):  # native (which measures P first) or expandable: one child, probes in-process
        cmd = me + ["--child", name] + ["--search"] * (name in configs) + (["--peak", str(peak)] if peak else [])
        res, code, _, out = run_child(cmd, dict(base_env(), **CONFIGS[name]), args.timeout, name)
        if res is None or code != 0:
            crashed.append(f"{name} child: exit {code}: {(out.strip().splitlines() or [''])[-1][:160]}")
        if res:
            kinds.add(res["kind"])
            probes.setdefault(name, []).extend(res["probes"])
            crashed.extend(f"{name} r={p['r']:.2f}: {p['error'][:160]}" for p in res["probes"] if p.get("error"))
        return res or {}

    native = inproc("native", None)  # always first: P and the context overhead
    uncapped = native.get("uncapped") or {}
    peak = uncapped.get("max_alloc") if uncapped.get("ok") and not uncapped.get("error") else None
    overhead = native.get("overhead", native.get("overhead_uncapped"))
    if peak is None or overhead is None:
        peak = None
        crashed.append("no P: the uncapped native run did not complete or measure the context overhead")
    if peak and "expandable" in configs:
        inproc("expandable", peak)
    for name in [c for c in configs if c.startswith("uvmpool") and peak]:
        def uvm(r, name=name):  # a child per probe: UVMPOOL_DEVICE_LIMIT is read at start
            cap = r * peak
            limit = -(-int(cap + overhead) // MIB) * MIB  # whole MiB, rounded up (uvmpool_env rounds down)
            env = uvmpool_env(lib, limit_bytes=limit, spill=False, **CONFIGS[name])
            left = args.budget - (time.perf_counter() - t0)
            res, code, wall, out = (None, "skipped", 0.0, "") if left < 20 else run_child(
                me + ["--child", name, "--ratio", str(r)], env, min(args.timeout, left), f"{name} r={r:.2f}", echo=False)
            why = ("out of time (--budget)" if code == "skipped" else f"exit {code}, no result" if res is None else
                   res.get("error") or (None if res.get("uvmpool") else "uvmpool was not loaded (no uvmpool_stats_json)"))
            p = dict(res or {}, config=name, r=r, cap=cap, limit=limit, ok=bool(res and res.get("ok")))
            if why:
                p["error"] = why
                print("\n".join(out.strip().splitlines()[-15:]), flush=True)
                crashed.append(f"{name} r={r:.2f}: {why[:160]}")
            elif code != 0:
                crashed.append(f"{name} r={r:.2f}: exit {code} after its result")
            kinds.add((res or {}).get("kind"))
            probes[name].append(p)
            print(probe_line(p, args.steps) + f" [child {wall:.1f} s]", flush=True)
            return None if why else p["ok"]
        search(uvm, args.confirm)

    print(f"\nfragmentation: {' / '.join(sorted(k for k in kinds if k))}; {args.steps} steps; P = {fmt_bytes(peak)} "
          f"peak allocated; context overhead {fmt_bytes(overhead)}; {time.perf_counter() - t0:.0f} s")
    answers = {}
    for name in configs:
        for p in sorted(probes.get(name, []), key=lambda p: p["r"]):
            print("  " + probe_line(p, args.steps))
            good = p["ok"] and not p.get("error")
            if good and not name.startswith("uvmpool") and (p.get("max_reserved") or 0) > p["cap"] + MIB:
                notes.append(f"{name} r={p['r']:.2f}: reserved {fmt_bytes(p['max_reserved'])} > cap "
                             f"{fmt_bytes(p['cap'])}: the fraction was not enforced")
            if good and peak and p.get("max_alloc") and abs(p["max_alloc"] - peak) > 0.01 * peak:
                notes.append(f"{name} r={p['r']:.2f}: allocated max {fmt_bytes(p['max_alloc'])}, not P")
        mine = [c for c in crashed if c.startswith(name + " ")] or crashed
        answers[name] = (summary(probes[name]) if probes.get(name) else
                         (None, "no result: " + (mine[0][:160] if mine else "not run"), []))
        contra = answers[name][2]
        print(f"{name}: smallest cap {answers[name][1]} P" +
              (f"; NOT MONOTONIC, (completed r, failed r): {contra}" if contra else ""))
        if contra:
            notes.append(f"{name}: completion not monotonic in the cap, (completed r, failed r): {contra}")
    if len([k for k in kinds if k]) > 1:
        notes.append(f"the children built different models: {kinds}")
    for n in notes + crashed:
        print("NOTE " + n)

    text = lambda name: answers[name][1] if name in answers else "not run"
    baseline = f"native {text('native')}, expandable_segments {text('expandable')}"
    if any("not enforced" in n for n in notes):
        baseline += " (a fraction was not enforced: see the log)"
    ratio_is = "smallest cap / peak allocated" + (f" (P = {peak / GIB:.2f} GiB)" if peak else "")
    ceiling = ("1.00: the peak allocated memory itself; uvmpool rounds each mapping to 2 MiB chunks and packs small "
               "ones in slabs")
    rows = [("5", "uvmpool", "fragmentation: smallest device cap / peak allocated at which a varying-shape GPT-2-small "
             "training job completes, spill off", "PyTorch's caching allocator on uvmpool", "<= 1.02"),
            ("5b", "uvmpool-nocache", "the same, PyTorch's caching allocator off (uvmpool serves every tensor)",
             "PYTORCH_NO_CUDA_MEMORY_CACHING=1 on uvmpool", "(figure)")]
    for row, name, what, how, target in rows:
        if name in configs:
            r, txt, _ = answers[name]
            if txt.startswith("no result"):
                score(row, what, txt, baseline, None, ratio_is, target, False, ceiling)
            else:
                met = (r is not None and r <= 1.02 + 1e-9) if row == "5" else None
                score(row, what, f"{txt} ({how})", baseline, r, ratio_is, target, met, ceiling)
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
