// The library's writer (src/stats/publisher.h) against the reader and against the test writer: what
// the publisher writes reads back as the Report it was given, and carries the same descriptors, values
// and header fields as segment_writer.h (offsets may differ: the layout fixes them in the header).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "sample_report.h"
#include "segment_writer.h"
#include "stats/publisher.h"
#include "stats/shm_reader.h"
#include "test_support.h"

namespace uvmpool::stats {
namespace {

Report two_devices() {
  Report r = test::sample_report();
  r.pid = getpid();
  r.updated_unix_s = 1700000020.5;
  r.devices.push_back(r.devices[0]);
  r.devices[1].device = 3;
  r.devices[1].values[1] = 99;
  return r;
}

void expect_same(const Report& got, const Report& want) {
  EXPECT_EQ(got.pid, want.pid);
  EXPECT_EQ(got.command, want.command);
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.start_unix_s, want.start_unix_s);
  EXPECT_EQ(got.exited, want.exited);
  ASSERT_EQ(got.process_metrics.size(), want.process_metrics.size());
  for (std::size_t i = 0; i < want.process_metrics.size(); ++i) {
    EXPECT_EQ(got.process_metrics[i].name, want.process_metrics[i].name);
    EXPECT_EQ(got.process_metrics[i].label, want.process_metrics[i].label);
    EXPECT_EQ(got.process_metrics[i].kind, want.process_metrics[i].kind);
    EXPECT_EQ(got.process_metrics[i].unit, want.process_metrics[i].unit);
    EXPECT_EQ(got.process_metrics[i].help, want.process_metrics[i].help);
  }
  ASSERT_EQ(got.device_metrics.size(), want.device_metrics.size());
  for (std::size_t i = 0; i < want.device_metrics.size(); ++i) {
    EXPECT_EQ(got.device_metrics[i].name, want.device_metrics[i].name);
    EXPECT_EQ(got.device_metrics[i].label, want.device_metrics[i].label);
  }
  EXPECT_EQ(got.process_values, want.process_values);
  ASSERT_EQ(got.devices.size(), want.devices.size());
  for (std::size_t d = 0; d < want.devices.size(); ++d) {
    EXPECT_EQ(got.devices[d].device, want.devices[d].device);
    EXPECT_EQ(got.devices[d].values, want.devices[d].values);
  }
}

TEST(Publisher, SegmentReadsBackAsItsReport) {
  test::TempDir dir;
  Report r = two_devices();
  std::string error;
  std::unique_ptr<Segment> s = Segment::create(r, 100, &error, dir.path());
  ASSERT_NE(s, nullptr) << error;
  Report got;
  ASSERT_TRUE(read_segment(s->path(), &got, &error)) << error;
  expect_same(got, r);
  EXPECT_DOUBLE_EQ(got.updated_unix_s, r.updated_unix_s);

  // Listed as this process, alive: its start ticks agree with the reader's reading of /proc.
  const std::vector<SegmentInfo> list = list_segments(false, dir.path());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].readable) << list[0].error;
  EXPECT_TRUE(list[0].alive);
  EXPECT_EQ(list[0].pid, getpid());

  r.process_values[0] = 4242;
  r.devices[1].values[0] = 7;
  s->write(r);
  s->set_state(shm::State::Exited);
  ASSERT_TRUE(read_segment(s->path(), &got, &error)) << error;
  r.exited = true;
  expect_same(got, r);
  s->unlink();
  EXPECT_TRUE(list_segments(true, dir.path()).empty());
}

TEST(Publisher, LabelsAndUuidsTravelInTheSegment) {
  test::TempDir dir;
  Report r = two_devices();
  r.labels = {{"pod", "trainer-0"}, {"namespace", "tab\tand\nnewline"}};
  r.device_uuids = {"GPU-a", "", "", "GPU-d"};
  std::string error;
  std::unique_ptr<Segment> s = Segment::create(r, 100, &error, dir.path());
  ASSERT_NE(s, nullptr) << error;
  Report got;
  ASSERT_TRUE(read_segment(s->path(), &got, &error)) << error;
  expect_same(got, r);
  const std::vector<std::pair<std::string, std::string>> want = {{"pod", "trainer-0"},
                                                                 {"namespace", "tab and newline"}};
  EXPECT_EQ(got.labels, want);
  EXPECT_EQ(got.device_uuid(0), "GPU-a");
  EXPECT_EQ(got.device_uuid(1), "");
  EXPECT_EQ(got.device_uuid(3), "GPU-d");
  EXPECT_EQ(got.device_uuid(7), "");
  s->unlink();
}

