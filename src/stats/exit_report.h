// What uvmpool did, reported once the program exits (UVMPOOL_STATS, UVMPOOL_STATS_FILE).
#pragma once

namespace uvmpool::stats {

// Prints the table to stderr and/or writes the JSON file, as the options ask. No driver call, no logger.
void write_exit_report();

}  // namespace uvmpool::stats
