// The lock of quiet_at_fork.h and the library's one set of fork handlers.
#include "config/quiet_at_fork.h"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace uvmpool::config {
namespace {

// Shared by works, exclusive across a fork. glibc's default rwlock prefers readers: a work starts
// while a fork waits, so works waiting for each other never wait behind the fork (quiet_at_fork.h).
pthread_rwlock_t g_quiet = PTHREAD_RWLOCK_INITIALIZER;
thread_local int t_depth = 0;  // this thread's QuietAtFork nesting

struct Handlers {
  void (*prepare)();
  void (*parent)();
  void (*child)();
};
constexpr int kMaxHandlers = 16;  // uvmpool registers 7
std::array<Handlers, kMaxHandlers> g_handlers{};
std::atomic<int> g_count{0};    // entries [0, g_count) are complete
std::mutex g_register_mu;       // registrations one at a time (constant-initialized: no allocation)
// Set by the forking thread between its prepare and parent (or child) handlers.
int g_forking_count = 0;        // the entries the fork in progress ran prepare for
bool g_fork_holds_quiet = false;  // whether it took g_quiet within kLongestForkWait

void prepare() {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const auto wait_ns = std::chrono::nanoseconds(kLongestForkWait).count();
  deadline.tv_sec += static_cast<time_t>(wait_ns / 1'000'000'000);
  deadline.tv_nsec += static_cast<long>(wait_ns % 1'000'000'000);
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1'000'000'000;
  }
  g_fork_holds_quiet = pthread_rwlock_clockwrlock(&g_quiet, CLOCK_MONOTONIC, &deadline) == 0;
  if (!g_fork_holds_quiet) {
    // No allocation here (the point of the lock): one write of a fixed line.
    static constexpr char kLine[] =
        "[uvmpool] warning: fork went ahead after waiting 1 s for uvmpool's background work\n";
    static_assert(kLongestForkWait == std::chrono::seconds(1), "the line names the wait");
    [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, kLine, sizeof kLine - 1);
  }
  g_forking_count = g_count.load(std::memory_order_acquire);
  for (int i = g_forking_count - 1; i >= 0; --i) {
    if (g_handlers[i].prepare != nullptr) g_handlers[i].prepare();
  }
}

void parent() {
  for (int i = 0; i < g_forking_count; ++i) {
    if (g_handlers[i].parent != nullptr) g_handlers[i].parent();
  }
  if (g_fork_holds_quiet) pthread_rwlock_unlock(&g_quiet);
}

// The child has only the forking thread, so no reader: g_quiet starts over free (also when the fork
// went ahead without it, a work then in progress existing only in the parent). Not unlocked:
// glibc tells a writer's unlock from a reader's by the writer's thread id, and the child's differs
// from the parent's, so an unlock here would count as a reader's and leave the lock held.
void child() {
  for (int i = 0; i < g_forking_count; ++i) {
    if (g_handlers[i].child != nullptr) g_handlers[i].child();
  }
  pthread_rwlock_init(&g_quiet, nullptr);
}

// Registered before the first work or handler: a fork before it has nothing to wait for.
void register_once() {
  static const bool registered = [] {
    pthread_atfork(prepare, parent, child);
    return true;
  }();
  (void)registered;
}

}  // namespace

QuietAtFork::QuietAtFork() {
  register_once();
  if (t_depth++ == 0) pthread_rwlock_rdlock(&g_quiet);
}

QuietAtFork::~QuietAtFork() {
  if (--t_depth == 0) pthread_rwlock_unlock(&g_quiet);
}

ForkMayLandHere::ForkMayLandHere() : depth_(t_depth) {
  if (depth_ == 0) return;
  t_depth = 0;
  pthread_rwlock_unlock(&g_quiet);
}

ForkMayLandHere::~ForkMayLandHere() {
  if (depth_ == 0) return;
  const int saved = errno;  // the caller reads the errno of the call this wrapped (a poll)
  pthread_rwlock_rdlock(&g_quiet);
  errno = saved;
  t_depth = depth_;
}

void at_fork(void (*prepare_handler)(), void (*parent_handler)(), void (*child_handler)()) {
  register_once();
  std::lock_guard lock(g_register_mu);
  const int n = g_count.load(std::memory_order_relaxed);
  if (n == kMaxHandlers) {
    // A programming error (a new handler past the table): run it as pthread_atfork would rather than
    // lose it, and say so.
    std::fprintf(stderr, "[uvmpool] internal: more than %d fork handlers; one is registered out of order\n",
                 kMaxHandlers);
    pthread_atfork(prepare_handler, parent_handler, child_handler);
    return;
  }
  g_handlers[n] = Handlers{prepare_handler, parent_handler, child_handler};
  g_count.store(n + 1, std::memory_order_release);
}

}  // namespace uvmpool::config
