// The live process's statistics as a Report (report.h): the hook counters of counters.h, the
// trace's figures and every device pool's DeviceStats, each under a metric name. Reads atomics
// only: no driver call, no lock a pool's fast path takes, so it runs at exit and on any thread.
#pragma once

#include "pool/pool.h"
#include "stats/report.h"

namespace uvmpool::stats {

// The figures of `pool` (nullptr: the hook counters alone) and of this process's hook counters.
Report collect(const pool::Pool* pool);
// The same for the process's pool, if it was made.
Report collect_process();

// The UUID of every device, by ordinal, for the reports that follow. Read from the driver once, by
// the caller (collect itself makes no driver call); set before the publisher starts.
void set_device_uuids(std::vector<std::string> uuids);

// The metric list of a DeviceStats, in Report::device_metrics order, and its values.
const std::vector<MetricInfo>& device_metric_infos();
std::vector<std::uint64_t> device_values(const pool::DeviceStats& s);

}  // namespace uvmpool::stats
