// uvmpool-stat run as a program on segments in a temporary folder (--dir): the list, one process's
// table, JSON, Prometheus, --watch, stale segments, and the exit codes. The segments name this test's
// own pid (with its real start time), so they count as live.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "prometheus_checker.h"
#include "sample_report.h"
#include "segment_writer.h"
#include "stats/format.h"
#include "stats/shm_reader.h"
#include "test_support.h"

namespace uvmpool::stats {
namespace {

using test::SegmentWriter;
using test::TempDir;

struct Result {
  int status = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs uvmpool-stat with `args`, stdout and stderr to files (no pipe to fill up), stdin closed.
Result stat(const TempDir& dir, std::vector<std::string> args, bool with_dir = true) {
  if (with_dir) args.insert(args.begin(), "--dir=" + dir.path());
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const pid_t child = fork();
  if (child == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv{const_cast<char*>(UVMPOOL_STAT_BINARY)};
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(UVMPOOL_STAT_BINARY, argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  Result r;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  unlink(out.c_str());
  unlink(err.c_str());
  return r;
}

std::uint64_t ticks_of(pid_t pid) {
  std::uint64_t ticks = 0;
  EXPECT_TRUE(process_start_ticks(pid, &ticks));
  return ticks;
}

Report report_of(std::int64_t pid) {
  Report r = test::sample_report();
  r.pid = pid;
  return r;
}

std::string me() { return std::to_string(getpid()); }

TEST(Stat, ListsTheProcess) {
  TempDir dir;
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()));
  const Result r = stat(dir, {});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::istringstream lines(r.out);
  std::string header, row, extra;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_FALSE(std::getline(lines, extra)) << r.out;
  EXPECT_NE(header.find("PID"), std::string::npos);
  EXPECT_NE(header.find("COMMAND"), std::string::npos);
  // device live 3.4 GiB, held 3.4 GiB; host live 8.5 GiB, held 9.0 GiB
  EXPECT_NE(row.find(me() + "  running"), std::string::npos) << row;
  EXPECT_NE(row.find("3.4 GiB    3.4 GiB    8.5 GiB    9.0 GiB"), std::string::npos) << row;
  // tiering: 12 GiB promoted, 14 GiB demoted, 10318 launches read host memory in place
  EXPECT_NE(header.find("PROMOTED    DEMOTED  IN PLACE  COMMAND"), std::string::npos) << header;
  EXPECT_NE(row.find("9.0 GiB     12 GiB     14 GiB     10318  python train.py"), std::string::npos) << row;
}

TEST(Stat, RemovesStaleSegmentsUnlessAskedToKeepThem) {
  TempDir dir;
  const pid_t dead = test::dead_pid();
  {
    SegmentWriter w(report_of(dead), dir.path(), geteuid(), 1);
    w.end();  // its writer is gone, without cleaning up
    w.keep();
  }
  char name[64];
  shm::segment_name(name, sizeof name, geteuid(), dead);
  Result r = stat(dir, {"--keep-stale"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(dead) + "  ended"), std::string::npos) << r.out;
  EXPECT_EQ(access(dir.file(name).c_str(), F_OK), 0);

  r = stat(dir, {});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "uvmpool-stat: removed 1 stale segment of ended processes (pid " + std::to_string(dead) + ")\n");
  EXPECT_EQ(r.out.rfind("no process is using uvmpool", 0), 0u) << r.out;
  EXPECT_NE(access(dir.file(name).c_str(), F_OK), 0);
}

TEST(Stat, ASegmentStillRefreshedIsKeptWhateverItsPid) {
  // As a process in another pid namespace looks from here (docker --ipc=host): its pid is not ours.
  TempDir dir;
  SegmentWriter w(report_of(test::dead_pid()), dir.path(), geteuid(), 1);
  const Result r = stat(dir, {});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find(std::to_string(w.report().pid) + "  running"), std::string::npos) << r.out;
  EXPECT_EQ(access(w.path().c_str(), F_OK), 0);
}

TEST(Stat, OneProcessAsATable) {
  TempDir dir;
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()));
  Report report;
  std::string error;
  ASSERT_TRUE(read_segment(w.path(), &report, &error)) << error;
  for (const std::vector<std::string>& args : {std::vector<std::string>{me()}, {"-p", me()}, {"--pid=" + me()}}) {
    const Result r = stat(dir, args);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, format_table(report, false));
    EXPECT_EQ(r.out.rfind("pid " + me() + " (python train.py), uvmpool 0.4.0, ", 0), 0u) << r.out;
  }
}

// Two segments under one pid (containers sharing /dev/shm: another pid namespace's writer of the same
// pid holds the first name, ours took ".2"): the one whose start time is this pid's process's is read.
TEST(Stat, OfTwoSegmentsUnderOnePidTheOneOfThisProcessIsRead) {
  TempDir dir;
  Report theirs = report_of(getpid());
  theirs.command = "their job";
  SegmentWriter other(theirs, dir.path(), geteuid(), ticks_of(getpid()) + 12345);
  char name[64];
  shm::segment_name(name, sizeof name, geteuid(), getpid(), 2);
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()), {}, dir.file(name));
  Report report;
  std::string error;
  ASSERT_TRUE(read_segment(w.path(), &report, &error)) << error;
  const Result r = stat(dir, {me()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, format_table(report, false));
  const Result list = stat(dir, {});
  EXPECT_NE(list.out.find("their job"), std::string::npos) << "both are listed: " << list.out;
}

