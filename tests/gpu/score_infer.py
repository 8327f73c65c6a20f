"""Scoreboard rows 6a and 6b: greedy decoding (batch 1) with a GPT-2-XL-shaped model (transformers'
GPT2LMHeadModel from a config, 48 layers of width 1600, tied embeddings; fp16 weights W ~ 2.9 GiB,
random but deterministic) whose weights are --ratio (1.5) times the device memory it is given. Three
children, one after another, each building the same model on the CPU:

  gpu         PyTorch alone, the whole model on the GPU: the reference tokens/s and tokens, and the
              context overhead (device memory in use beyond PyTorch's allocator);
  accelerate  PyTorch alone with Hugging Face accelerate's CPU offload: infer_auto_device_map with
              max_memory {0: cap, "cpu": ...}, cap = W / ratio, then dispatch_model; the modules mapped
              to "cpu" stay in host memory and hooks copy their weights to the GPU at every forward;
  uvmpool     LD_PRELOAD=libuvmpool.so, UVMPOOL_DEVICE_LIMIT = cap + the gpu child's context overhead
              (the same bytes for tensors as accelerate's cap: see scoreboard_common), then
              model.to("cuda") entirely; what does not fit is spilled to pinned host memory that the
              kernels read over PCIe (zero-copy).
accelerate's cap bounds weights only (activations, the KV cache and the layer being loaded come on
top), while uvmpool's limit bounds everything, so the comparison leans against uvmpool, if anything.

Each child warms up (a 4-token generate), then times model.generate(max_new_tokens=min_new_tokens=N,
greedy, KV cache) between torch.cuda.synchronize() calls: tokens/s = N / seconds. Bytes over PCIe:
NVML's counters over the timed generate (scoreboard_common.PcieMeter). fp16 on the same kernels should
give the same greedy tokens in all three; a difference is printed, not fatal.

  python3 score_infer.py --lib build/lib/libuvmpool.so [--new-tokens 64] [--prompt 32] [--ratio 1.5]
"""
import argparse, inspect, math, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import (GIB, PcieMeter, base_env, child_result, context_overhead_bytes, device_figures,
                               fmt_bytes, lib_path, run_child, score, uvmpool_env, uvmpool_report)

SHAPE = dict(n_layer=48, n_embd=1600, n_head=25, vocab_size=50257, n_positions=1024)  # GPT-2 XL
POOL = (1 << 24) + 11  # random values tiled into the weights: odd length, so rows do not line up


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", help="libuvmpool.so (default $UVMPOOL_LIB, else build/lib/libuvmpool.so)")
    p.add_argument("--child", choices=["gpu", "accelerate", "uvmpool"])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--prompt", type=int, default=32, help="prompt length in tokens")
    p.add_argument("--ratio", type=float, default=1.5, help="weight bytes / device memory given (default 1.5)")
    p.add_argument("--timeout", type=int, default=150, help="seconds each child may take")
    p.add_argument("--zero-copy-gbs", type=float, default=51.3,
                   help="zero-copy read bandwidth for the ceiling (GB/s; uvmpool-bench-spill measures it)")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------- child
