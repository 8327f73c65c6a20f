// The recorder on its own: what each kind of event becomes in the file, threads (including ones
// that exit before stop), timestamps, counters, and the start/stop rules.
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <atomic>
#include <csignal>
#include <set>
#include <thread>

#include "trace/ring.h"
#include "trace/trace.h"
#include "trace_test.h"

namespace uvmpool::trace {
namespace {

using namespace uvmpool::trace::testing;

TEST(Recorder, EveryKindBecomesItsEvent) {
  const TempDir dir;
  const std::string path = dir.file("kinds.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  EXPECT_TRUE(recording());
  const int allocs = 50;
  for (int i = 0; i < allocs; ++i) {
    const std::uint64_t host = i % 5 == 0 ? 4096 : 0;  // every fifth spilled
    record(Kind::Alloc, i % 2, 0x7f0000000000ull + i * 0x200000ull, 1u << 20, host);
  }
  for (int i = 0; i < allocs; ++i) record(Kind::Free, i % 2, 0x7f0000000000ull + i * 0x200000ull, 1u << 20);
  const std::uint64_t t0 = now();
  record(Kind::Map, 0, 0x7f1000000000ull, 6u << 20, 2u << 20, t0);
  record(Kind::Oom, 1, 0, 1ull << 40);
  record(Kind::DriverAlloc, 0, 0x5000, 512);
  record(Kind::DriverFree, -1, 0x5000, 0);  // the free does not know the device; the writer does
  record(Kind::Unmap, 0, 0x7f1000000000ull + (2u << 20), 4u << 20, 2u << 20);
  stop();
  const std::uint64_t recorded = 2 * allocs + 5;

  const json doc = parse_trace(path);
  check_well_formed(doc);
  EXPECT_EQ(named(doc, "b", "allocation").size(), 50u);
  EXPECT_EQ(named(doc, "e", "allocation").size(), 50u);
  EXPECT_EQ(named(doc, "i", "spill").size(), 10u);
  EXPECT_EQ(named(doc, "X", "mapping").size(), 1u);
  EXPECT_EQ(with_ph(doc, "i").size(), 12u);  // spills, the refusal, the unmap; nothing dropped, no closing note
  ASSERT_EQ(named(doc, "b", "driver allocation").size(), 1u);
  ASSERT_EQ(named(doc, "e", "driver allocation").size(), 1u);

  const json alloc = named(doc, "b", "allocation").front();
  EXPECT_EQ(alloc["cat"], "device0");
  EXPECT_EQ(alloc["id"], "0x7f0000000000");
  EXPECT_EQ(alloc["args"]["address"], "0x7f0000000000");
  EXPECT_EQ(alloc["args"]["bytes"], 1u << 20);
  EXPECT_EQ(alloc["args"]["host_bytes"], 4096);
  EXPECT_EQ(alloc["pid"], getpid());
  const json free = named(doc, "e", "allocation").front();
  EXPECT_EQ(free["id"], "0x7f0000000000");
  EXPECT_EQ(free["cat"], "device0");
  const json spill = named(doc, "i", "spill").front();
  EXPECT_EQ(spill["args"]["host_bytes"], 4096);
  EXPECT_EQ(spill["ts"], alloc["ts"]);
  const json map = named(doc, "X", "mapping").front();
  EXPECT_EQ(map["args"]["bytes"], 6u << 20);
  EXPECT_EQ(map["args"]["host_bytes"], 2u << 20);
  ASSERT_EQ(named(doc, "i", "unmap").size(), 1u);
  const json unmap = named(doc, "i", "unmap").front();
  EXPECT_EQ(unmap["s"], "t");
  EXPECT_EQ(unmap["cat"], "device0");
  EXPECT_EQ(unmap["args"]["address"], "0x7f1000200000");
  EXPECT_EQ(unmap["args"]["bytes"], 4u << 20);
  EXPECT_EQ(unmap["args"]["host_bytes"], 2u << 20);
  const json oom = named(doc, "i", "out of memory").front();
  EXPECT_EQ(oom["s"], "p");
  EXPECT_EQ(oom["cat"], "device1");
  EXPECT_EQ(oom["args"]["bytes"], 1ull << 40);
  EXPECT_EQ(named(doc, "e", "driver allocation").front()["cat"], "device0");

  const auto process = named(doc, "M", "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_NE(process.front()["args"]["name"].get<std::string>().find("uvmpool-trace-tests"), std::string::npos);
  EXPECT_FALSE(named(doc, "M", "thread_name").empty());

  const Status st = status();
  EXPECT_FALSE(st.active);
  EXPECT_EQ(st.path, path);
  EXPECT_EQ(st.events, recorded);
  EXPECT_EQ(st.dropped, 0u);
  struct stat sb{};
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(st.bytes, static_cast<std::uint64_t>(sb.st_size));
}

// Threads record in parallel; half of them exit before stop(). Every event arrives, each thread's
// events in order, and every ring is freed once its thread has exited and it has been drained.
TEST(Recorder, ThreadsThatExitEarlyLoseNothing) {
  const TempDir dir;
  const std::string path = dir.file("threads.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  constexpr int kThreads = 8, kPairs = 5000;
  std::atomic<int> done{0};
  std::atomic<bool> release{false};
  std::vector<int> tids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tids[t] = static_cast<int>(syscall(SYS_gettid));
      if (t == 0) pthread_setname_np(pthread_self(), "we\"ird\\name");  // escaped in thread_name
      for (int i = 0; i < kPairs; ++i) {
        const std::uint64_t address = (std::uint64_t(t + 1) << 32) + std::uint64_t(i) * 256;
        record(Kind::Alloc, 0, address, 256);
        record(Kind::Free, 0, address, 256);
        if (i % 1000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ++done;
      if (t % 2 == 1)
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  }
  for (int t = 0; t < kThreads; t += 2) threads[t].join();  // the even ones exit now
  while (done < kThreads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop();
  // The exited threads' rings were freed after their last drain; the live ones' stay for later.
  const auto registered = [] {
    std::set<int> tids;
    for (const detail::Ring* r : detail::registry_snapshot()) tids.insert(r->tid);
    return tids;
  };
  std::set<int> live = registered();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(live.count(tids[t]), t % 2 == 0 ? 0u : 1u) << "thread " << t;
  release = true;
  for (int t = 1; t < kThreads; t += 2) threads[t].join();
  live = registered();  // exiting while no writer runs frees the ring at once
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(live.count(tids[t]), 0u) << "thread " << t;

  const json doc = parse_trace(path);
  check_well_formed(doc);
  std::map<int, int> begins, ends;
  for (const json& e : named(doc, "b", "allocation")) ++begins[e["tid"].get<int>()];
  for (const json& e : named(doc, "e", "allocation")) ++ends[e["tid"].get<int>()];
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(begins[tids[t]], kPairs) << "thread " << t;
    EXPECT_EQ(ends[tids[t]], kPairs) << "thread " << t;
  }
  bool weird_named = false;
  for (const json& e : named(doc, "M", "thread_name"))
    weird_named = weird_named || (e["tid"] == tids[0] && e["args"]["name"] == "we\"ird\\name");
  EXPECT_TRUE(weird_named);
  EXPECT_EQ(status().events, 2u * kThreads * kPairs);
  EXPECT_EQ(status().dropped, 0u);
}

// A thread's first event is always stamped: it must land where CLOCK_MONOTONIC says it happened
// (allowing for the clock-rate calibration). Busy events, mostly interpolated, stay inside their loop.
TEST(Recorder, TimestampsFollowTheMonotonicClock) {
  const TempDir dir;
  const std::string path = dir.file("clock.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  struct Window {
    std::uint64_t before, after;
  };
  std::vector<Window> firsts;
  for (int i = 0; i < 5; ++i) {
    std::thread([&, i] {
      const std::uint64_t before = monotonic_ns();
      record(Kind::Alloc, 0, 0x1000 + i, 1);
      firsts.push_back({before, monotonic_ns()});
    }).join();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::uint64_t loop_before = monotonic_ns();
  for (int i = 0; i < 3000; ++i) record(Kind::Alloc, 1, 0x100000 + i, 1);
  const std::uint64_t loop_after = monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop();

  const json doc = parse_trace(path);
  check_well_formed(doc);
  const double slack_us = 200;  // calibration against a clock NTP may slew; far below a drain interval
  std::vector<double> first_ts, loop_ts;
  for (const json& e : named(doc, "b", "allocation")) (e["cat"] == "device0" ? first_ts : loop_ts).push_back(ts_of(e));
  ASSERT_EQ(first_ts.size(), 5u);
  ASSERT_EQ(loop_ts.size(), 3000u);
  std::sort(first_ts.begin(), first_ts.end());
  for (int i = 0; i < 5; ++i) {
    EXPECT_GE(first_ts[i], firsts[i].before / 1e3 - slack_us) << "event " << i;
    EXPECT_LE(first_ts[i], firsts[i].after / 1e3 + slack_us) << "event " << i;
  }
  for (double ts : loop_ts) {
    EXPECT_GE(ts, loop_before / 1e3 - slack_us);
    EXPECT_LE(ts, loop_after / 1e3 + slack_us);
  }
}

TEST(Recorder, MapSpansFromItsStart) {
  const TempDir dir;
  const std::string path = dir.file("map.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  const std::uint64_t begun = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  record(Kind::Map, 0, 0x200000, 4u << 20, 0, begun);
  record(Kind::Alloc, 0, 0x200000, 4u << 20);
  stop();
  const json doc = parse_trace(path);
  check_well_formed(doc);
  const auto maps = named(doc, "X", "mapping");
  ASSERT_EQ(maps.size(), 1u);
  EXPECT_GE(maps[0]["dur"].get<double>(), 2900.0);  // microseconds
  EXPECT_LE(maps[0]["dur"].get<double>(), 1e6);
  const auto allocs = named(doc, "b", "allocation");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_GE(ts_of(allocs[0]), ts_of(maps[0]) + maps[0]["dur"].get<double>() - 1);
}

// The sampler's values, as counter events, only when they changed.
std::atomic<std::uint64_t> g_live{0};
std::size_t test_sampler(Sample* out, std::size_t max) {
  if (max < 2) return 0;
  out[0] = Sample{0, g_live.load(), g_live.load() / 2, 1ull << 30, 2ull << 30};
  out[1] = Sample{1, 7, 0, 1ull << 21, 0};  // never changes
  return 2;
}

TEST(Recorder, CountersFollowTheSampler) {
  const TempDir dir;
  const std::string path = dir.file("counters.json");
  g_live = 100;
  ASSERT_TRUE(start(path, 1u << 30, test_sampler));
  const std::vector<std::uint64_t> values = {100, 4000, 9000, 123456};
  for (std::uint64_t v : values) {
    g_live = v;
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // past the longest idle sleep
  }
  stop();
  const json doc = parse_trace(path);
  check_well_formed(doc);
  std::vector<std::uint64_t> seen;
  const auto dev0 = named(doc, "C", "device 0 memory (bytes)");
  for (const json& e : dev0) {
    seen.push_back(e["args"]["live_device"].get<std::uint64_t>());
    EXPECT_EQ(e["args"]["live_host"], seen.back() / 2);
    EXPECT_EQ(e["args"]["held_device"], 1ull << 30);
    EXPECT_EQ(e["args"]["held_host"], 2ull << 30);
  }
  EXPECT_EQ(seen, values);  // each value once, in order: nothing written while unchanged
  const auto dev1 = named(doc, "C", "device 1 memory (bytes)");
  ASSERT_EQ(dev1.size(), 1u);
  EXPECT_EQ(dev1[0]["args"]["live_device"], 7);
  EXPECT_EQ(status().events, 0u);  // samples are not recorded events
}

TEST(Recorder, StopTwiceThenRecordingIsIgnored) {
  const TempDir dir;
  const std::string path = dir.file("twice.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  record(Kind::Alloc, 0, 0x1000, 256);
  stop();
  const std::string written = read_file(path);
  const Status first = status();
  stop();
  EXPECT_FALSE(recording());
  for (int i = 0; i < 1000; ++i) record(Kind::Free, 0, 0x1000, 256);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(read_file(path), written);
  const Status second = status();
  EXPECT_EQ(second.events, first.events);
  EXPECT_EQ(second.dropped, first.dropped);
  EXPECT_EQ(second.bytes, first.bytes);
  EXPECT_EQ(first.events, 1u);
  const json doc = parse_trace(path);
  EXPECT_EQ(with_ph(doc, "e").size(), 0u);
}

TEST(Recorder, SecondStartWithoutStopIsRefused) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  ASSERT_TRUE(start(dir + "/one.json", 1u << 30, nullptr));
  EXPECT_FALSE(start(dir + "/two.json", 1u << 30, nullptr));
  EXPECT_TRUE(recording());
  struct stat sb{};
  EXPECT_NE(stat((dir + "/two.json").c_str(), &sb), 0) << "the refused trace created its file";
  EXPECT_EQ(status().path, dir + "/one.json");
  stop();
}

TEST(Recorder, UnwritablePathIsRefused) {
  EXPECT_FALSE(start("/nonexistent-uvmpool-dir/trace.json", 1u << 30, nullptr));
  EXPECT_FALSE(recording());
  EXPECT_FALSE(status().active);
  record(Kind::Alloc, 0, 0x1000, 1);  // harmless
  stop();                              // harmless
}

TEST(Recorder, PercentPBecomesTheProcessId) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  ASSERT_TRUE(start(dir + "/trace-%p.json", 1u << 30, nullptr));
  const std::string expected = dir + "/trace-" + std::to_string(getpid()) + ".json";
  EXPECT_EQ(status().path, expected);
  stop();
  struct stat sb{};
  ASSERT_EQ(stat(expected.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u) << "a new trace is the user's alone (config/output_file.h)";
  parse_trace(expected);
}

// A second recording in the same process starts clean: nothing left over from the first.
TEST(Recorder, RestartWritesOnlyTheNewEvents) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  ASSERT_TRUE(start(dir + "/a.json", 1u << 30, nullptr));
  for (int i = 0; i < 10; ++i) record(Kind::Alloc, 0, 0x1000 + i, 1);
  stop();
  record(Kind::Alloc, 0, 0x9999, 1);  // after stop: never shows up
  ASSERT_TRUE(start(dir + "/b.json", 1u << 30, nullptr));
  for (int i = 0; i < 5; ++i) record(Kind::Free, 0, 0x1000 + i, 1);
  stop();
  const json a = parse_trace(dir + "/a.json"), b = parse_trace(dir + "/b.json");
  check_well_formed(b);
  EXPECT_EQ(with_ph(a, "b").size(), 10u);
  EXPECT_EQ(with_ph(b, "b").size(), 0u);
  EXPECT_EQ(with_ph(b, "e").size(), 5u);
  EXPECT_EQ(status().events, 5u);
}

// A burst faster than the writer fills the ring: what is lost is counted, exactly.
TEST(Recorder, FullRingDropsAreCountedExactly) {
  const TempDir dir;
  const std::string path = dir.file("burst.json");
  ASSERT_TRUE(start(path, 1u << 30, nullptr));
  const std::uint64_t n = 4 * detail::kRingSlots;
  for (std::uint64_t i = 0; i < n; ++i) record(Kind::Alloc, 0, i * 256, 256);
  stop();
  const Status st = status();
  EXPECT_EQ(st.events + st.dropped, n);
  const json doc = parse_trace(path);
  check_well_formed(doc);
  EXPECT_EQ(with_ph(doc, "b").size(), st.events);
  if (st.dropped > 0) {
    const json& last = doc.back();
    EXPECT_EQ(last["name"], "uvmpool trace dropped events");
    EXPECT_EQ(last["args"]["dropped"], st.dropped);
  }
}

// A device that refuses every write (/dev/full): one log line, recording stops, nothing crashes,
// and every event is accounted as dropped.
TEST(Recorder, WriteErrorStopsRecording) {
  // A regular file that takes no byte (RLIMIT_FSIZE 0: every write fails with EFBIG). /dev/full
  // served before, but output files must be regular files now (config/output_file.h).
  const TempDir tmp;
  std::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit none = old;
  none.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &none), 0);
  struct Restore {
    rlimit limit;
    ~Restore() { setrlimit(RLIMIT_FSIZE, &limit); }
  } restore{old};
  ASSERT_TRUE(start(tmp.path + "/full.json", 1u << 30, nullptr));
  for (int i = 0; i < 100; ++i) record(Kind::Alloc, 0, 0x1000 + i, 1);
  for (int i = 0; i < 100 && recording(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(recording()) << "the failed write did not stop recording";
  record(Kind::Alloc, 0, 0x1000, 1);  // ignored
  stop();
  const Status st = status();
  EXPECT_EQ(st.events, 0u);
  EXPECT_EQ(st.dropped, 100u);
}

}  // namespace
}  // namespace uvmpool::trace
