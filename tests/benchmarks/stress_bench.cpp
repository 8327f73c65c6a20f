// uvmpool-bench-stress: many threads hammering one pool with a mix of operations (issue 17, item 15),
// and each operation's latency, p50 and p99.
//
// --threads threads (8) each run --ops operations (1M): synchronous allocations and frees of mixed
// sizes (mostly slab sizes, some mid-size, a few of several chunks), stream-ordered allocations and
// frees on the thread's own stream, and frees of allocations another thread made (handed over
// through a shared queue, so they are freed on another thread and often another stream). Each
// allocation gets a marker written at both ends through the driver, checked when it is freed. At the
// end everything is freed and the pool must hold no live allocation; on the simulated driver its
// race detector must have seen no violation.
//
// Latencies are wall time per pool call (steady_clock around the call alone). Under a sanitizer
// they say nothing about speed; the test (tests/benchmarks/CMakeLists.txt) runs a short version
// for its checks only, also under TSan.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "driver/real_driver.h"
#include "pool/pool.h"

using namespace uvmpool;
using namespace uvmpool::bench;

namespace {

enum Op { kAlloc, kFree, kAllocAsync, kFreeAsync, kFreeOther, kOps };
const char* const kOpNames[kOps] = {"allocate", "free (own)", "allocate on a stream", "free on a stream (own)",
                                    "free of another thread's"};

struct Live {
  CUdeviceptr p = 0;
  std::size_t bytes = 0;
  std::uint64_t marker = 0;
};

std::size_t random_size(std::mt19937_64& rng, std::uint64_t chunk) {
  const unsigned kind = static_cast<unsigned>(rng() % 1000);
  if (kind < 800) return 1 + rng() % 16384;                   // slab sizes
  if (kind < 990) return 16384 + rng() % (1u << 20);          // larger slab classes, up to 1 MiB
  return chunk / 2 + rng() % (3 * chunk);                     // a few chunks, stitched
}

void write_marker(const Live& a) {
  const std::uint64_t head[1] = {a.marker}, tail[1] = {~a.marker};
  check(drv().cuMemcpyHtoD_v2(a.p, head, sizeof head), "cuMemcpyHtoD");
  if (a.bytes >= 16) check(drv().cuMemcpyHtoD_v2(a.p + a.bytes - 8, tail, sizeof tail), "cuMemcpyHtoD");
}

bool marker_ok(const Live& a) {
  std::uint64_t head = 0, tail = ~a.marker;
  check(drv().cuMemcpyDtoH_v2(&head, a.p, sizeof head), "cuMemcpyDtoH");
  if (a.bytes >= 16) check(drv().cuMemcpyDtoH_v2(&tail, a.p + a.bytes - 8, sizeof tail), "cuMemcpyDtoH");
  return head == a.marker && tail == ~a.marker;
}

struct Shared {
  std::mutex mu;
  std::deque<Live> handed;  // allocations any thread may free
  std::atomic<std::uint64_t> next_marker{1};
  std::atomic<int> errors{0};
};

void error(Shared& sh, const char* what, CUresult r, CUdeviceptr p) {
  if (sh.errors.fetch_add(1) < 10) {
    const char* name = nullptr;
    drv().cuGetErrorName(r, &name);
    std::fprintf(stderr, "stress: %s of %#llx answered %s\n", what, static_cast<unsigned long long>(p),
                 name != nullptr ? name : "?");
  }
}

struct Worker {
  std::vector<std::uint32_t> ns[kOps];  // each operation's latency
};

void run(int id, pool::Pool& pool, CUcontext context, std::uint64_t chunk, std::uint64_t ops, std::size_t max_live,
         Shared& sh, Worker& w) {
  check(drv().cuCtxSetCurrent(context), "cuCtxSetCurrent");
  CUstream stream = nullptr;
  check(drv().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::mt19937_64 rng(0x5712e55 + static_cast<std::uint64_t>(id));
  std::vector<Live> mine;
  for (auto& v : w.ns) v.reserve(static_cast<std::size_t>(ops / 3));
  using clock = std::chrono::steady_clock;
  const auto timed = [&](Op op, auto&& call) {
    const auto t0 = clock::now();
    const auto result = call();
    const auto t = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    w.ns[op].push_back(static_cast<std::uint32_t>(std::min<long long>(t, UINT32_MAX)));
    return result;
  };
  const auto release = [&](const Live& a, Op op) {
    if (!marker_ok(a)) error(sh, "marker check before the free", CUDA_ERROR_UNKNOWN, a.p);
    CUresult r = CUDA_ERROR_UNKNOWN;
    const pool::Ownership o = timed(op, [&] {
      return op == kFreeAsync || (op == kFreeOther && rng() % 2) ? pool.deallocate_async(a.p, stream, &r)
                                                                 : pool.deallocate(a.p, &r);
    });
    if (o != pool::Ownership::Ours || r != CUDA_SUCCESS) error(sh, "free", r, a.p);
  };
  for (std::uint64_t i = 0; i < ops && sh.errors.load(std::memory_order_relaxed) == 0; ++i) {
    const unsigned dice = static_cast<unsigned>(rng() % 100);
    if (dice < 50 && mine.size() < max_live) {  // allocate, half on the stream
      const bool async = dice < 15;
      Live a{0, random_size(rng, chunk), sh.next_marker.fetch_add(1, std::memory_order_relaxed)};
      const CUresult r = timed(async ? kAllocAsync : kAlloc, [&] {
        return async ? pool.allocate_async(&a.p, a.bytes, stream) : pool.allocate(&a.p, a.bytes);
      });
      if (r != CUDA_SUCCESS) {
        error(sh, "allocation", r, 0);
        break;
      }
      write_marker(a);
      if (rng() % 4 == 0) {
        std::lock_guard lock(sh.mu);
        if (sh.handed.size() < 1024) {
          sh.handed.push_back(a);
          continue;
        }
      }
      mine.push_back(a);
    } else if (dice < 70) {  // free one handed over by any thread (most often another)
      Live a;
      {
        std::lock_guard lock(sh.mu);
        if (sh.handed.empty()) continue;
        a = sh.handed.front();
        sh.handed.pop_front();
      }
      release(a, kFreeOther);
    } else if (!mine.empty()) {  // free one of mine, a third on the stream
      const std::size_t k = static_cast<std::size_t>(rng() % mine.size());
      const Live a = mine[k];
      mine[k] = mine.back();
      mine.pop_back();
      release(a, dice < 80 ? kFreeAsync : kFree);
    }
  }
  for (const Live& a : mine) release(a, kFree);
  check(drv().cuStreamSynchronize(stream), "cuStreamSynchronize");
  check(drv().cuStreamDestroy_v2(stream), "cuStreamDestroy");
}

double percentile(std::vector<std::uint32_t>& v, double q) {
  if (v.empty()) return -1;
  const std::size_t k = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k] * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("UVMPOOL_LOG_LEVEL", "warn", 0);
  Options options("uvmpool-bench-stress", "threads hammering one pool with mixed operations: p50 and p99 of each");
  options.add("threads", "8", "threads");
  options.add("ops", "1000000", "operations per thread");
  options.add("live", "64", "most allocations a thread keeps live (besides those handed over)");
  options.add("limit", "2G", "the pool's device budget");
  options.add("device", "0", "device ordinal");
  options.parse(&argc, argv);

  const Device dev = open_device(static_cast<int>(options.integer("device")));
  print_header("uvmpool-bench-stress", dev);
  const int threads = static_cast<int>(options.integer("threads"));
  const auto ops = static_cast<std::uint64_t>(options.integer("ops"));
  pool::PoolConfig c;
  c.spill = false;
  c.headroom = 0;
  c.device_limit = config::Size{options.size("limit"), 0, false};
  auto pool = std::make_unique<pool::Pool>(drv(), c);

  using ViolationsFn = std::uint64_t (*)();
  const auto violations = reinterpret_cast<ViolationsFn>(driver::real_symbol("uvmpool_sim_violations"));
  const std::uint64_t violations_before = violations != nullptr ? violations() : 0;

  Shared sh;
  std::vector<Worker> workers(static_cast<std::size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> pool_threads;
    for (int i = 0; i < threads; ++i)
      pool_threads.emplace_back(run, i, std::ref(*pool), dev.context, dev.granularity, ops,
                                static_cast<std::size_t>(options.integer("live")), std::ref(sh),
                                std::ref(workers[static_cast<std::size_t>(i)]));
    for (std::thread& t : pool_threads) t.join();
  }
  for (const Live& a : sh.handed) {  // what no thread took back
    CUresult r = CUDA_ERROR_UNKNOWN;
    if (pool->deallocate(a.p, &r) != pool::Ownership::Ours || r != CUDA_SUCCESS) error(sh, "final free", r, a.p);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
  const pool::DeviceStats s = pool->stats(dev.device);

  Figures f(std::to_string(threads) + " threads x " + std::to_string(ops) + " mixed operations, one pool");
  std::uint64_t total = 0;
  for (int op = 0; op < kOps; ++op) {
    std::vector<std::uint32_t> all;
    for (Worker& w : workers) all.insert(all.end(), w.ns[op].begin(), w.ns[op].end());
    total += all.size();
    const double p50 = percentile(all, 0.50), p99 = percentile(all, 0.99);
    f.row(std::string(kOpNames[op]) + ": p50 / p99 (" + std::to_string(all.size()) + ")",
          all.empty() ? "none" : format_seconds(p50) + " / " + format_seconds(p99));
  }
  f.row("pool calls, wall time", std::to_string(total) + " in " + format_seconds(wall));
  f.row("live allocations at the end", std::to_string(s.live_allocations), "0");
  const std::uint64_t v = violations != nullptr ? violations() - violations_before : 0;
  if (violations != nullptr) f.row("race detector violations (simulated driver)", std::to_string(v), "0");
  if (dev.simulated) f.note("simulated driver: latencies are of the pool's own work on this machine's CPU");
  f.print();
  const bool ok = sh.errors.load() == 0 && s.live_allocations == 0 && v == 0;
  summary_line("stress", std::string(ok ? "ok" : "FAILED") + ", " + std::to_string(total) + " pool calls");
  return ok ? 0 : 1;
}
