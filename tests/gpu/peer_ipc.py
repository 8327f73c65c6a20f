"""Peer access and CUDA IPC between processes on two GPUs (issue 20 items 3 and 4), each check run
natively and under uvmpool (preloaded), each in its own child (a fault ends a CUDA context):

  peer       one process, both GPUs: can_device_access_peer both ways; a tensor on GPU 0 copied to GPU 1
             contiguous and transposed (PyTorch copies a transposed tensor with a kernel on one GPU
             that reads the other's memory); then a CuPy kernel on GPU 1 that reads and writes an
             array of GPU 0 through a raw pointer, after cudaDeviceEnablePeerAccess, as native
             programs may.
  torch_ipc  torch.multiprocessing: a process on GPU 0 shares a tensor (cudaIpcGetMemHandle); another
             process, working on GPU 1, opens it, reads it, adds to it through a copy from GPU 1,
             and the first sees the change; then the reverse.
  custom_ar  the vLLM-style custom all-reduce pattern in CuPy: each process on its own GPU exports a
             buffer, opens the other's (cudaIpcMemLazyEnablePeerAccess) and runs a kernel that sums
             its own buffer and the peer's, then writes into the peer's buffer, checked by the peer.

  python3 peer_ipc.py --lib B/lib/libuvmpool.so [--checks peer,torch_ipc,custom_ar]
Last line: UVMPOOL_PEER_IPC ok|FAIL <what failed>.
"""
import argparse, json, os, subprocess, sys, time

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scoreboard_common import base_env, lib_path, uvmpool_env, uvmpool_report

N = 1 << 22  # floats: 16 MiB per buffer
OK = "UVMPOOL_CHECK_OK "

KERNELS = r"""
extern "C" __global__ void add_into(float* out, const float* a, const float* b, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = a[i] + b[i];
}
extern "C" __global__ void fill(float* p, float v, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v;
}
"""


def expect(cond, what):
    if not cond:
        raise SystemExit(f"check failed: {what}")


def loaded():
    return uvmpool_report() is not None


# ------------------------------------------------------------------------------------------------ peer
def check_peer():
    import torch, cupy, numpy as np
    expect(torch.cuda.device_count() >= 2, "two GPUs")
    peers = (torch.cuda.can_device_access_peer(0, 1), torch.cuda.can_device_access_peer(1, 0))
    a = torch.arange(N, dtype=torch.float32, device="cuda:0")
    b = a.to("cuda:1")
    expect(torch.equal(b.cpu(), a.cpu()), "contiguous copy GPU 0 -> GPU 1")
    m = a.view(2048, -1)
    t = m.t().to("cuda:1")  # transposed: a kernel on one GPU reads the other's memory
    expect(torch.equal(t.cpu(), m.t().cpu()), "transposed copy GPU 0 -> GPU 1")
    back = torch.empty_like(m, device="cuda:0")
    back.copy_(t.t())
    expect(torch.equal(back.cpu(), m.cpu()), "transposed copy GPU 1 -> GPU 0")
    torch.cuda.synchronize()
    # CuPy: a kernel on GPU 1 reads and writes GPU 0's array by its pointer.
    with cupy.cuda.Device(0):
        x = cupy.arange(N, dtype=cupy.float32)
        cupy.cuda.Device(0).synchronize()
    with cupy.cuda.Device(1):
        try:
            cupy.cuda.runtime.deviceEnablePeerAccess(0)
        except cupy.cuda.runtime.CUDARuntimeError as e:
            if "ALREADY" not in str(e).upper():  # PyTorch's copy may have enabled it already
                raise
        mod = cupy.RawModule(code=KERNELS)
        y = cupy.ones(N, dtype=cupy.float32)
        out = cupy.empty(N, dtype=cupy.float32)
        mod.get_function("add_into")((256,), (256,), (out, np.uint64(x.data.ptr), y, np.uint64(N)))
        mod.get_function("fill")((256,), (256,), (np.uint64(x.data.ptr), np.float32(5.0), np.uint64(N)))
        cupy.cuda.Device(1).synchronize()
        expect(bool((out == cupy.arange(N, dtype=cupy.float32) + 1).all()), "GPU 1 kernel reading GPU 0 memory")
    with cupy.cuda.Device(0):
        expect(bool((x == 5).all()), "GPU 1 kernel writing GPU 0 memory")
    return {"can_access_peer": peers}


# ------------------------------------------------------------------------------------------- torch_ipc
def _torch_peer(q_in, q_out):
    import torch
    torch.cuda.set_device(1)
    shared = q_in.get()  # a tensor on GPU 0 of the other process, opened here (cudaIpcOpenMemHandle)
    seen = shared.to("cuda:1")  # read from GPU 1
    total = float(seen.sum())
    shared.copy_(seen + 1)  # write it back from GPU 1
    torch.cuda.synchronize()
    q_out.put(total)
    mine = torch.full((N,), 3.0, device="cuda:1")  # the reverse: this process shares GPU 1 memory
    q_out.put(mine)
    q_in.get()  # the other side has checked and changed it
    q_out.put(float(mine.sum()))
    del shared
    q_in.get()


