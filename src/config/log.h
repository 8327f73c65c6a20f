// The logger: spdlog, stderr by default, every line prefixed "[uvmpool]" (or the component name set
// before first use), level and file from UVMPOOL_LOG_LEVEL / UVMPOOL_LOG_FILE.
#pragma once

#include <spdlog/spdlog.h>

namespace uvmpool::log {

// Names the component in the prefix ("uvmpool", "uvmpool-sim"); call before the first log line.
// The name is copied at that first line, so it must live until then (a string literal does).
void set_component(const char* name);

// The process's logger, created on first use from the options. Never throws.
spdlog::logger& get();

template <typename... Args>
void trace(spdlog::format_string_t<Args...> fmt, Args&&... args) { get().trace(fmt, std::forward<Args>(args)...); }
template <typename... Args>
void debug(spdlog::format_string_t<Args...> fmt, Args&&... args) { get().debug(fmt, std::forward<Args>(args)...); }
template <typename... Args>
void info(spdlog::format_string_t<Args...> fmt, Args&&... args) { get().info(fmt, std::forward<Args>(args)...); }
template <typename... Args>
void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) { get().warn(fmt, std::forward<Args>(args)...); }
template <typename... Args>
void error(spdlog::format_string_t<Args...> fmt, Args&&... args) { get().error(fmt, std::forward<Args>(args)...); }

// Flushes and stops logging through spdlog; later calls are dropped. Called when process exit
// begins, so no destructor order can log into a destroyed sink.
void shutdown();

}  // namespace uvmpool::log