def build_model(torch):
    """The model in fp16 on the CPU, in a few seconds: transformers' own init would draw 1.5 G fp32
    normals (6 GiB) first. Parameters are made on the meta device (buffers stay real), then filled
    from one seeded block of N(0, 0.02) values; LayerNorms 1/0, biases 0, and the residual
    projections scaled by 1/sqrt(2 n_layer) as GPT-2 does, so fp16 activations stay far from inf."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(**SHAPE)
    try:
        from accelerate import init_empty_weights
        with init_empty_weights():
            model = GPT2LMHeadModel(config)
        made, keep = {}, []  # keyed by the meta parameter, so parameters shared (tied) stay shared
        for mod in model.modules():
            for name, p in list(mod._parameters.items()):
                if p is not None:
                    keep.append(p)
                    if id(p) not in made:
                        made[id(p)] = torch.nn.Parameter(torch.empty(p.shape, dtype=torch.float16), requires_grad=False)
                    mod._parameters[name] = made[id(p)]
        left = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
        if left:
            raise RuntimeError(f"still on meta: {left[:3]}")
        path = "meta init + fp16 fill"
    except Exception as e:  # any API difference: the slow but plain way, filled the same
        print(f"build: meta init failed ({type(e).__name__}: {e}); using transformers' init", flush=True)
        model = GPT2LMHeadModel(config)
        path = "transformers init + fp16 fill"
    if getattr(config, "tie_word_embeddings", True):
        model.lm_head.weight = model.transformer.wte.weight
    model = model.to(torch.float16).eval()
    model.requires_grad_(False)
    g = torch.Generator().manual_seed(1234)
    pool = (torch.randn(POOL, generator=g) * 0.02).to(torch.float16)
    pool_proj = (pool.float() / math.sqrt(2 * SHAPE["n_layer"])).to(torch.float16)
    seen = set()
    with torch.no_grad():
        for mname, mod in model.named_modules():
            for pname, p in mod.named_parameters(recurse=False):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                flat = p.data.view(-1)
                if isinstance(mod, torch.nn.LayerNorm) or mname.rsplit(".", 1)[-1].startswith("ln_"):
                    flat.fill_(1.0 if pname == "weight" else 0.0)
                elif pname == "bias":
                    flat.zero_()
                else:
                    src = pool_proj if mname.endswith("c_proj") else pool
                    pos, off = 0, (len(seen) * 2654435761) % POOL
                    while pos < flat.numel():
                        n = min(flat.numel() - pos, POOL - off)
                        flat[pos:pos + n].copy_(src[off:off + n])
                        pos, off = pos + n, 0
    tied = model.lm_head.weight is model.transformer.wte.weight
    print(f"build: {path}, tied embeddings {tied}, attention {getattr(model.config, '_attn_implementation', '?')}",
          flush=True)
    return model, path


def child(args):
    import torch
    t0 = time.perf_counter()
    model, path = build_model(torch)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    cap = int(weight_bytes / args.ratio)
    print(f"{args.child}: {weight_bytes / GIB:.2f} GiB of fp16 weights, built in {time.perf_counter() - t0:.1f} s",
          flush=True)
    offloaded = 0
    if args.child == "accelerate":
        import accelerate
        device_map = accelerate.infer_auto_device_map(model, max_memory={0: cap, "cpu": 100 * GIB},
                                                      no_split_module_classes=["GPT2Block"], dtype=torch.float16)

        def where(name):  # the device of the longest device-map key that is a prefix of the name
            keys = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
            return device_map[max(keys, key=len)] if keys else None
        offloaded = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                        if str(where(n)) in ("cpu", "disk"))
        items = [f"{k}: {v}" for k, v in device_map.items()]
        print(f"accelerate: cap {fmt_bytes(cap)}, {fmt_bytes(offloaded)} of weights offloaded; device map of "
              f"{len(items)} entries: {', '.join(items[:2])} ... {', '.join(items[-4:])}", flush=True)
        kw = {}
        if "skip_keys" in inspect.signature(accelerate.dispatch_model).parameters:
            kw["skip_keys"] = getattr(model, "_skip_keys_device_placement", None)  # as from_pretrained does
        model = accelerate.dispatch_model(model, device_map=device_map, **kw)
    else:
        model = model.to("cuda")
    torch.cuda.synchronize()
    host_after_load = device_figures(uvmpool_report()).get("live_host_bytes")
    print(f"{args.child}: on the device after {time.perf_counter() - t0:.1f} s", flush=True)

    g = torch.Generator().manual_seed(42)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, args.prompt), generator=g).to("cuda:0")
    eos = model.config.eos_token_id if model.config.eos_token_id is not None else 0

    def generate(n):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, use_cache=True, pad_token_id=eos)
        return out[0, ids.shape[1]:].tolist()

    meter = PcieMeter()
    # no_grad, not inference_mode: accelerate's hooks make Parameters at every forward, which inference
    # tensors may refuse; generate() runs under no_grad anyway, and all three children run alike.
    with torch.no_grad():
        generate(4)  # warm-up: kernels, cuBLAS, the hooks
        torch.cuda.synchronize()
        with meter:
            t1 = time.perf_counter()
            tokens = generate(args.new_tokens)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t1
    pcie = meter.total()
    report = uvmpool_report()
    dev = device_figures(report)
    r = {"child": args.child, "build": path, "weight_bytes": weight_bytes, "cap": cap, "tokens": tokens,
         "seconds": seconds, "tps": len(tokens) / seconds, "offloaded_bytes": offloaded,
         "max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
         "overhead_bytes": context_overhead_bytes(torch) if report is None else None,
         "pcie_per_token": None if pcie is None else pcie / max(1, len(tokens)),
         "pcie_error": None if meter.ok else meter.error, "uvmpool": report is not None,
         "host_after_load": host_after_load, "live_host": dev.get("live_host_bytes"),
         "peak_live_device": dev.get("peak_live_device_bytes"), "spilled_allocations": dev.get("spilled_allocations")}
    print(f"{args.child}: {len(tokens)} tokens in {seconds:.2f} s = {r['tps']:.2f} tok/s, "
          f"PCIe {fmt_bytes(r['pcie_per_token'])}/token, first tokens {tokens[:8]}", flush=True)
    child_result(r)


# --------------------------------------------------------------------------------------------- driver
def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


def main():
    args = parse(sys.argv[1:])
    if args.child:
        return child(args)
    lib = lib_path(args.lib)
    me = [sys.executable, os.path.abspath(__file__), "--new-tokens", str(args.new_tokens),
          "--prompt", str(args.prompt), "--ratio", str(args.ratio)]
    problems, errors = [], {}  # errors: why a run gave no figures, by run

    def run(mode, env):
        r, code, wall, out = run_child(me + ["--child", mode], env, args.timeout, mode)
        tail = (out.strip().splitlines() or [""])[-1][:160]
        if r is None:
            errors[mode] = f"{mode} failed (exit {code}): {tail}"
        elif code != 0:  # the figures came out, then the child died (at exit?): keep them, but say so
            problems.append(f"{mode} exited {code} after its result: {tail}")
        elif mode == "uvmpool" and not r["uvmpool"]:
            errors[mode] = "uvmpool: the library was not loaded in the child"
        if mode in errors:
            problems.append(errors[mode])
            return None
        return r

    gpu = run("gpu", base_env())
    acc = run("accelerate", base_env())
    ref = gpu or acc  # both measure W and the context overhead natively
    uvm, limit = None, None
    if ref:
        limit = int(ref["weight_bytes"] / args.ratio) + ref["overhead_bytes"]
        uvm = run("uvmpool", uvmpool_env(lib, limit_bytes=limit))
    else:
        errors["uvmpool"] = "uvmpool not run: no native run measured the weights and the context overhead"
        problems.append(errors["uvmpool"])
    spilled = bool(uvm and (uvm["host_after_load"] or uvm["live_host"]))
    if uvm and not spilled:
        problems.append("uvmpool did not spill (no live host bytes): the limit did not bind")

    if ref:
        print(f"\nweights {fmt_bytes(ref['weight_bytes'])}, cap {fmt_bytes(ref['cap'])} (1/{args.ratio:g}), context "
              f"overhead {fmt_bytes(ref['overhead_bytes'])}, uvmpool limit {fmt_bytes(limit)}")
    print(f"{'run':<11} {'tok/s':>7} {'timed s':>8} {'weights in host':>16} {'PCIe/token':>11} {'peak alloc':>11}  tokens")
    match = {}
    for name, r in (("gpu", gpu), ("accelerate", acc), ("uvmpool", uvm)):
        if not r:
            print(f"{name:<11} FAILED")
            continue
        d = first_difference(r["tokens"], gpu["tokens"]) if gpu else None
        match[name] = ("reference" if name == "gpu" else "no reference" if not gpu else
                       "identical" if d is None else f"differ at #{d}")
        host = r["offloaded_bytes"] if name == "accelerate" else (r["host_after_load"] or 0)
        print(f"{name:<11} {r['tps']:7.2f} {r['seconds']:8.2f} {fmt_bytes(host):>16} {fmt_bytes(r['pcie_per_token']):>11} "
              f"{fmt_bytes(r['max_allocated']):>11}  {match[name]}")
    if uvm:
        print(f"uvmpool: peak live on the device {fmt_bytes(uvm['peak_live_device'])}, in host memory "
              f"{fmt_bytes(uvm['host_after_load'])} after loading, {fmt_bytes(uvm['live_host'])} at the end, "
              f"{uvm['spilled_allocations']} allocations spilled; tokens {match['uvmpool']}")
    for p in problems:
        print("PROBLEM:", p)

    # Ceiling: each token reads the spilled weights once over PCIe, on top of the all-GPU time.
    host = (uvm["host_after_load"] or uvm["live_host"] or 0) if uvm else None
    ceiling, ceiling_text = None, "-"
    if host is not None:
        per_token = host / (args.zero_copy_gbs * 1e9) + (1 / gpu["tps"] if gpu else 0.0)
        ceiling = 1 / per_token if per_token > 0 else None
        ceiling_text = (f"PCIe: {fmt_bytes(host)} of host-resident weights per token at {args.zero_copy_gbs:g} GB/s "
                        f"zero-copy{' plus the all-GPU time' if gpu else ' (no all-GPU time measured)'}: "
                        f"at most {ceiling:.1f} tok/s" if ceiling else "-")
    what = (f"GPT-2-XL-shape fp16 inference ({ref['weight_bytes'] / GIB:.2f} GiB of weights), greedy, batch 1, "
            if ref else "GPT-2-XL-shape fp16 inference, ")
    what += f"weights {args.ratio:g}x the device limit: tokens/s vs accelerate CPU offload"
    uvm_text = "-"
    if uvm:
        uvm_text = (f"{uvm['tps']:.1f} tok/s ({fmt_bytes(host)} of weights in host memory, "
                    f"{fmt_bytes(uvm['pcie_per_token'])} over PCIe per token; tokens vs all-GPU: {match['uvmpool']}"
                    f"{'' if spilled else '; DID NOT SPILL'})")
    if uvm and acc:
        ratio = uvm["tps"] / acc["tps"]
        score("6a", what, uvm_text,
              f"accelerate offload {acc['tps']:.1f} tok/s ({fmt_bytes(acc['offloaded_bytes'])} offloaded, "
              f"{fmt_bytes(acc['pcie_per_token'])} over PCIe per token; tokens vs all-GPU: {match['accelerate']})",
              ratio, "uvmpool / accelerate tokens/s", ">= 3", ratio >= 3 and spilled, ceiling_text)
    else:
        score("6a", what, uvm_text if uvm else errors["uvmpool"],
              f"accelerate offload {acc['tps']:.1f} tok/s" if acc else errors["accelerate"],
              None, "uvmpool / accelerate tokens/s", ">= 3", False, ceiling_text)
    text_6b = "-"
    if ceiling and gpu:
        text_6b = f"{ceiling_text} = {ceiling / gpu['tps']:.2f} of the all-GPU rate"
    score("6b", "the same, against the model entirely on the GPU (no limit)",
          f"{uvm['tps']:.1f} tok/s" if uvm else errors["uvmpool"],
          f"all on GPU {gpu['tps']:.1f} tok/s (peak allocated {fmt_bytes(gpu['max_allocated'])})" if gpu else errors["gpu"],
          uvm["tps"] / gpu["tps"] if uvm and gpu else None, "uvmpool / all-GPU tokens/s", "(figure)", None, text_6b)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
