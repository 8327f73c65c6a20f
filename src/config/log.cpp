#include "config/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "config/options.h"

namespace uvmpool::log {
namespace {

std::atomic<const char*> g_component{"uvmpool"};
std::atomic<bool> g_shut_down{false};
std::atomic<spdlog::logger*> g_logger{nullptr};

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
    // Tried with fopen first because spdlog would create missing directories; a mistyped path
    // should be reported, not silently made.
    if (std::FILE* probe = std::fopen(opts.log_file.c_str(), "a")) {
      std::fclose(probe);
      try {
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(opts.log_file, /*truncate=*/false);
      } catch (const std::exception& e) {
        file_error = e.what();
      }
    } else {
      file_error = std::strerror(errno);
    }
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

}  // namespace

void set_component(const char* name) {
  if (name) g_component.store(name);
}

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

void shutdown() {
  g_shut_down.store(true);
  if (spdlog::logger* logger = g_logger.load()) {
    logger->flush();
    logger->set_level(spdlog::level::off);
  }
}

}  // namespace uvmpool::log