TEST(Publisher, SameContentAsTheTestWriter) {
  test::TempDir ours, theirs;
  const Report r = two_devices();
  std::string error;
  std::unique_ptr<Segment> s = Segment::create(r, 100, &error, theirs.path());
  ASSERT_NE(s, nullptr) << error;
  test::SegmentWriter w(r, ours.path(), getuid(), 0);
  std::ifstream in(s->path(), std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(b.size(), sizeof(shm::SegmentHeader));
  const auto& h1 = w.header();
  const auto& h2 = *reinterpret_cast<const shm::SegmentHeader*>(b.data());
  EXPECT_EQ(std::memcmp(h1.magic, h2.magic, 8), 0);
  EXPECT_EQ(h1.layout_version, h2.layout_version);
  EXPECT_EQ(h1.header_bytes, h2.header_bytes);
  EXPECT_EQ(h1.pid, h2.pid);
  EXPECT_EQ(h1.start_unix_s, h2.start_unix_s);
  EXPECT_EQ(std::memcmp(h1.version, h2.version, sizeof h1.version), 0);
  EXPECT_EQ(std::memcmp(h1.command, h2.command, sizeof h1.command), 0);
  EXPECT_EQ(h1.process_metric_count, h2.process_metric_count);
  EXPECT_EQ(h1.device_metric_count, h2.device_metric_count);
  EXPECT_EQ(h1.max_devices, h2.max_devices);
  EXPECT_EQ(h1.descriptors_bytes, h2.descriptors_bytes);
  EXPECT_EQ(h2.sequence.load() % 2, 0u);
  EXPECT_EQ(h1.state.load(), h2.state.load());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(w.bytes()) + h1.descriptors_offset, h1.descriptors_bytes),
            b.substr(h2.descriptors_offset, h2.descriptors_bytes));
  const std::size_t words = h1.process_metric_count + h1.max_devices * (1 + std::size_t{h1.device_metric_count});
  ASSERT_LE(h2.values_offset + 8 * words, b.size());
  EXPECT_EQ(std::memcmp(w.bytes() + h1.values_offset, b.data() + h2.values_offset, 8 * words), 0);
  s->unlink();
}

TEST(Publisher, ThreadRefreshesThenMarksExited) {
  test::TempDir dir;
  std::atomic<std::uint64_t> calls{0};
  auto collect = [&] {
    Report r = two_devices();
    r.process_values[0] = ++calls;
    return r;
  };
  std::unique_ptr<Publisher> p = Publisher::start(collect, 10, dir.path());
  ASSERT_NE(p, nullptr);
  const std::string path = p->path();
  Report got;
  std::string error;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(read_segment(path, &got, &error)) << error;
    if (got.process_values[0] >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(got.process_values[0], 3u);
  EXPECT_FALSE(got.exited);
  p->stop(/*keep=*/true);
  ASSERT_TRUE(read_segment(path, &got, &error)) << error;
  EXPECT_TRUE(got.exited);
  EXPECT_EQ(got.process_values[0], calls.load());  // the final figures
  p.reset();
  unlink(path.c_str());
}

// A child process that publishes a segment in `dir` through the library's writer, then (when
// `fork_again`) forks a grandchild that closes its inherited copy as the library's fork handler does,
// and waits for it to have closed it, then waits to be killed. Its pid and its segment's path come back once both are in place.
struct Publishing {
  pid_t pid = -1, grandchild = -1;
  std::string path;
};

Publishing publish_in_child(const std::string& dir, bool fork_again) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  Publishing out;
  out.pid = fork();
  if (out.pid == 0) {
    close(ready[0]);
    Report r = two_devices();
    r.pid = getpid();
    r.updated_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::string error;
    std::unique_ptr<Segment> s = Segment::create(r, 100, &error, dir);
    pid_t grandchild = 0;
    if (s != nullptr && fork_again) {
      // Its copy closed before the child says it is in place: the lock is the open file's, which the
      // grandchild shares until then.
      int closed[2];
      if (pipe(closed) != 0) _exit(1);
      grandchild = fork();
      if (grandchild == 0) {
        s->close_inherited();
        (void)s.release();
        const char done = 1;
        (void)!write(closed[1], &done, 1);
        for (;;) pause();
      }
      char done = 0;
      if (grandchild > 0 && read(closed[0], &done, 1) != 1) grandchild = -1;
      close(closed[0]);
      close(closed[1]);
    }
    const bool ok = s != nullptr && grandchild >= 0;
    const pid_t word = ok ? grandchild : -1;
    (void)!write(ready[1], &word, sizeof word);
    for (;;) pause();
  }
  close(ready[1]);
  pid_t word = -1;
  EXPECT_EQ(read(ready[0], &word, sizeof word), static_cast<ssize_t>(sizeof word));
  close(ready[0]);
  EXPECT_GE(word, 0) << "the child could not publish";
  out.grandchild = word > 0 ? word : -1;
  char name[64];
  shm::segment_name(name, sizeof name, geteuid(), out.pid);
  out.path = dir + "/" + name;
  return out;
}

