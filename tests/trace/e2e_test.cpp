// UVMPOOL_TRACE end to end: real client programs under LD_PRELOAD=libuvmpool.so on the simulated
// driver. These rely on the pool's call sites (trace::start when the pool is made, record on
// allocate/free, the sampler, stop at exit); they check the file the program leaves behind.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "trace_test.h"

extern char** environ;

namespace uvmpool::trace {
namespace {

using namespace uvmpool::trace::testing;

struct ChildRun {
  int exit_status = -1;
  pid_t pid = -1;
  std::string output;
};

// Runs `argv` with the current environment plus `settings`, output to a file read back.
ChildRun run(const std::vector<std::string>& argv, const std::vector<std::string>& settings, const std::string& dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("UVMPOOL_", 0) != 0 && entry.rfind("LD_PRELOAD=", 0) != 0) env.push_back(entry);
  }
  env.insert(env.end(), settings.begin(), settings.end());
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string out = dir + "/output.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  ChildRun r;
  if (posix_spawn(&r.pid, args[0], &actions, nullptr, args.data(), envp.data()) == 0) {
    int status = 0;
    if (waitpid(r.pid, &status, 0) == r.pid && WIFEXITED(status)) r.exit_status = WEXITSTATUS(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  r.output = read_file(out);
  return r;
}

std::vector<std::string> preload_settings(const std::string& trace) {
  const std::string sim = UVMPOOL_SIM_DRIVER;
  return {"LD_PRELOAD=" UVMPOOL_PRELOAD, "LD_LIBRARY_PATH=" + sim.substr(0, sim.rfind('/')),
          "UVMPOOL_DRIVER_PATH=" + sim, "UVMPOOL_TRACE=" + trace};
}

// Allocation lifetimes: ids that have both a begin and an end.
std::size_t complete_allocations(const json& doc) {
  std::set<std::string> begun;
  std::size_t complete = 0;
  for (const json& e : named(doc, "b", "allocation")) begun.insert(e.value("cat", "") + e.value("id", ""));
  for (const json& e : named(doc, "e", "allocation")) complete += begun.count(e.value("cat", "") + e.value("id", ""));
  return complete;
}

TEST(EndToEnd, LinkedClientLeavesAllocationsAndCounters) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const ChildRun r = run({UVMPOOL_CLIENT_LINKED, "--expect-uvmpool"}, preload_settings(dir + "/client-%p.json"), dir);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  const std::string path = dir + "/client-" + std::to_string(r.pid) + ".json";
  ASSERT_FALSE(read_file(path).empty()) << "no trace at " << path << " (UVMPOOL_TRACE not wired?)\n" << r.output;
  const json doc = parse_trace(path);
  check_well_formed(doc);
  EXPECT_GE(complete_allocations(doc), 1u) << "no allocation with both its begin and its end";
  EXPECT_FALSE(with_ph(doc, "C").empty()) << "no counter events";
  const auto process = named(doc, "M", "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_NE(process[0]["args"]["name"].get<std::string>().find("client_linked"), std::string::npos);
}

// The overcommit demo on a small simulated device: three times the device limit, so it fills the
// device and spills the rest.
TEST(EndToEnd, DemoSpillsShowInTheTrace) {
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const std::string path = dir + "/demo.json";
  std::vector<std::string> settings = preload_settings(path);
  settings.insert(settings.end(), {"UVMPOOL_SIM_DEVICE_MEMORY=512M", "UVMPOOL_SIM_HOST_MEMORY=1G",
                                   "UVMPOOL_DEVICE_LIMIT=128M", "UVMPOOL_HOST_LIMIT=512M"});
  const ChildRun r = run({UVMPOOL_DEMO}, settings, dir);
  ASSERT_EQ(r.exit_status, 0) << r.output;
  ASSERT_FALSE(read_file(path).empty()) << "no trace at " << path << " (UVMPOOL_TRACE not wired?)\n" << r.output;
  const json doc = parse_trace(path);
  check_well_formed(doc);
  EXPECT_GE(complete_allocations(doc), 10u);
  EXPECT_FALSE(named(doc, "i", "spill").empty()) << "the demo spilled, the trace shows no spill";
  bool device_counted = false, host_counted = false;
  for (const json& e : named(doc, "C", "device 0 memory (bytes)")) {
    device_counted = device_counted || e["args"].value("live_device", 0ull) > 0;
    host_counted = host_counted || e["args"].value("live_host", 0ull) > 0;
  }
  EXPECT_TRUE(device_counted) << "no counter sample saw live bytes in device memory";
  EXPECT_TRUE(host_counted) << "no counter sample saw live bytes in host memory";
  for (const json& e : named(doc, "b", "allocation"))
    EXPECT_LE(e["args"]["host_bytes"].get<std::uint64_t>(), e["args"]["bytes"].get<std::uint64_t>()) << e.dump();
}

}  // namespace
}  // namespace uvmpool::trace
