// The host-wait gate (src/tiering/host_wait_gate.h) on its own, no driver: the program's calls that may
// wait inside the driver and the mover's holds never overlap, and back-to-back holds cannot starve
// the calls waiting at the gate.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tiering/host_wait_gate.h"

namespace {

using uvmpool::tiering::HostWaitGate;
using namespace std::chrono_literals;

// Passes the gate on a thread of its own, staying inside for `stay`.
class Call {
 public:
  Call(HostWaitGate& gate, std::chrono::milliseconds stay = 0ms)
      : thread_([this, &gate, stay] {
          const HostWaitGate::Pass pass(gate);
          in_.store(true, std::memory_order_release);
          std::this_thread::sleep_for(stay);
        }) {}
  ~Call() { thread_.join(); }
  bool in() const { return in_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> in_{false};
  std::thread thread_;
};

bool eventually(const Call& c, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!c.in() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return c.in();
}

TEST(HostWaitGate, ACallWaitsWhileClosedAndGoesOnceOpen) {
  HostWaitGate gate;
  ASSERT_TRUE(gate.close(1000ms));
  Call call(gate);
  EXPECT_FALSE(eventually(call, 50ms)) << "a call passed a closed gate";
  gate.open();
  EXPECT_TRUE(eventually(call, 1000ms));
  EXPECT_EQ(gate.waited(), 1u);
}

TEST(HostWaitGate, CloseWaitsForTheCallsInsideAndGivesUpAfterItsTimeout) {
  HostWaitGate gate;
  {
    Call call(gate, 100ms);
    ASSERT_TRUE(eventually(call, 1000ms));
    const auto started = std::chrono::steady_clock::now();
    EXPECT_TRUE(gate.close(2000ms)) << "the call inside left after 100 ms";
    EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms) << "closed while a call was inside";
    gate.open();
  }
  Call stays(gate, 300ms);
  ASSERT_TRUE(eventually(stays, 1000ms));
  EXPECT_FALSE(gate.close(50ms)) << "closed while a call stayed inside";
  Call after(gate);
  EXPECT_TRUE(eventually(after, 1000ms)) << "a failed close left the gate closed";
  EXPECT_EQ(gate.waited(), 0u);
}

TEST(HostWaitGate, CallsWokenByAnOpenGetInBeforeTheNextClose) {
  HostWaitGate gate;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(gate.close(1000ms));
    Call call(gate);
    // At the gate (waited for, not slept for: a loaded machine may not run the call's thread for ms).
    const auto until = std::chrono::steady_clock::now() + 1000ms;
    while (!gate.has_waiters() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100us);
    ASSERT_TRUE(gate.has_waiters()) << "round " << round << ": the call never reached the gate";
    ASSERT_FALSE(call.in());
    gate.open();
    ASSERT_TRUE(gate.close(1000ms));  // the next hold, at once
    EXPECT_TRUE(call.in()) << "round " << round << ": a waiting call was starved by back-to-back holds";
    gate.open();
  }
}

}  // namespace
