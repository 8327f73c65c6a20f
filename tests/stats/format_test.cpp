// The three formats of a Report (src/stats/format.h) on hand-made reports: the example table, reports
// missing metrics (older or newer writers), exited processes, labelled metrics, JSON read back with
// nlohmann, Prometheus text through a checker of the format's grammar.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "prometheus_checker.h"
#include "sample_report.h"
#include "stats/format.h"

namespace uvmpool::stats {
namespace {

using test::kGiB;
using test::kMiB;
using test::sample_report;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool has_line_starting(const std::string& text, const std::string& start) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(start, 0) == 0) return true;
  }
  return false;
}

TEST(Sizes, BinaryUnitsWholeNumbersStayWhole) {
  EXPECT_EQ(format_size(0), "0 B");
  EXPECT_EQ(format_size(1023), "1023 B");
  EXPECT_EQ(format_size(1024), "1 KiB");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(512 * kMiB), "512 MiB");
  EXPECT_EQ(format_size(3650722202), "3.4 GiB");
  EXPECT_EQ(format_size(9646899200), "9.0 GiB");  // 8.98: not whole, keeps its decimal
  EXPECT_EQ(format_size(64 * kGiB), "64 GiB");
  EXPECT_EQ(format_size(1000 * kMiB), "1000 MiB");
  EXPECT_EQ(format_size(~std::uint64_t{0}), "16.0 EiB");  // one byte short of 16 EiB
}

TEST(Durations, Readable) {
  EXPECT_EQ(format_duration(12.3), "12.3 s");
  EXPECT_EQ(format_duration(-1), "0.0 s");
  EXPECT_EQ(format_duration(245), "4 min 05 s");
  EXPECT_EQ(format_duration(2 * 3600 + 7 * 60 + 30), "2 h 07 min");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600), "3 d 04 h");
}

TEST(Table, MatchesTheExample) {
  const std::vector<std::string> expected = {
      "[uvmpool] pid 4242 (python train.py), uvmpool 0.4.0, 12.3 s",
      "[uvmpool] device 0         live  peak live       held  peak held   chunks",
      "[uvmpool]   device      3.4 GiB    3.5 GiB    3.4 GiB    3.5 GiB     1742",
      "[uvmpool]   host        8.5 GiB    8.5 GiB    9.0 GiB    9.1 GiB     4600",
      "[uvmpool]   1234 allocations (56 live), 1178 frees; 40 mappings stitched, 1100 cache hits, 3 taken apart; "
      "30 spilled; 0 out of memory",
      "[uvmpool]   by size: <=4K 1000, <=64K 200, <=2M 30, <=512M 3, >2G 1",
      "[uvmpool]   host reserve: 512 MiB ready (384 MiB premapped), 12 chunks pinned inline; host limit 64 GiB; "
      "budget 40 GiB",
      "[uvmpool] process: 1300 allocations (1290 pool, 10 driver), 1250 frees; hooks handed out: 12 via dlsym, "
      "300 via cuGetProcAddress; 0 calls via exports",
      "[uvmpool]   tiering: 16383 launches read, 10318 given host memory in place; 365 moves in 144 holds, 12 GiB "
      "promoted, 14 GiB demoted, 747 refused or failed; mover 2.34 s draining, 0.81 s copying, 0.12 s remapping; "
      "period 2285 launches, 44 kept in place",
      "[uvmpool]   most called: cuMemAlloc_v2 1000, cuMemFree_v2 990, cuMemGetInfo_v2 40, cuMemAllocAsync 9, "
      "cuMemFreeAsync 9, cuPointerGetAttribute 7, cuMemGetAddressRange_v2 5, cuMemCreate 3, ...",
  };
  EXPECT_EQ(lines_of(format_table(sample_report())), expected);
}

TEST(Table, WithoutPrefix) {
  const std::string table = format_table(sample_report(), false);
  EXPECT_EQ(table.find("[uvmpool]"), std::string::npos);
  EXPECT_TRUE(has_line_starting(table, "pid 4242 (python train.py)"));
  EXPECT_TRUE(has_line_starting(table, "  device  "));
  EXPECT_EQ(table.back(), '\n');
}

