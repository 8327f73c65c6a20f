// What the benchmarks share: their command-line options, the device they run on (through whatever
// driver uvmpool::driver::real() opens: the GPU's, or build/sim/libcuda.so.1), a Google Benchmark
// reporter that keeps each run's time so figures can be computed in the same process, and the
// plain-text table of figures each benchmark prints last.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "driver/driver_api.h"

namespace uvmpool::bench {

// --name=value options with defaults. Google Benchmark takes its own --benchmark_* flags first.
class Options {
 public:
  Options(std::string program, std::string about);
  void add(const std::string& name, const std::string& default_value, const std::string& help);
  // Initializes Google Benchmark with argv, then reads ours. Unknown ones, or --help: prints the
  // usage and exits (status 2 or 0).
  void parse(int* argc, char** argv);

  const std::string& text(const std::string& name) const;
  std::int64_t integer(const std::string& name) const;
  double real(const std::string& name) const;
  std::uint64_t size(const std::string& name) const;               // 4K, 2M, 1G, 1GiB, 512
  std::vector<std::uint64_t> sizes(const std::string& name) const;  // comma-separated

 private:
  void usage() const;
  std::string program_, about_;
  struct Option { std::string value, help; };
  std::vector<std::pair<std::string, Option>> options_;
};

std::uint64_t parse_size(const std::string& text);  // exits with a message if malformed
std::string format_size(std::uint64_t bytes);      // "4 KiB", "1 GiB", "3.5 MiB"
std::string format_seconds(double seconds);        // "85.2 us", "1.23 ms"
std::string fixed(double value, int decimals);
// A relative change as a signed percentage, one decimal: 0.046 -> "+4.6%", -0.004 -> "-0.4%".
std::string percent_change(double fraction);
double median(std::vector<double> values);

// Exits with status 1 naming the call and the driver's error name when `status` is not success.
void check(CUresult status, const char* what);

// The real driver's table (exits with a message when no driver can be opened).
const driver::Table& drv();

// Device 0 (or `ordinal`) with its primary context current on the calling thread.
struct Device {
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string name;
  std::uint64_t total_memory = 0;
  std::uint64_t granularity = 0;  // minimum VMM granularity of device memory: the pool's chunk
  bool simulated = false;          // our simulated driver: timings mean nothing there
};
Device open_device(int ordinal = 0);
// One line saying what ran where, printed before the benchmarks.
void print_header(const char* benchmark, const Device& device);

// The calling thread's virtual clock on the simulated driver (uvmpool_sim_now_ns), in seconds: what the
// simulator's cost model says the driver calls and GPU work waited for so far would have taken on an
// H200 (docs/simulator.md). Negative on a real driver.
double modeled_now();

// Console output as usual; each benchmark's time per iteration (seconds) is kept by name. With
// repetitions, the median aggregate is kept. On the simulated driver, each benchmark's modeled time
// (the virtual clock's advance while it ran, setup included) is printed under its wall time.
class Recorder : public benchmark::ConsoleReporter {
 public:
  Recorder();  // colors only on a terminal (logs and the GPU suite's summary stay plain)
  void ReportRuns(const std::vector<Run>& runs) override;
  // Seconds per iteration of the named benchmark; negative when it did not run or failed.
  double seconds(const std::string& name) const;

 private:
  std::map<std::string, double> iteration_, median_;
  double modeled_mark_;  // modeled_now() at the end of the last report
};

// The figures table: one row per figure, with its target ("" for a figure without one).
class Figures {
 public:
  explicit Figures(std::string title) : title_(std::move(title)) {}
  void row(std::string figure, std::string value, std::string target = "");
  void note(std::string line) { notes_.push_back(std::move(line)); }
  void print() const;

 private:
  std::string title_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<std::string> notes_;
};

// The one line scripts/gpu-suite.sh puts in its summary: "UVMPOOL_BENCH <name>: <text>".
void summary_line(const std::string& name, const std::string& text);

// One row of the scoreboard (scripts/scoreboard.sh): "UVMPOOL_SCORE {json}", the same fields as
// tests/gpu/scoreboard_common.py's score(). ratio < 0: not measured; met: 1 yes, 0 no, -1 no target.
struct Score {
  std::string row, what, uvmpool, baseline;
  double ratio = -1;
  std::string ratio_is, target;
  int met = -1;
  std::string ceiling;
};
void score_line(const Score& score);

}  // namespace uvmpool::bench
