#include "tiering/tiering.h"

#include <cstdlib>
#include <mutex>

#include "config/options.h"
#include "driver/real_driver.h"
#include "tiering/launch_args.h"

namespace uvmpool::tiering {
namespace {

std::atomic<Tiering*> g_process{nullptr};
std::mutex g_process_mu;

}  // namespace

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "off") return Mode::Off;
  if (text == "remote") return Mode::Remote;
  if (text == "auto" || text.empty()) return Mode::Auto;
  return std::nullopt;
}

Mode configured_mode() {
  const config::Options& o = config::options();
  if (o.disable || !o.pool) return Mode::Off;
  return parse_mode(o.tiering).value_or(Mode::Auto);  // the option table refuses other values
}

Tiering::Tiering(const driver::Table& driver, pool::Pool& pool, Mode mode, StreamRegistry& streams,
                 MoverConfig mover)
    : driver_(driver), pool_(pool), mode_(mode), streams_(streams), layouts_(driver),
      mover_(driver, pool, streams, mover) {}

Tiering* Tiering::process() {
  if (Tiering* t = g_process.load(std::memory_order_acquire)) return t;
  pool::Pool* pool = pool::Pool::existing();  // no pool yet: no pool memory for a kernel to touch
  if (pool == nullptr) return nullptr;
  static const Mode mode = configured_mode();
  if (mode == Mode::Off) return nullptr;
  std::lock_guard lock(g_process_mu);
  if (Tiering* t = g_process.load(std::memory_order_relaxed)) return t;
  const driver::RealDriver* real = driver::real();
  if (real == nullptr) return nullptr;
  // Never destroyed: launches may come during exit. Its mover's thread stops at exit (registered after
  // the pool's handler, so it runs first: the thread is out of the pool before the pool stops).
  auto* t = new Tiering(real->table, *pool, mode, StreamRegistry::process());
  g_process.store(t, std::memory_order_release);
  std::atexit([] {
    if (Tiering* p = g_process.load(std::memory_order_acquire)) p->stop();
  });
  return t;
}

Tiering* Tiering::existing() { return g_process.load(std::memory_order_acquire); }

void Tiering::before_launch(CUfunction f, CUstream stream, void** params, void** extra, LaunchSeen* seen) {
  // The common case when everything fits: nothing in host memory, nothing to see.
  seen->read = LaunchSeen::Read::Skipped;
  if (f == nullptr || (!pool_.any_host_mapped() && !mover_.copying())) return;
  LaunchTouches& touches = seen->touches;
  touches.count = touches.dropped = touches.host = 0;
  const ParamLayout& layout = *layouts_.find(f);
  const bool read = for_each_word(layout, params, extra, [&](std::uint64_t word) {
    const pool::Pool::Probe hit = pool_.probe(static_cast<CUdeviceptr>(word));
    if (hit.owner != 0) touches.add({static_cast<CUdeviceptr>(word), hit.owner, hit.host});
  });
  if (!read) {
    seen->read = LaunchSeen::Read::Unread;
    launches_unread_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  seen->read = LaunchSeen::Read::Read;
  launches_read_.fetch_add(1, std::memory_order_relaxed);
  if (touches.count != 0) {
    pointers_.fetch_add(touches.count + touches.dropped, std::memory_order_relaxed);
    if (touches.host != 0) {
      host_pointers_.fetch_add(touches.host, std::memory_order_relaxed);
      launches_in_place_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (Observer o = observer_.load(std::memory_order_acquire))
    o(observer_context_.load(std::memory_order_relaxed), f, stream, touches);
}

void Tiering::after_launch(const LaunchSeen& seen, CUstream stream) {
  if (seen.read == LaunchSeen::Read::Read && seen.touches.count != 0 &&
      (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)) {
    CUcontext context = nullptr;
    if (driver_.cuCtxGetCurrent(&context) == CUDA_SUCCESS) streams_.saw_context(context);
  }
  // Read after the launch is queued: a move published before this load sees the launch marked; one
  // published after it recorded its fence behind the launch (mover.cpp).
  if (mover_.copying()) mover_.launched(seen.touches, seen.read != LaunchSeen::Read::Read);
}

bool Tiering::prefetch(CUdeviceptr p, std::size_t bytes, pool::Tier to) {
  if (!pool_.in_pool_space(p)) return false;
  return mover_.request(p, bytes, to);
}

void Tiering::set_observer(Observer observer, void* context) {
  observer_context_.store(context, std::memory_order_relaxed);
  observer_.store(observer, std::memory_order_release);
}

Stats Tiering::stats() const {
  Stats s;
  s.launches_read = launches_read_.load(std::memory_order_relaxed);
  s.launches_unread = launches_unread_.load(std::memory_order_relaxed);
  s.pointers = pointers_.load(std::memory_order_relaxed);
  s.host_pointers = host_pointers_.load(std::memory_order_relaxed);
  s.launches_in_place = launches_in_place_.load(std::memory_order_relaxed);
  s.layouts_asked = layouts_.driver_queries();
  return s;
}

}  // namespace uvmpool::tiering
