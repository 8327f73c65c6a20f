// scripts/uvmpool-timeline.py on traces this test records: it must write a PNG of a sane size, also
// from the trace of a killed process (no closing "]", a cut last line).
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "trace/trace.h"
#include "trace_test.h"

namespace uvmpool::trace {
namespace {

using namespace uvmpool::trace::testing;

std::atomic<std::uint64_t> g_step{0};
std::size_t two_devices(Sample* out, std::size_t max) {
  const std::uint64_t s = g_step.load();
  if (max < 2) return 0;
  out[0] = Sample{0, s * (64ull << 20), s > 4 ? (s - 4) * (32ull << 20) : 0, (s + 1) * (64ull << 20),
                  s > 4 ? 512ull << 20 : 0};
  out[1] = Sample{1, s * (16ull << 20), 0, 256ull << 20, 0};
  return 2;
}

// Allocations that fill device 0 and spill, a refusal, then everything freed.
std::string record_sample_trace(const std::string& dir) {
  const std::string path = dir + "/sample.json";
  EXPECT_TRUE(start(path, 1u << 30, two_devices));
  for (std::uint64_t s = 1; s <= 8; ++s) {
    g_step = s;
    record(Kind::Alloc, 0, 0x7f0000000000ull + s * (64ull << 20), 64ull << 20, s > 4 ? 32ull << 20 : 0);
    record(Kind::Alloc, 1, 0x7e0000000000ull + s * (16ull << 20), 16ull << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  record(Kind::Oom, 0, 0, 1ull << 33);
  // Tiering: two promotions (one dropped) and a demotion of device 0's memory.
  const std::uint64_t a = 0x7f0000000000ull + 5 * (64ull << 20), b = 0x7f0000000000ull + (64ull << 20);
  record(Kind::MoveBegin, 0, a, 32ull << 20, 0);
  record(Kind::MoveBegin, 0, a + (32ull << 20), 32ull << 20, 0);
  record(Kind::MoveBegin, 0, b, 64ull << 20, 64ull << 20);
  record(Kind::Moved, 0, a, 32ull << 20, 0);
  record(Kind::MoveDropped, 0, a + (32ull << 20), 32ull << 20, 0);
  record(Kind::Moved, 0, b, 64ull << 20, 64ull << 20);
  record(Kind::Hold, 0, 0, 96ull << 20, 64ull << 20, now());
  record(Kind::Period, -1, 0, 2285);
  for (std::uint64_t s = 1; s <= 8; ++s) {
    record(Kind::Free, 0, 0x7f0000000000ull + s * (64ull << 20), 64ull << 20);
    record(Kind::Free, 1, 0x7e0000000000ull + s * (16ull << 20), 16ull << 20);
  }
  g_step = 0;
  std::this_thread::sleep_for(std::chrono::milliseconds(25));
  stop();
  return path;
}

// Runs the script; returns its exit status and appends its output to `output`.
int run_timeline(const std::string& trace, const std::string& png, std::string& output) {
  const std::string command = std::string("'") + UVMPOOL_TIMELINE_PYTHON + "' '" + UVMPOOL_TIMELINE_SCRIPT + "' '" +
                              trace + "' -o '" + png + "' --title 'timeline test' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) output += buf;
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The PNG signature, then IHDR's width and height.
void expect_png(const std::string& png) {
  const std::string data = read_file(png);
  ASSERT_GE(data.size(), 24u) << png << " is missing or too short";
  EXPECT_EQ(data.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(data.substr(12, 4), "IHDR");
  const auto be32 = [&](std::size_t at) {
    return (std::uint32_t(std::uint8_t(data[at])) << 24) | (std::uint32_t(std::uint8_t(data[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(data[at + 2])) << 8) | std::uint32_t(std::uint8_t(data[at + 3]));
  };
  const std::uint32_t width = be32(16), height = be32(20);
  EXPECT_GE(width, 600u);
  EXPECT_LE(width, 4000u);
  EXPECT_GE(height, 400u);  // two devices, one panel each
  EXPECT_LE(height, 4000u);
  EXPECT_GT(data.size(), 10000u) << "a plot of two devices should not be this small";
}

bool have_python() {
  if (std::string(UVMPOOL_TIMELINE_PYTHON).empty()) {
    ADD_FAILURE() << "no Python interpreter with matplotlib was found when CMake ran (tried /usr/bin/python3, "
                     "then python3 on PATH): install it with `apt-get install python3-matplotlib` "
                     "(scripts/install-deps.sh does) and configure again";
    return false;
  }
  return true;
}

TEST(Timeline, PlotsATraceAsPng) {
  if (!have_python()) return;
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string trace = record_sample_trace(dir);
  std::string output;
  ASSERT_EQ(run_timeline(trace, dir + "/sample.png", output), 0) << output;
  expect_png(dir + "/sample.png");
  EXPECT_NE(output.find("-> " + dir + "/sample.png"), std::string::npos) << output;
  EXPECT_NE(output.find("moves: 1 promoted (0.03 GiB), 1 demoted (0.06 GiB)"), std::string::npos)
      << "the dropped promotion counted, or the moves not read\n" << output;
  EXPECT_NE(output.find("holds: 1, median "), std::string::npos) << output;
  EXPECT_NE(output.find("the policy learned a period of 2285 launches"), std::string::npos) << output;
}

TEST(Timeline, ReadsTheTraceOfAKilledProcess) {
  if (!have_python()) return;
  const TempDir tmp;
  const std::string& dir = tmp.path;
  std::string text = read_file(record_sample_trace(dir));
  // As a kill leaves it: no "]" and the last event cut in the middle.
  const std::size_t close = text.rfind("\n]");
  ASSERT_NE(close, std::string::npos);
  text.resize(close);
  text.resize(text.size() - 20);
  const std::string cut = dir + "/killed.json";
  std::ofstream(cut, std::ios::binary) << text;
  std::string output;
  ASSERT_EQ(run_timeline(cut, dir + "/killed.png", output), 0) << output;
  expect_png(dir + "/killed.png");
}

}  // namespace
}  // namespace uvmpool::trace
