#include "bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "driver/real_driver.h"

namespace uvmpool::bench {

Options::Options(std::string program, std::string about)
    : program_(std::move(program)), about_(std::move(about)) {}

void Options::add(const std::string& name, const std::string& default_value, const std::string& help) {
  options_.push_back({name, {default_value, help}});
}

void Options::usage() const {
  std::printf("%s: %s\n\nOptions (--name=value):\n", program_.c_str(), about_.c_str());
  for (const auto& [name, option] : options_)
    std::printf("  --%-16s %s (default %s)\n", name.c_str(), option.help.c_str(), option.value.c_str());
  std::printf("  --benchmark_*      Google Benchmark's own flags (--benchmark_filter=..., ...)\n");
}

void Options::parse(int* argc, char** argv) {
  for (int i = 1; i < *argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {  // before Google Benchmark's own
      usage();
      std::exit(0);
    }
  }
  benchmark::Initialize(argc, argv);  // removes the --benchmark_* flags it knows
  for (int i = 1; i < *argc; ++i) {
    std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    auto it = options_.end();
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos)
      it = std::find_if(options_.begin(), options_.end(),
                        [&](const auto& entry) { return entry.first == arg.substr(2, eq - 2); });
    if (it == options_.end()) {
      std::fprintf(stderr, "%s: unknown argument '%s'\n\n", program_.c_str(), arg.c_str());
      usage();
      std::exit(2);
    }
    it->second.value = arg.substr(eq + 1);
  }
}

const std::string& Options::text(const std::string& name) const {
  for (const auto& [n, option] : options_)
    if (n == name) return option.value;
  std::fprintf(stderr, "internal: no option --%s\n", name.c_str());
  std::abort();
}

std::int64_t Options::integer(const std::string& name) const {
  char* end = nullptr;
  const std::string& value = text(name);
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') {
    std::fprintf(stderr, "%s: --%s=%s is not an integer\n", program_.c_str(), name.c_str(), value.c_str());
    std::exit(2);
  }
  return v;
}

double Options::real(const std::string& name) const {
  char* end = nullptr;
  const std::string& value = text(name);
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0') {
    std::fprintf(stderr, "%s: --%s=%s is not a number\n", program_.c_str(), name.c_str(), value.c_str());
    std::exit(2);
  }
  return v;
}

std::uint64_t Options::size(const std::string& name) const { return parse_size(text(name)); }

std::vector<std::uint64_t> Options::sizes(const std::string& name) const {
  std::vector<std::uint64_t> out;
  const std::string& value = text(name);
  if (value.empty()) return out;  // "--name=": none
  for (std::size_t start = 0; start <= value.size();) {
    const std::size_t comma = std::min(value.find(',', start), value.size());
    out.push_back(parse_size(value.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

std::uint64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  std::string unit(end);
  if (!unit.empty() && unit != "B") {
    if (unit.size() == 3 && unit.substr(1) == "iB") unit.resize(1);  // KiB, MiB, GiB
  }
  std::uint64_t multiplier = 0;
  if (unit.empty() || unit == "B") multiplier = 1;
  else if (unit == "K" || unit == "k") multiplier = 1ull << 10;
  else if (unit == "M") multiplier = 1ull << 20;
  else if (unit == "G") multiplier = 1ull << 30;
  if (end == text.c_str() || multiplier == 0 || !(number > 0)) {
    std::fprintf(stderr, "'%s' is not a size (such as 256, 4K, 2M, 1G)\n", text.c_str());
    std::exit(2);
  }
  return static_cast<std::uint64_t>(std::llround(number * static_cast<double>(multiplier)));
}

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string percent_change(double fraction) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%+.1f%%", 100 * fraction);
  return buffer;
}

std::string format_size(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) value /= 1024, ++unit;
  const bool whole = value == std::floor(value);
  return fixed(value, whole ? 0 : 2) + " " + units[unit];
}

std::string format_seconds(double seconds) {
  if (seconds < 0) return "n/a";
  if (seconds < 1e-6) return fixed(seconds * 1e9, 1) + " ns";
  if (seconds < 1e-3) return fixed(seconds * 1e6, 2) + " us";
  if (seconds < 1) return fixed(seconds * 1e3, 3) + " ms";
  return fixed(seconds, 3) + " s";
}

double median(std::vector<double> values) {
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

const driver::Table& drv() {
  if (driver::real() == nullptr) {
    std::fprintf(stderr, "no CUDA driver could be opened (set UVMPOOL_DRIVER_PATH, e.g. to build/sim/libcuda.so.1)\n");
    std::exit(1);
  }
  return driver::fn();
}

void check(CUresult status, const char* what) {
  if (status == CUDA_SUCCESS) return;
  const char* name = "unknown error";
  if (driver::real() != nullptr && driver::fn().cuGetErrorName != nullptr) driver::fn().cuGetErrorName(status, &name);
  std::fprintf(stderr, "%s failed: %s (%d)\n", what, name, static_cast<int>(status));
  std::exit(1);
}

Device open_device(int ordinal) {
  const driver::Table& d = drv();
  Device device;
  check(d.cuInit(0), "cuInit");
  check(d.cuDeviceGet(&device.device, ordinal), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&device.context, device.device), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(device.context), "cuCtxSetCurrent");
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name, device.device), "cuDeviceGetName");
  device.name = name;
  device.simulated = device.name.rfind("uvmpool simulated", 0) == 0;
  std::size_t total = 0;
  check(d.cuDeviceTotalMem_v2(&total, device.device), "cuDeviceTotalMem");
  device.total_memory = total;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device.device;
  std::size_t granularity = 0;
  check(d.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  device.granularity = granularity;
  return device;
}