void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Containers sharing /dev/shm (docker --ipc=host) may run processes of one pid: a segment under our
// pid's name that a live writer holds (its lock) is theirs, left alone, and ours takes the next
// instance's name; one nobody holds is a dead process's, replaced. Before, the live one was unlinked.
TEST(Publisher, ALiveSegmentOfTheSamePidElsewhereIsLeftAloneAndTheNextNameTaken) {
  test::TempDir dir;
  const Report r = two_devices();
  char name[64];
  shm::segment_name(name, sizeof name, geteuid(), r.pid);
  const std::string first = dir.path() + "/" + name;
  {
    std::ofstream(first) << "a dead process's segment";
    std::string error;
    std::unique_ptr<Segment> s = Segment::create(r, 100, &error, dir.path());
    ASSERT_NE(s, nullptr) << error;
    EXPECT_EQ(s->path(), first) << "an unlocked segment under the name is a dead process's: replaced";
    s->unlink();
  }
  std::ofstream(first) << "another namespace's live segment";
  const int theirs = open(first.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(theirs, 0);
  ASSERT_EQ(flock(theirs, LOCK_SH), 0);  // another open file: conflicts with our probe as another process's
  std::string error;
  std::unique_ptr<Segment> s = Segment::create(r, 100, &error, dir.path());
  ASSERT_NE(s, nullptr) << error;
  shm::segment_name(name, sizeof name, geteuid(), r.pid, 2);
  EXPECT_EQ(s->path(), dir.path() + "/" + name);
  std::ifstream in(first);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "another namespace's live segment");
  Report back;
  ASSERT_TRUE(read_segment(s->path(), &back, &error)) << error;
  EXPECT_EQ(back.pid, r.pid);
  const std::vector<SegmentInfo> listed = list_segments(false, dir.path());
  EXPECT_EQ(listed.size(), 2u) << "both listed under the pid";
  s->unlink();
  close(theirs);
}

TEST(Publisher, ASegmentIsStaleAsSoonAsItsWriterDies) {
  // As NCCL's watchdog ends a rank (abort(): no exit handler runs), its values a moment old.
  test::TempDir dir;
  const Publishing p = publish_in_child(dir.path(), false);
  SegmentInfo s = inspect_segment(p.path);
  ASSERT_TRUE(s.readable) << s.error;
  EXPECT_TRUE(s.alive);
  EXPECT_TRUE(s.fresh);  // just written: only the lock tells that its writer is gone
  EXPECT_FALSE(s.stale());
  kill_and_reap(p.pid);
  s = inspect_segment(p.path);
  EXPECT_TRUE(s.readable) << s.error;
  EXPECT_FALSE(s.alive);
  EXPECT_FALSE(s.fresh);
  EXPECT_TRUE(s.stale());
  EXPECT_TRUE(remove_stale(s));
  EXPECT_NE(access(p.path.c_str(), F_OK), 0);
}

TEST(Publisher, AForkedChildDoesNotKeepItsParentsSegmentAlive) {
  test::TempDir dir;
  const Publishing p = publish_in_child(dir.path(), true);
  ASSERT_GT(p.grandchild, 0);
  kill_and_reap(p.pid);  // the grandchild lives on (a data loader's worker outliving its trainer)
  const SegmentInfo s = inspect_segment(p.path);
  EXPECT_FALSE(s.alive);
  EXPECT_TRUE(s.stale());
  kill(p.grandchild, SIGKILL);  // not ours to reap: its parent is gone, init reaps it
}

TEST(Publisher, StartingRemovesTheStaleSegmentsOfEndedProcesses) {
  test::TempDir dir;
  Report gone = two_devices();
  gone.pid = test::dead_pid();
  test::SegmentWriter ended(gone, dir.path(), geteuid(), 1);
  ended.keep();
  ended.end();
  Report in_other_namespace = two_devices();
  in_other_namespace.pid = test::dead_pid();  // a pid that means nothing here, but its lock is held
  test::SegmentWriter locked(in_other_namespace, dir.path(), geteuid(), 1);
  ASSERT_TRUE(inspect_segment(ended.path()).stale());
  std::unique_ptr<Publisher> p = Publisher::start([] { return two_devices(); }, 10, dir.path());
  ASSERT_NE(p, nullptr);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (access(ended.path().c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(access(ended.path().c_str(), F_OK), 0) << "the ended process's segment is still there";
  EXPECT_EQ(access(locked.path().c_str(), F_OK), 0);
  EXPECT_EQ(access(p->path().c_str(), F_OK), 0);
  p->stop();
}

}  // namespace
}  // namespace uvmpool::stats
