#include "config/limits.h"

namespace uvmpool::config {
namespace {

// The page size: a granularity below it could not be mapped.
constexpr std::uint64_t kMinGranularity = 4096;

constexpr Limit kLimits[] = {
    {.name = "UVMPOOL_SIM_DEVICES",
     .expected = "a whole number from 1 to 16",
     .int_ok = [](Int v) { return v >= 1 && v <= 16; }},
    {.name = "UVMPOOL_SIM_GRANULARITY",
     .expected = "a power of two of at least 4K, such as 64K or 2M",
     .size_ok = [](const Size& s) { return s.bytes >= kMinGranularity && (s.bytes & (s.bytes - 1)) == 0; }},
    {.name = "UVMPOOL_SIM_HANG_TIMEOUT_MS",
     .expected = "a whole number of milliseconds from 0 to 600000",
     .int_ok = [](Int v) { return v >= 0 && v <= 600000; }},
    {.name = "UVMPOOL_STATS_INTERVAL",
     .expected = "a whole number of milliseconds from 10 to 60000",
     .int_ok = [](Int v) { return v >= 10 && v <= 60000; }},
    {.name = "UVMPOOL_TRACE_MAX",
     .expected = "a size of at least 64K, such as 256M or 2G",
     .size_ok = [](const Size& s) { return s.bytes >= (64u << 10); }},
    {.name = "UVMPOOL_CHUNK_SIZE",
     .expected = "0 (the driver's granularity) or a size from 4K to 1G, such as 2M or 64M",
     .size_ok = [](const Size& s) { return s.bytes == 0 || (s.bytes >= kMinGranularity && s.bytes <= kMaxChunkSize); }},
    {.name = "UVMPOOL_EXTENT_SIZE",
     .expected = "0 (off) or a power of two up to 1G, such as 32M",
     .size_ok = [](const Size& s) { return s.bytes == 0 || ((s.bytes & (s.bytes - 1)) == 0 && s.bytes <= kMaxChunkSize); }},
    {.name = "UVMPOOL_TIERING",
     .expected = "auto, remote or off",
     .text_ok = [](std::string_view v) { return v.empty() || v == "auto" || v == "remote" || v == "off"; }},
    {.name = "UVMPOOL_TIERING_COPY",
     .expected = "held or overlap",
     .text_ok = [](std::string_view v) { return v.empty() || v == "held" || v == "overlap"; }},
    {.name = "UVMPOOL_TIERING_COMMIT",
     .expected = "beside or after",
     .text_ok = [](std::string_view v) { return v.empty() || v == "beside" || v == "after"; }},
    {.name = "UVMPOOL_TIERING_EPOCHS",
     .expected = "measure, thread or launch",
     .text_ok = [](std::string_view v) { return v.empty() || v == "measure" || v == "thread" || v == "launch"; }},
    {.name = "UVMPOOL_TIERING_PREPARE",
     .expected = "placement or hold",
     .text_ok = [](std::string_view v) { return v.empty() || v == "placement" || v == "hold"; }},
    {.name = "UVMPOOL_TIERING_UNIT",
     .expected = "allocation or piece",
     .text_ok = [](std::string_view v) { return v.empty() || v == "allocation" || v == "piece"; }},
    {.name = "UVMPOOL_TIERING_THRASH_GUARD",
     .expected = "measure, on or off",
     .text_ok = [](std::string_view v) { return v.empty() || v == "measure" || v == "on" || v == "off"; }},
    {.name = "UVMPOOL_TIERING_LOOKAHEAD",
     .expected = "a whole number of launches from 1 to 4096",
     .int_ok = [](Int v) { return v >= 1 && v <= 4096; }},
    {.name = "UVMPOOL_TIERING_IN_FLIGHT",
     .expected = "a size of at least 2M, such as 512M",
     .size_ok = [](const Size& s) { return s.bytes >= (2u << 20); }},
    {.name = "UVMPOOL_TIERING_BATCH",
     .expected = "a size of at least 2M, such as 256M",
     .size_ok = [](const Size& s) { return s.bytes >= (2u << 20); }},
    {.name = "UVMPOOL_TIERING_HOLDS_AHEAD",
     .expected = "a whole number of epochs from 1 to 256",
     .int_ok = [](Int v) { return v >= 1 && v <= 256; }},
    {.name = "UVMPOOL_CARVE_GROUP",
     .expected = "a whole number of slots from 1 to 64",
     .int_ok = [](Int v) { return v >= 1 && v <= 64; }},
    {.name = "UVMPOOL_DRIVER_PATH",
     .expected = "an absolute path such as /usr/lib/x86_64-linux-gnu/libcuda.so.1, or nothing",
     .text_ok = [](std::string_view path) { return path.empty() || path.front() == '/'; }},
};

}  // namespace

const Limit* find_limit(std::string_view name) {
  for (const Limit& limit : kLimits) {
    if (name == limit.name) return &limit;
  }
  return nullptr;
}

std::string_view expected_form(const OptionInfo& row) {
  const Limit* limit = find_limit(row.name);
  return limit ? std::string_view(limit->expected) : accepted_form(row.type);
}

}  // namespace uvmpool::config