TEST(Table, NoHostRowWhenTheDeviceNeverHeldHostMemory) {
  Report r = sample_report();
  for (const char* name : {"live_host_bytes", "peak_host_held_bytes", "host_chunks_reserve", "host_chunks_premapped",
                           "host_chunks_pinned_inline"}) {
    for (std::size_t m = 0; m < r.device_metrics.size(); ++m) {
      if (r.device_metrics[m].name == name) r.devices[0].values[m] = 0;
    }
  }
  const std::string table = format_table(r, false);
  EXPECT_FALSE(has_line_starting(table, "  host  ")) << table;
  EXPECT_FALSE(has_line_starting(table, "  host reserve")) << table;
  EXPECT_TRUE(has_line_starting(table, "  host limit 64 GiB; budget 40 GiB")) << table;
  // The device's live is all of live_bytes now that nothing is in host memory.
  EXPECT_NE(table.find("  device     11.9 GiB"), std::string::npos) << table;
}

TEST(Table, ExitedSaysSo) {
  Report r = sample_report();
  r.exited = true;
  EXPECT_EQ(lines_of(format_table(r))[0], "[uvmpool] pid 4242 (python train.py), uvmpool 0.4.0, 12.3 s (exited)");
}

TEST(Table, MissingMetricsAreSkipped) {
  Report r;  // a writer that knows only a few metrics
  r.pid = 7;
  r.devices.push_back(DeviceValues{2, {}});
  test::add_device(r, "live_bytes", 5 * kMiB);
  test::add_device(r, "allocations", 9, Kind::Counter, Unit::Count);
  test::add_device(r, "some_future_metric", 1, Kind::Counter, Unit::Count);
  test::add_process(r, "intercepted_frees", 4);
  const std::vector<std::string> expected = {
      "pid 7, 0.0 s",
      "device 2         live  peak live       held  peak held   chunks",
      "  device        5 MiB          -          -          -        -",
      "  9 allocations",
      "process: 4 frees",
  };
  EXPECT_EQ(lines_of(format_table(r, false)), expected);
}

TEST(Table, TieringLineOnlyOnceSomethingWasReadOrMoved) {
  Report r = sample_report();
  const auto set = [&r](const char* name, std::uint64_t v) {
    for (std::size_t m = 0; m < r.process_metrics.size(); ++m) {
      if (r.process_metrics[m].name == name) r.process_values[m] = v;
    }
  };
  set("tiering_period", 0);
  set("tiering_holds_given_up", 2);
  std::string table = format_table(r, false);
  EXPECT_NE(table.find("; no period learned, 44 kept in place; 2 holds given up\n"), std::string::npos) << table;
  set("tiering_queue_waits", 83);
  table = format_table(r, false);
  EXPECT_NE(table.find("; 2 holds given up, 83 launches held back during holds (512 ahead of the device)\n"),
            std::string::npos)
      << table;
  set("tiering_launches_ordered", 1223);
  set("tiering_ordered_on_host", 3);
  table = format_table(r, false);
  EXPECT_NE(table.find(", 83 launches held back during holds (512 ahead of the device), 1223 launches ordered behind a "
                       "move, 3 of them waited for on the host\n"),
            std::string::npos)
      << table;
  set("launches_read", 0);
  set("tiering_moves", 0);
  table = format_table(r, false);
  EXPECT_FALSE(has_line_starting(table, "  tiering:")) << table;
}

TEST(Table, TieringLineSaysWhatTheTrialsChose) {
  // The thrash guard off and the epochs on the launching thread are said only while so.
  Report r = sample_report();
  using uvmpool::stats::test::add_process;
  add_process(r, "tiering_guard_off", 0, Kind::Gauge);
  add_process(r, "tiering_epochs_on_launch", 0, Kind::Gauge);
  std::string table = format_table(r, false);
  EXPECT_EQ(table.find("thrash guard off"), std::string::npos) << table;
  EXPECT_EQ(table.find("epochs on the launching thread"), std::string::npos) << table;
  r.process_values[r.process_values.size() - 2] = 1;
  r.process_values.back() = 1;
  table = format_table(r, false);
  EXPECT_NE(table.find("period 2285 launches, 44 kept in place, thrash guard off (measured faster), epochs on the launching thread"),
            std::string::npos)
      << table;
}

