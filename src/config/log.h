// The logger: spdlog, stderr by default, every line prefixed "[uvmpool]" (or the component name set
// before first use), level and file from UVMPOOL_LOG_LEVEL / UVMPOOL_LOG_FILE.
//
// Only fmt's argument capture is in this header: the format string is checked where it is written
// (fmt::format_string), the arguments are passed type-erased, and spdlog lives in log.cpp alone.
// spdlog's headers used to be included here, header-only, by every file that logs: they were most of
// the build's time (about 13 s of compiling per file at -O2, 50 s under ASan+UBSan, in 36 files).
#pragma once

#include <fmt/core.h>

namespace uvmpool::log {

enum class Level { trace, debug, info, warn, error };

// Names the component in the prefix ("uvmpool", "uvmpool-sim"); call before the first log line.
// The name is copied at that first line, so it must live until then (a string literal does).
void set_component(const char* name);

// One line at `level`, if the level is on (the logger is created on first use from the options).
// Never throws: a line that cannot be formatted or written is dropped.
void write(Level level, fmt::string_view format, fmt::format_args args) noexcept;

template <typename... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::trace, format, fmt::make_format_args(args...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::debug, format, fmt::make_format_args(args...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::info, format, fmt::make_format_args(args...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::warn, format, fmt::make_format_args(args...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::error, format, fmt::make_format_args(args...));
}

// Flushes and stops logging through spdlog; later calls are dropped. Called when process exit
// begins, so no destructor order can log into a destroyed sink.
void shutdown();

}  // namespace uvmpool::log
