// The file's bound (UVMPOOL_TRACE_MAX) and fork(): the two ways a trace could end up broken.
#include <sys/stat.h>
#include <sys/wait.h>

#include <thread>

#include "trace/trace.h"
#include "trace_test.h"

namespace uvmpool::trace {
namespace {

using namespace uvmpool::trace::testing;

// Far more events than 64K of JSON holds: the file stays within the bound, ends as valid JSON with
// the truncation note, and every event is either in the file or counted as dropped.
TEST(Bound, SmallBoundKeepsFileValidAndCountsDrops) {
  const TempDir dir;
  const std::string path = dir.file("bound.json");
  const std::uint64_t max = 64u << 10;
  ASSERT_TRUE(start(path, max, nullptr));
  const int pairs = 10000;
  for (int i = 0; i < pairs; ++i) {
    record(Kind::Alloc, 0, 0x10000000 + i * 512, 512);
    record(Kind::Free, 0, 0x10000000 + i * 512, 512);
    if (i % 2000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // no ring overflow
  }
  stop();
  struct stat sb{};
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_LE(static_cast<std::uint64_t>(sb.st_size), max);
  EXPECT_GT(static_cast<std::uint64_t>(sb.st_size), max - 2048) << "the bound left much of the file unused";

  const json doc = parse_trace(path);
  check_well_formed(doc);
  ASSERT_FALSE(doc.empty());
  const Status st = status();
  EXPECT_GT(st.dropped, 0u);
  EXPECT_EQ(st.events + st.dropped, 2u * pairs);
  EXPECT_EQ(st.bytes, static_cast<std::uint64_t>(sb.st_size));
  EXPECT_EQ(with_ph(doc, "b").size() + with_ph(doc, "e").size(), st.events);
  const json& last = doc.back();
  EXPECT_EQ(last["name"], "uvmpool trace truncated");
  EXPECT_EQ(last["ph"], "i");
  EXPECT_EQ(last["args"]["events"], st.events);
  EXPECT_EQ(last["args"]["dropped"], st.dropped);
  EXPECT_EQ(last["args"]["max_bytes"], max);
}

TEST(Bound, TooSmallToHoldAnythingIsRefused) {
  const TempDir dir;
  const std::string path = dir.file("tiny.json");
  EXPECT_FALSE(start(path, 100, nullptr));
  EXPECT_FALSE(recording());
}

// The child forgets the parent's trace: what it records goes nowhere unless it starts its own, and
// the parent's file is whole. The child reports by exit status (no gtest in the child).
TEST(Fork, ChildAbandonsAndParentFileStaysValid) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string parent_path = dir + "/parent.json", child_path = dir + "/child.json";
  ASSERT_TRUE(start(parent_path, 1u << 30, nullptr));
  for (int i = 0; i < 100; ++i) record(Kind::Alloc, 0, 0x1000 + i, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    abandon_after_fork();
    if (recording() || status().active) _exit(10);
    for (int i = 0; i < 1000; ++i) record(Kind::Alloc, 0, 0xdead0000 + i, 1);  // nowhere
    if (!start(child_path, 1u << 30, nullptr)) _exit(11);
    for (int i = 0; i < 7; ++i) record(Kind::Free, 0, 0xc0de0000 + i, 1);
    stop();
    const Status st = status();
    _exit(st.events == 7 && st.dropped == 0 ? 0 : 12);
  }
  for (int i = 0; i < 100; ++i) record(Kind::Free, 0, 0x1000 + i, 1);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "10: still recording after abandon, 11: child start failed, 12: wrong counts";
  stop();

  const json parent = parse_trace(parent_path);
  check_well_formed(parent);
  EXPECT_EQ(with_ph(parent, "b").size(), 100u);
  EXPECT_EQ(with_ph(parent, "e").size(), 100u);
  for (const json& e : parent) EXPECT_EQ(e["pid"], getpid()) << e.dump();
  EXPECT_EQ(status().events, 200u);

  const json kid = parse_trace(child_path);
  check_well_formed(kid);
  EXPECT_EQ(with_ph(kid, "b").size(), 0u);
  EXPECT_EQ(with_ph(kid, "e").size(), 7u);
  for (const json& e : kid) EXPECT_EQ(e["pid"], child) << e.dump();
}

}  // namespace
}  // namespace uvmpool::trace
