// The library's writer (src/stats/publisher.h) against the reader and against the test writer: what
// the publisher writes reads back as the Report it was given, and carries the same descriptors, values
// and header fields as segment_writer.h (offsets may differ: the layout fixes them in the header).
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

}  // namespace
}  // namespace uvmpool::stats
