// config/quiet_at_fork.h: a fork waits for a work in progress, lets one in where the work said it may,
// runs the library's handlers quiet lock first, and leaves the child a lock it can take again. Each
// test forks this process; a child reports through its exit status, and an alarm turns a hang into
// a failure rather than a stuck suite.
#include "config/quiet_at_fork.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace uvmpool::config {
namespace {

using namespace std::chrono_literals;

constexpr unsigned kHangSeconds = 30;  // far past any wait here: only a deadlock reaches it

// Forks; the child runs body and exits with its result. Returns the child's wait status.
template <class Body>
int fork_and_wait(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(kHangSeconds);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

bool exited_zero(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// The handlers' trace: fixed storage, since handlers run where the allocator may not.
// Handlers stay registered for the process's life: they note only while their test runs.
std::atomic<bool> g_logging{false};
std::atomic<int> g_log[16];
std::atomic<int> g_log_size{0};
void note(int event) {
  if (!g_logging) return;
  const int at = g_log_size.fetch_add(1);
  if (at < 16) g_log[at] = event;
}
enum : int { kPrepareA = 1, kPrepareB, kParentA, kParentB, kChildA, kChildB };

TEST(QuietAtFork, HandlersRunNewestFirstBeforeTheForkAndOldestFirstAfter) {
  static bool registered = false;
  ASSERT_FALSE(registered) << "handlers are registered once per process";
  registered = true;
  at_fork([] { note(kPrepareA); }, [] { note(kParentA); }, [] { note(kChildA); });
  at_fork([] { note(kPrepareB); }, [] { note(kParentB); }, [] { note(kChildB); });
  g_log_size = 0;
  g_logging = true;
  const int status = fork_and_wait([] {
    const bool ok = g_log_size == 4 && g_log[0] == kPrepareB && g_log[1] == kPrepareA && g_log[2] == kChildA &&
                    g_log[3] == kChildB;
    return ok ? 0 : 1;
  });
  g_logging = false;
  EXPECT_TRUE(exited_zero(status)) << "child saw its handlers out of order";
  ASSERT_EQ(g_log_size, 4);
  EXPECT_EQ(g_log[0], kPrepareB);
  EXPECT_EQ(g_log[1], kPrepareA);
  EXPECT_EQ(g_log[2], kParentA);
  EXPECT_EQ(g_log[3], kParentB);
}

TEST(QuietAtFork, ForkWaitsForTheWorkInProgress) {
  std::atomic<bool> entered{false};
  std::atomic<bool> done{false};
  std::thread work([&] {
    const QuietAtFork quiet;
    entered = true;
    std::this_thread::sleep_for(200ms);  // the fork is asked for meanwhile
    done = true;
  });
  while (!entered) std::this_thread::yield();
  // The child's memory is the parent's at the fork: it sees done only if the fork waited.
  const int status = fork_and_wait([&] { return done.load() ? 0 : 1; });
  work.join();
  EXPECT_TRUE(exited_zero(status)) << "the fork landed inside the work";
}

// A work that does not end (one waiting on a lock a foreign fork handler holds) costs a fork
// kLongestForkWait, not the program.
TEST(QuietAtFork, ForkGoesAheadPastTheLongestWait) {
  alarm(kHangSeconds);
  std::atomic<bool> entered{false};
  std::atomic<bool> release{false};
  std::thread work([&] {
    const QuietAtFork quiet;
    entered = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  while (!entered) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  const int status = fork_and_wait([] { return 0; });
  const auto waited = std::chrono::steady_clock::now() - start;
  release = true;
  work.join();
  alarm(0);
  EXPECT_TRUE(exited_zero(status));
  EXPECT_GE(waited, kLongestForkWait);
  EXPECT_LT(waited, kLongestForkWait + std::chrono::seconds(10)) << "the fork waited for the work, not the bound";
  // The parent's lock was not taken by the fork, so it is not given back twice: a work and a
  // fork still run.
  std::thread([] { const QuietAtFork quiet; }).join();
  EXPECT_TRUE(exited_zero(fork_and_wait([] { return 0; })));
}

TEST(QuietAtFork, WorkWaitingInForkMayLandHereLetsTheForkIn) {
  alarm(kHangSeconds);  // a fork that waits for this work never returns
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::atomic<bool> waiting{false};
  std::atomic<bool> took_quiet_back{false};
  std::thread work([&] {
    const QuietAtFork quiet;
    const QuietAtFork nested;  // the nesting is given back whole, and taken back whole
    char byte = 0;
    {
      const ForkMayLandHere open;
      waiting = true;
      EXPECT_EQ(read(pipe_fds[0], &byte, 1), 1);  // released only after the fork returned
    }
    took_quiet_back = true;
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);  // into read()
  const int status = fork_and_wait([] { return 0; });
  EXPECT_TRUE(exited_zero(status));
  ASSERT_EQ(write(pipe_fds[1], "x", 1), 1);
  work.join();
  alarm(0);
  EXPECT_TRUE(took_quiet_back);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(QuietAtFork, ForkMayLandHereKeepsTheWrappedCallsErrno) {
  const QuietAtFork quiet;
  {
    const ForkMayLandHere open;
    errno = EINTR;  // as a poll() interrupted by a signal leaves it
  }
  EXPECT_EQ(errno, EINTR);
}

TEST(QuietAtFork, ForkMayLandHereOutsideAWorkDoesNothing) {
  const ForkMayLandHere open;  // a program thread waiting for the IPC server: no lock to give back
  const int status = fork_and_wait([] { return 0; });
  EXPECT_TRUE(exited_zero(status));
}

// The child's lock must be free for its own works and forks: a child that starts a publisher, or
// forks again (a shell running a pipeline), would otherwise hang.
TEST(QuietAtFork, ChildCanRunWorksAndForkAgain) {
  const int status = fork_and_wait([] {
    {
      const QuietAtFork quiet;
    }
    std::thread([] { const QuietAtFork quiet; }).join();
    const int grandchild = fork_and_wait([] {
      const QuietAtFork quiet;
      return 0;
    });
    return exited_zero(grandchild) ? 0 : 1;
  });
  EXPECT_TRUE(exited_zero(status)) << "child hung or failed (status " << status << ")";
}

}  // namespace
}  // namespace uvmpool::config