def check_torch_ipc():
    import torch, torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_torch_peer, args=(q_in, q_out))
    p.start()
    x = torch.full((N,), 2.0, device="cuda:0")
    torch.cuda.synchronize()
    q_in.put(x)
    total = q_out.get(timeout=120)
    expect(total == 2.0 * N, f"the other process read {total}, not {2.0 * N}")
    expect(bool((x == 3.0).all()), "the other process's write is seen")
    theirs = q_out.get(timeout=120)  # GPU 1 memory of the other process, opened here
    expect(float(theirs.to("cuda:0").sum()) == 3.0 * N, "reading the other process's GPU 1 memory")
    theirs.fill_(4.0)
    torch.cuda.synchronize()
    q_in.put("changed")
    seen = q_out.get(timeout=120)
    expect(seen == 4.0 * N, f"the other process sees {seen} after this one's write")
    del theirs
    q_in.put("done")
    p.join(60)
    expect(p.exitcode == 0, f"the other process exit {p.exitcode}")
    return {}


# ------------------------------------------------------------------------------------------- custom_ar
def _ar_rank(rank, conn):
    import cupy, numpy as np
    cupy.cuda.Device(rank).use()
    mod = cupy.RawModule(code=KERNELS)
    buf = cupy.full(N, float(rank + 1), dtype=cupy.float32)
    cupy.cuda.Device(rank).synchronize()
    conn.send(cupy.cuda.runtime.ipcGetMemHandle(buf.data.ptr))
    peer = cupy.cuda.runtime.ipcOpenMemHandle(conn.recv(), cupy.cuda.runtime.cudaIpcMemLazyEnablePeerAccess)
    out = cupy.empty(N, dtype=cupy.float32)
    mod.get_function("add_into")((256,), (256,), (out, buf, np.uint64(peer), np.uint64(N)))
    cupy.cuda.Device(rank).synchronize()
    ok_sum = bool((out == 3.0).all())
    conn.send("summed")
    conn.recv()  # both have read before either writes
    half = N // 2  # rank 0 writes the peer's first half, rank 1 its second
    mod.get_function("fill")((256,), (256,), (np.uint64(peer + rank * half * 4), np.float32(7.0 + rank), np.uint64(half)))
    cupy.cuda.Device(rank).synchronize()
    conn.send("written")
    conn.recv()
    mine = buf[(1 - rank) * half:(2 - rank) * half]
    ok_written = bool((mine == 7.0 + (1 - rank)).all())
    cupy.cuda.runtime.ipcCloseMemHandle(peer)
    conn.send((ok_sum, ok_written))


def check_custom_ar():
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [ctx.Process(target=_ar_rank, args=(r, pipes[r][1])) for r in range(2)]
    for p in procs:
        p.start()
    a, b = pipes[0][0], pipes[1][0]
    ha, hb = a.recv(), b.recv()  # exchange the handles
    a.send(hb)
    b.send(ha)
    for step in ("summed", "written"):
        ra, rb = a.recv(), b.recv()
        expect(ra == rb == step, f"ranks at {ra!r}, {rb!r}")
        a.send("go")
        b.send("go")
    res = [a.recv(), b.recv()]
    for p in procs:
        p.join(60)
    expect(all(p.exitcode == 0 for p in procs), f"rank exits {[p.exitcode for p in procs]}")
    expect(all(r[0] for r in res), f"sum of own and peer buffer: {res}")
    expect(all(r[1] for r in res), f"peer's write seen: {res}")
    return {}


CHECKS = {"peer": check_peer, "torch_ipc": check_torch_ipc, "custom_ar": check_custom_ar}


def child(name):
    result = CHECKS[name]()
    result["uvmpool"] = loaded()
    print(OK + json.dumps(result), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib")
    p.add_argument("--checks", default="peer,torch_ipc,custom_ar")
    p.add_argument("--child", choices=list(CHECKS))
    p.add_argument("--timeout", type=int, default=180)
    args = p.parse_args()
    if args.child:
        return child(args.child)
    lib = lib_path(args.lib)
    failures = []
    for name in args.checks.split(","):
        for label, env in (("native", base_env()), ("uvmpool", uvmpool_env(lib))):
            env = dict(env, **MULTICAST_OFF)
            t0 = time.perf_counter()
            try:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=args.timeout)
                text, code = r.stdout, r.returncode
            except subprocess.TimeoutExpired as e:
                text, code = (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""), "hang"
            res = [json.loads(l[len(OK):]) for l in text.splitlines() if l.startswith(OK)]
            good = code == 0 and res and (label == "native" or res[0]["uvmpool"])
            last = [l for l in text.splitlines() if l.strip() and 'NCCL INFO' not in l][-10:]
            print(f"UVMPOOL_PEER_IPC_ROW {name} {label}: {'ok' if good else 'FAILED'} (exit {code}, "
                  f"{time.perf_counter() - t0:.1f} s) {res[0] if res else ''}", flush=True)
            if not good:
                print("  " + "\n  ".join(l[:240] for l in last), flush=True)
                failures.append(f"{name} {label}")
    print("UVMPOOL_PEER_IPC " + ("ok" if not failures else "FAIL " + "; ".join(failures)), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