// What the mover does at this moment, for a program that seems stuck: only while it does something.
TEST(Table, TieringNowLineSaysWhatTheMoverWaitsForAndSince) {
  Report r = sample_report();
  const auto set = [&r](const char* name, std::uint64_t v) {
    bool found = false;
    for (std::size_t m = 0; m < r.process_metrics.size(); ++m) {
      if (r.process_metrics[m].name == name) r.process_values[m] = v, found = true;
    }
    EXPECT_TRUE(found) << name;
  };
  EXPECT_FALSE(has_line_starting(format_table(r, false), "  tiering now:"));
  set("tiering_mover_step", 3);
  set("tiering_mover_step_seconds", 412);
  set("tiering_holds_standing", 2);
  set("tiering_gate_closed", 1);
  set("tiering_gate_waiting", 1);
  std::string table = format_table(r, false);
  EXPECT_TRUE(has_line_starting(table, "  tiering now: mover waiting for the program's work to reach its hold for 412 s, "
                                       "2 holds standing; host-wait gate closed, 1 call waiting"))
      << table;
  set("tiering_mover_step", 4);
  set("tiering_mover_step_seconds", 1);
  set("tiering_holds_standing", 0);
  set("tiering_gate_closed", 0);
  table = format_table(r, false);
  EXPECT_NE(table.find("\n  tiering now: mover waiting for the pool's lock for 1 s\n"), std::string::npos) << table;
}

TEST(Table, EmptyAndInconsistentReportsDoNotCrash) {
  EXPECT_EQ(format_table(Report{}, false), "pid 0, 0.0 s\n");
  Report r = sample_report();
  r.devices[0].values.resize(3);  // fewer values than metrics
  r.process_values.resize(2);
  const std::string table = format_table(r, false);
  EXPECT_TRUE(has_line_starting(table, "  device ")) << table;
  EXPECT_TRUE(has_line_starting(table, "process: 1300 allocations (1290 pool)")) << table;
  EXPECT_NO_THROW(to_json(r));
  test::PromText parsed;
  EXPECT_EQ(test::check_prometheus(to_prometheus({r}), &parsed), "");
}

TEST(Table, SeveralDevicesAndTheTopEightCalls) {
  Report r = sample_report();
  r.devices.push_back(r.devices[0]);
  r.devices[1].device = 3;
  const std::string table = format_table(r, false);
  EXPECT_TRUE(has_line_starting(table, "device 0 ")) << table;
  EXPECT_TRUE(has_line_starting(table, "device 3 ")) << table;
  // Equal counts are ordered by name; zero counts never show; the ninth and tenth become "...".
  EXPECT_NE(table.find("cuMemAllocAsync 9, cuMemFreeAsync 9"), std::string::npos);
  EXPECT_EQ(table.find("cuMemRelease"), std::string::npos);
  EXPECT_EQ(table.find("cuGetProcAddress_v2"), std::string::npos);
}

TEST(Table, LongCommandsAreCut) {
  Report r;
  r.command = std::string(200, 'x');
  const std::string first = lines_of(format_table(r, false))[0];
  EXPECT_LT(first.size(), 120u);
  EXPECT_NE(first.find("xxx...)"), std::string::npos);
}

TEST(Json, ParsesBackWithTheValues) {
  Report r = sample_report();
  r.exited = true;
  const nlohmann::json j = nlohmann::json::parse(to_json(r));
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["command"], "python train.py");
  EXPECT_EQ(j["version"], "0.4.0");
  EXPECT_EQ(j["exited"], true);
  EXPECT_DOUBLE_EQ(j["start_unix_s"].get<double>(), 1700000000.0);
  EXPECT_DOUBLE_EQ(j["uptime_s"].get<double>(), 12.3);
  EXPECT_EQ(j["process"]["intercepted_allocations"], 1300);
  EXPECT_EQ(j["process"]["hook_calls"]["cuMemAlloc_v2"], 1000);
  EXPECT_EQ(j["process"]["hook_calls"]["cuGetProcAddress_v2"], 0);
  ASSERT_EQ(j["devices"].size(), 1u);
  EXPECT_EQ(j["devices"][0]["device"], 0);
  EXPECT_EQ(j["devices"][0]["live_bytes"], 3650722202 + 8 * kGiB + kGiB / 2);
  EXPECT_EQ(j["devices"][0]["allocations_by_size"]["4K"], 1000);
  EXPECT_EQ(j["devices"][0]["allocations_by_size"]["inf"], 1);
  EXPECT_EQ(j["units"]["live_bytes"], "bytes");
  EXPECT_EQ(j["units"]["chunks_held"], "chunks");
  EXPECT_EQ(j["units"]["hook_calls"], "count");
  EXPECT_EQ(to_json_value(r), j);
  // Values above 2^53 survive exactly.
  r.process_values[0] = ~std::uint64_t{0} - 1;
  EXPECT_EQ(nlohmann::json::parse(to_json(r))["process"]["intercepted_allocations"].get<std::uint64_t>(), ~std::uint64_t{0} - 1);
}