void print_header(const char* benchmark, const Device& device) {
  std::printf("%s on %s (%s, chunk %s), driver %s\n", benchmark, device.name.c_str(),
              format_size(device.total_memory).c_str(), format_size(device.granularity).c_str(),
              driver::real()->path.c_str());
  if (device.simulated)
    std::printf("SIMULATED DRIVER: host memory, no GPU; its timings say nothing about speed on a GPU.\n");
  std::fflush(stdout);
}

double modeled_now() {
  using NowNs = std::uint64_t (*)();
  static const auto now_ns = reinterpret_cast<NowNs>(driver::real_symbol("uvmpool_sim_now_ns"));
  return now_ns != nullptr ? static_cast<double>(now_ns()) * 1e-9 : -1.0;
}

Recorder::Recorder()
    : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular), modeled_mark_(modeled_now()) {}

void Recorder::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  if (modeled_mark_ >= 0) {
    const double now = modeled_now();
    std::int64_t iterations = 0;
    double wall = 0;
    for (const Run& run : runs)
      if (run.run_type == Run::RT_Iteration && !run.error_occurred) {
        iterations += run.iterations;
        wall += run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit) * run.iterations;
      }
    if (iterations > 0 && !runs.empty())
      std::printf("  modeled on the simulated clock: %s per iteration of %s (%s of wall time here)\n",
                  format_seconds((now - modeled_mark_) / static_cast<double>(iterations)).c_str(),
                  runs.front().run_name.function_name.c_str(),
                  format_seconds(wall / static_cast<double>(iterations)).c_str());
    modeled_mark_ = now;
  }
  for (const Run& run : runs) {
    if (run.error_occurred) continue;
    const double seconds = run.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(run.time_unit);
    // The registered name, without the "/min_time:..." or "/repeats:..." Google Benchmark appends.
    const std::string& name = run.run_name.function_name;
    if (run.run_type == Run::RT_Iteration) iteration_[name] = seconds;
    else if (run.aggregate_name == "median") median_[name] = seconds;
  }
  std::fflush(stdout);
}

double Recorder::seconds(const std::string& name) const {
  if (auto it = median_.find(name); it != median_.end()) return it->second;
  if (auto it = iteration_.find(name); it != iteration_.end()) return it->second;
  return -1;
}

void Figures::row(std::string figure, std::string value, std::string target) {
  rows_.push_back({std::move(figure), std::move(value), std::move(target)});
}

void Figures::print() const {
  std::size_t width[3] = {6, 5, 6};
  for (const auto& r : rows_)
    for (int i = 0; i < 3; ++i) width[i] = std::max(width[i], r[i].size());
  std::printf("\n== %s\n", title_.c_str());
  auto line = [&](const std::string& a, const std::string& b, const std::string& c) {
    std::printf("%-*s  %*s%s%s\n", static_cast<int>(width[0]), a.c_str(), static_cast<int>(width[1]),
                b.c_str(), c.empty() ? "" : "  ", c.c_str());
  };
  line("figure", "value", "target");
  for (const auto& r : rows_) line(r[0], r[1], r[2].empty() ? "" : "target: " + r[2]);
  for (const auto& n : notes_) std::printf("  %s\n", n.c_str());
  std::fflush(stdout);
}

void summary_line(const std::string& name, const std::string& text) {
  std::printf("UVMPOOL_BENCH %s: %s\n", name.c_str(), text.c_str());
  std::fflush(stdout);
}

void score_line(const Score& s) {
  nlohmann::json j = {{"row", s.row},           {"what", s.what},     {"uvmpool", s.uvmpool},
                      {"baseline", s.baseline}, {"ratio", nullptr},   {"ratio_is", s.ratio_is},
                      {"target", s.target},     {"met", nullptr},     {"ceiling", s.ceiling}};
  if (s.ratio >= 0) j["ratio"] = s.ratio;
  if (s.met >= 0) j["met"] = s.met == 1;
  std::printf("UVMPOOL_SCORE %s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace uvmpool::bench
