// Opening the files uvmpool writes at a path the user names (UVMPOOL_TRACE, UVMPOOL_STATS_FILE,
// UVMPOOL_LOG_FILE): the one place that decides what may be written to. A planted symbolic link or
// hard link, a device or fifo, or another user's file is refused, so a privileged run never writes
// through a name someone else prepared (docs/security.md).
#pragma once

#include <string>

namespace uvmpool::config {

enum class OutputMode {
  Truncate,  // trace, stats file: the file's old contents go
  Append,    // log: lines are added at the end
};

// Opens `path` for writing: a new file is created with O_EXCL and mode 0600; an existing one is
// used only if it is a regular file with one link, owned by this process's effective user, and not
// a symbolic link (O_NOFOLLOW). Returns the descriptor (O_CLOEXEC), or -1 with `error` saying why.
int open_output_file(const std::string& path, OutputMode mode, std::string& error);

}  // namespace uvmpool::config