TEST(Prometheus, ValidWithTheRightLabelsAndSuffixes) {
  Report a = sample_report();
  Report b = sample_report();
  b.pid = 99;
  b.command = "/usr/bin/my\"odd\\prog --flag";
  b.exited = true;
  b.devices.push_back(b.devices[0]);
  b.devices[1].device = 1;
  const std::string text = to_prometheus({a, b});
  test::PromText parsed;
  ASSERT_EQ(test::check_prometheus(text, &parsed), "") << text;

  EXPECT_EQ(parsed.types["uvmpool_up"], "gauge");
  EXPECT_EQ(parsed.types["uvmpool_start_time_seconds"], "gauge");
  EXPECT_EQ(parsed.types["uvmpool_allocations_total"], "counter");
  EXPECT_EQ(parsed.types["uvmpool_hook_calls_total"], "counter");
  EXPECT_EQ(parsed.types["uvmpool_live_bytes"], "gauge");
  EXPECT_EQ(parsed.types.count("uvmpool_live_bytes_total"), 0u);
  EXPECT_EQ(parsed.types.count("uvmpool_allocations"), 0u);
  EXPECT_EQ(parsed.help["uvmpool_live_bytes"], "The live_bytes of the device.");

  std::map<std::string, int> seen;
  for (const test::PromSample& s : parsed.samples) {
    ++seen[s.name];
    std::set<std::string> keys;
    for (const auto& [k, v] : s.labels) keys.insert(k);
    EXPECT_EQ(keys.count("pid"), 1u) << s.name;
    EXPECT_EQ(keys.count("program"), 1u) << s.name;
    const std::string program = s.labels.at("pid") == "99" ? "my\"odd\\prog" : "python";
    EXPECT_EQ(s.labels.at("program"), program);
    if (s.name == "uvmpool_up") {
      EXPECT_EQ(keys.size(), 2u);
      EXPECT_EQ(s.value, s.labels.at("pid") == "99" ? "0" : "1");
    } else if (s.name == "uvmpool_hook_calls_total") {
      EXPECT_EQ(keys, (std::set<std::string>{"pid", "program", "function"}));
    } else if (s.name == "uvmpool_allocations_by_size_total") {
      EXPECT_EQ(keys, (std::set<std::string>{"pid", "program", "device", "size_max"}));
    } else if (s.name == "uvmpool_live_bytes") {
      EXPECT_EQ(keys, (std::set<std::string>{"pid", "program", "device"}));
    } else if (s.name == "uvmpool_tiering_mover_time_seconds_total") {  // kept in microseconds, shown in seconds
      EXPECT_EQ(keys, (std::set<std::string>{"pid", "program", "step"}));
      if (s.labels.at("step") == "draining") {
        EXPECT_EQ(s.value, "2.340000");
      }
      if (s.labels.at("step") == "preparing") {
        EXPECT_EQ(s.value, "0.000400");
      }
    } else if (s.name == "uvmpool_pool_allocations_total") {
      EXPECT_EQ(keys, (std::set<std::string>{"pid", "program"}));
      EXPECT_EQ(s.value, "1290");
    }
  }
  EXPECT_EQ(seen["uvmpool_up"], 2);
  EXPECT_EQ(seen["uvmpool_tiering_mover_time_seconds_total"], 14);  // 7 steps, 2 processes
  EXPECT_EQ(seen["uvmpool_live_bytes"], 3);  // a's device 0, b's devices 0 and 1
  EXPECT_EQ(seen["uvmpool_hook_calls_total"], 20);
  EXPECT_EQ(seen["uvmpool_allocations_by_size_total"], 30);
  EXPECT_EQ(seen["uvmpool_allocations_total"], 3);  // device scope only: one per device
  EXPECT_EQ(seen["uvmpool_intercepted_allocations_total"], 2);  // process scope: one per process
}

