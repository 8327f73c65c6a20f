#include "config/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include <unistd.h>

// spdlog is compiled here alone (header-only, SPDLOG_HEADER_ONLY from uvmpool_logging_deps), and fmt
// once for the library in fmt_library.cpp: nothing else includes spdlog (see log.h).
#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "config/options.h"
#include "config/output_file.h"

namespace uvmpool::log {
namespace {

std::atomic<const char*> g_component{"uvmpool"};
std::atomic<bool> g_shut_down{false};
std::atomic<spdlog::logger*> g_logger{nullptr};

// UVMPOOL_LOG_FILE: appends each line to a descriptor open_output_file checked (never closed: the
// logger lives until the process ends).
class FdSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FdSink(int fd) : fd_(fd) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere to report it: the log itself failed
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_;
};

spdlog::level::level_enum to_spdlog(config::LogLevel level) {
  switch (level) {
    case config::LogLevel::trace: return spdlog::level::trace;
    case config::LogLevel::debug: return spdlog::level::debug;
    case config::LogLevel::info: return spdlog::level::info;
    case config::LogLevel::warn: return spdlog::level::warn;
    case config::LogLevel::error: return spdlog::level::err;
    case config::LogLevel::off: return spdlog::level::off;
  }
  return spdlog::level::warn;
}

// Built by hand, not through spdlog::stderr_logger_mt and friends: those register the logger in
// spdlog's global registry, which other copies of spdlog in the process may share by name.
spdlog::logger* make_logger() {
  const config::Options& opts = config::options();
  spdlog::sink_ptr sink;
  std::string file_error;
  if (!opts.log_file.empty()) {
    // Opened by uvmpool, not by spdlog: no symbolic links, no other user's file, new files 0600,
    // and no missing directories made (a mistyped path is reported instead).
    const int fd = config::open_output_file(opts.log_file, config::OutputMode::Append, file_error);
    if (fd >= 0) sink = std::make_shared<FdSink>(fd);
  }
  if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();

  auto* logger = new spdlog::logger(g_component.load(), std::move(sink));
  logger->set_pattern("[%n] %l: %v");
  logger->flush_on(spdlog::level::warn);  // a warning should survive a crash right after it
  logger->set_level(to_spdlog(opts.log_level));
  if (!file_error.empty()) {
    logger->warn("cannot open UVMPOOL_LOG_FILE '{}' ({}); logging to stderr", opts.log_file, file_error);
  }
  g_logger.store(logger);
  // shutdown() may have run while we were building: it found no logger to silence, so we do.
  if (g_shut_down.load()) logger->set_level(spdlog::level::off);
  return logger;
}

// Stands in when even building the logger failed (no memory): drops everything.
spdlog::logger& null_logger() {
  static auto* logger = [] {
    auto* l = new spdlog::logger("uvmpool");  // no sinks
    l->set_level(spdlog::level::off);
    return l;
  }();
  return *logger;
}

spdlog::level::level_enum to_spdlog(Level level) {
  switch (level) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
  }
  return spdlog::level::err;
}

// The process's logger, created on first use from the options; a stand-in that drops everything when
// that fails. Throws only when even the stand-in cannot be made (no memory).
spdlog::logger& get() {
  // Never destroyed: threads and exit-time code may log after static destructors have begun.
  static spdlog::logger* logger = []() -> spdlog::logger* {
    try {
      return make_logger();
    } catch (...) {
      return nullptr;
    }
  }();
  return logger ? *logger : null_logger();
}

}  // namespace

void set_component(const char* name) {
  if (name) g_component.store(name);
}

void write(Level level, fmt::string_view format, fmt::format_args args) noexcept {
  try {
    spdlog::logger& logger = get();  // throws only when even the stand-in cannot be made (no memory)
    const spdlog::level::level_enum to = to_spdlog(level);
    if (!logger.should_log(to)) return;
    fmt::memory_buffer line;
    fmt::vformat_to(fmt::appender(line), format, args);
    logger.log(to, spdlog::string_view_t(line.data(), line.size()));
  } catch (...) {
    // No memory for the logger or the line, or a sink that threw: nowhere to report it.
  }
}

void shutdown() {
  g_shut_down.store(true);
  if (spdlog::logger* logger = g_logger.load()) {
    logger->flush();
    logger->set_level(spdlog::level::off);
  }
}

}  // namespace uvmpool::log
