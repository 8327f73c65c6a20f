// Who this process is, for the files and reports that name it (the exit JSON, the trace, the
// live-statistics segment).
#pragma once

#include <string>

namespace uvmpool::config {

// A file name with "%p" replaced by the process id (one file per process of a job).
std::string expand_pid(const std::string& path);

// The command line, arguments separated by spaces (at most 4 KiB of it); "?" when unreadable.
std::string command_line();

}  // namespace uvmpool::config
