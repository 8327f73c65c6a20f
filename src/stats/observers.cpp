// The process's observers: the live-statistics publisher and the trace, started when the program
// first reaches the pool, stopped at exit, forgotten in a forked child.

#include <cstdlib>
#include <mutex>

#include "config/log.h"
#include "config/options.h"
#include "config/quiet_at_fork.h"
#include "driver/real_driver.h"
#include "pool/pool.h"
#include "stats/collect.h"
#include "stats/process_labels.h"
#include "stats/publisher.h"
#include "trace/trace.h"

namespace uvmpool::stats {
namespace {

Publisher* g_publisher = nullptr;  // never destroyed: stopped at exit, leaked after fork

// The trace's counter tracks: every device pool's live and held bytes per tier (atomics only).
std::size_t sample_memory(trace::Sample* out, std::size_t max) {
  const pool::Pool* p = pool::Pool::existing();
  if (p == nullptr) return 0;
  std::size_t n = 0;
  for (int d = 0; d < p->device_count() && n < max; ++d) {
    const pool::DeviceStats s = p->stats(d);
    if (s.chunk_size == 0) continue;
    out[n++] = trace::Sample{d, s.live_bytes - std::min(s.live_bytes, s.live_host_bytes), s.live_host_bytes,
                             s.held_bytes, s.host_held_bytes};
  }
  return n;
}

// Every device's UUID, asked of the driver once (the program has initialized it by the time it
// reaches the pool); "" where the driver does not say.
std::vector<std::string> read_device_uuids() {
  std::vector<std::string> uuids;
  const driver::RealDriver* d = driver::real();
  int count = 0;
  if (d == nullptr || d->table.cuDeviceGetCount == nullptr || d->table.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return uuids;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    CUuuid uuid{};
    const bool known = d->table.cuDeviceGet != nullptr && d->table.cuDeviceGetUuid_v2 != nullptr &&
                       d->table.cuDeviceGet(&device, i) == CUDA_SUCCESS &&
                       d->table.cuDeviceGetUuid_v2(&uuid, device) == CUDA_SUCCESS;
    uuids.push_back(known ? format_device_uuid(reinterpret_cast<const unsigned char(&)[16]>(uuid.bytes)) : "");
  }
  return uuids;
}

// Guards starting against stopping: held by the thread that starts the observers (first allocation)
// and by exit, which then waits for a start in progress to finish before it stops what was started.
std::mutex g_mu;
bool g_started = false;
bool g_exiting = false;

void stop_at_exit() {
  // Before the exit report (a library destructor): the last figures are published, the segment
  // removed, the trace closed as valid JSON.
  std::lock_guard lock(g_mu);
  g_exiting = true;
  // The publisher stops first: an update of its reads trace::status, whose lock trace::stop holds
  // while it joins the writer, and the writer may be waiting for that update (config/quiet_at_fork.h).
  if (g_publisher != nullptr) g_publisher->stop(false);
  trace::stop();
}

void forget_in_child() {
  new (&g_mu) std::mutex;  // another thread of the parent may have held it

  if (g_publisher != nullptr) {
    g_publisher->abandon();
    g_publisher = nullptr;  // leaked on purpose
  }
  trace::abandon_after_fork();
}

}  // namespace

void prepare_process_observers() {
  static std::once_flag once;
  // Registered before anything is started, so that exit always finds its handler (it used to be
  // registered after the start: an exit during the start left a 0-byte trace and a half-made segment).
  std::call_once(once, [] {
    std::atexit(stop_at_exit);
    config::at_fork(nullptr, nullptr, forget_in_child);
  });
}

void start_process_observers() {
  prepare_process_observers();
  std::lock_guard lock(g_mu);
  if (g_started || g_exiting) return;  // once; and never once exit has begun
  g_started = true;
  const config::Options& o = config::options();
  if (!o.trace.empty()) trace::start(o.trace, o.trace_max.bytes, sample_memory);
  set_device_uuids(read_device_uuids());  // for the segment and the exit report alike
  if (o.stats_shm) {
    g_publisher = Publisher::start(collect_process, static_cast<std::uint32_t>(o.stats_interval)).release();
  }
}

std::string process_segment_path() { return g_publisher != nullptr ? g_publisher->path() : std::string(); }

}  // namespace uvmpool::stats