TEST(Prometheus, PodLabelsUuidsAndByteUnits) {
  Report r = sample_report();
  r.labels = {{"pod", "trainer-0"}, {"namespace", "ml"}, {"container", "main"}, {"ignored", "x"}};
  r.device_uuids = {"GPU-00000000-0000-0000-0000-000000000001"};
  const std::string text = to_prometheus({r});
  test::PromText parsed;
  ASSERT_EQ(test::check_prometheus(text, &parsed), "") << text;
  EXPECT_EQ(parsed.types["uvmpool_budget_bytes"], "gauge");  // bytes in the name, as Prometheus asks
  EXPECT_EQ(parsed.types.count("uvmpool_budget"), 0u);
  for (const test::PromSample& s : parsed.samples) {
    EXPECT_EQ(s.labels.at("pod"), "trainer-0") << s.name;
    EXPECT_EQ(s.labels.at("namespace"), "ml") << s.name;
    EXPECT_EQ(s.labels.at("container"), "main") << s.name;
    EXPECT_EQ(s.labels.count("ignored"), 0u) << s.name;
    if (s.labels.count("device") != 0) {
      EXPECT_EQ(s.labels.at("uuid"), r.device_uuids[0]) << s.name;
    }
  }
  const nlohmann::json j = to_json_value(r);
  EXPECT_EQ(j["labels"]["pod"], "trainer-0");
  EXPECT_EQ(j["devices"][0]["uuid"], r.device_uuids[0]);
}

TEST(Prometheus, EscapesAndSanitizesWhatItCannotTrust) {
  Report r;
  r.pid = 5;
  r.command = "a\nb";
  test::add_process(r, "bad name-x", 1, Kind::Gauge);
  test::add_process(r, "with_pid_label", 2, Kind::Counter, Unit::Count, "pid=6");
  test::add_process(r, "quoted", 3, Kind::Counter, Unit::Count, "key=va\"l\\ue\nx");
  test::add_process(r, "already_total", 4);
  r.process_metrics[0].help = "back\\slash\nnewline";
  const std::string text = to_prometheus({r});
  test::PromText parsed;
  ASSERT_EQ(test::check_prometheus(text, &parsed), "") << text;
  EXPECT_EQ(parsed.types["uvmpool_bad_name_x"], "gauge");
  EXPECT_NE(text.find("# HELP uvmpool_bad_name_x back\\\\slash\\nnewline\n"), std::string::npos) << text;
  EXPECT_EQ(parsed.types["uvmpool_already_total"], "counter");
  for (const test::PromSample& s : parsed.samples) {
    if (s.name == "uvmpool_with_pid_label_total") {
      EXPECT_EQ(s.labels.at("metric_pid"), "6");
    }
    if (s.name == "uvmpool_quoted_total") {
      EXPECT_EQ(s.labels.at("key"), "va\"l\\ue\nx");
    }
    EXPECT_EQ(s.labels.at("program"), "a\nb");
  }
}

TEST(Prometheus, NothingToReport) { EXPECT_EQ(to_prometheus({}), ""); }

TEST(Checker, CatchesBrokenText) {
  auto check = [](const std::string& text) {
    test::PromText p;
    return test::check_prometheus(text, &p);
  };
  EXPECT_NE(check("a 1"), "");                                    // no final newline
  EXPECT_NE(check("a{x=\"1\",x=\"2\"} 1\n"), "");                 // label twice
  EXPECT_NE(check("a{x=\"\\t\"} 1\n"), "");                       // bad escape
  EXPECT_NE(check("a 1\nb 1\na 2\n"), "");                        // family split
  EXPECT_NE(check("a 1\n# TYPE a gauge\n"), "");                  // TYPE after samples
  EXPECT_NE(check("# TYPE a gauge\n# TYPE a gauge\na 1\n"), "");  // TYPE twice
  EXPECT_NE(check("# TYPE a gauge_ish\na 1\n"), "");              // no such type
  EXPECT_NE(check("a 1\na 1\n"), "");                             // series twice
  EXPECT_NE(check("a one\n"), "");                                // bad value
  EXPECT_NE(check("1a 1\n"), "");                                 // bad name
  EXPECT_NE(check("a{x=\"1} 1\n"), "");                           // unterminated
  EXPECT_EQ(check("# TYPE a counter\na{x=\"y\"} 1 1700000000000\n# plain comment\nb +Inf\n"), "");
}

}  // namespace
}  // namespace uvmpool::stats