TEST(Stat, Json) {
  TempDir dir;
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()));
  Result r = stat(dir, {"--json", me()});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json one = nlohmann::json::parse(r.out);
  EXPECT_EQ(one["pid"], getpid());
  EXPECT_EQ(one["alive"], true);
  EXPECT_EQ(one["process"]["hook_calls"]["cuMemAlloc_v2"], 1000);
  EXPECT_EQ(one["devices"][0]["held_bytes"], 1742 * 2 * test::kMiB);

  r = stat(dir, {"--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json list = nlohmann::json::parse(r.out);
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["pid"], getpid());
}

TEST(Stat, Prometheus) {
  TempDir dir;
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--prometheus"}, {"--prometheus", me()}}) {
    const Result r = stat(dir, args);
    ASSERT_EQ(r.status, 0) << r.err;
    test::PromText parsed;
    ASSERT_EQ(test::check_prometheus(r.out, &parsed), "") << r.out;
    ASSERT_FALSE(parsed.samples.empty());
    EXPECT_EQ(parsed.samples[0].name, "uvmpool_up");
    EXPECT_EQ(parsed.samples[0].labels.at("pid"), me());
    EXPECT_EQ(parsed.samples[0].value, "1");
  }
}

TEST(Stat, WatchPrintsSnapshotsSeparatedByABlankLine) {
  TempDir dir;
  SegmentWriter w(report_of(getpid()), dir.path(), geteuid(), ticks_of(getpid()));
  const Result once = stat(dir, {me()});
  Result r = stat(dir, {"--watch=0.05", "--count=2", me()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, once.out + "\n" + once.out);

  const Result list = stat(dir, {});
  r = stat(dir, {"--watch", "--count=3"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, list.out + "\n" + list.out + "\n" + list.out);
}

TEST(Stat, WatchEndsWhenTheProcessEnds) {
  TempDir dir;
  const pid_t child = fork();
  if (child == 0) {
    usleep(400 * 1000);
    _exit(0);
  }
  SegmentWriter w(report_of(child), dir.path(), geteuid(), ticks_of(child));
  w.end();  // written here on the child's behalf: the lock would be the child's, not this process's
  std::thread reaper([&] { waitpid(child, nullptr, 0); });  // a zombie would still count as running
  const auto start = std::chrono::steady_clock::now();
  const Result r = stat(dir, {"--watch=0.05", std::to_string(child)});
  reaper.join();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  const std::string ended = "uvmpool-stat: process " + std::to_string(child) + " has ended\n";
  ASSERT_GE(r.out.size(), ended.size());
  EXPECT_EQ(r.out.substr(r.out.size() - ended.size()), ended) << r.out;
  EXPECT_EQ(r.out.rfind("pid " + std::to_string(child) + " (python train.py)", 0), 0u) << r.out;
}

TEST(Stat, AnEndedProcessShowsItsLastFigures) {
  TempDir dir;
  SegmentWriter w(report_of(test::dead_pid()), dir.path(), geteuid(), 1);
  w.end();
  const Result r = stat(dir, {std::to_string(w.report().pid)});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.err.find("has ended; these are the last figures it published"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.rfind("pid " + std::to_string(w.report().pid), 0), 0u) << r.out;
}

TEST(Stat, NoSuchProcessOrUnreadableSegmentExitsWith1) {
  TempDir dir;
  Result r = stat(dir, {std::to_string(test::dead_pid())});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no uvmpool process with pid"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");

  char name[64];
  shm::segment_name(name, sizeof name, geteuid(), getpid());
  test::write_file(dir.file(name), std::string(4096, 'x'));
  r = stat(dir, {me()});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "uvmpool-stat: " + dir.file(name) + ": not a uvmpool statistics segment (bad magic)\n");
  r = stat(dir, {});  // the list shows it, unreadable, and goes on
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("unreadable"), std::string::npos) << r.out;
}

TEST(Stat, BadUsageExitsWith2) {
  TempDir dir;
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--bogus"}, {"--count=abc"}, {"--count=0"}, {"--json", "--prometheus"}, {"--watch=0"}, {"--watch=x"},
           {"12", "13"}, {"-p"}, {"0"}, {"-5"}, {"--json=1"}, {"99999999999"}}) {
    const Result r = stat(dir, args);
    EXPECT_EQ(r.status, 2) << args[0];
    EXPECT_NE(r.err.find("Try 'uvmpool-stat --help'"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  Result r = stat(dir, {"--help"}, false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("Usage: uvmpool-stat", 0), 0u);
  r = stat(dir, {"--version"}, false);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("uvmpool-stat (uvmpool) ", 0), 0u);
}

}  // namespace
}  // namespace uvmpool::stats
