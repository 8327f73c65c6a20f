// Work of a background thread that wakes on its own (the statistics publisher, the trace writer),
// run so that a fork never lands inside it.
//
// Such work allocates, and fork copies the allocator's locks as they are at that instant. glibc's
// malloc takes its locks around fork, so its child finds them free; an allocator that does not
// (ASan's in GCC 12, whose LeakSanitizer exit check then takes every one of them) leaves the child
// waiting for ever on a lock held by a thread that does not exist there. The publisher waking every
// UVMPOOL_STATS_INTERVAL did that to a child of ipc_fork_keeps_server under ASan (its exit hung in
// LeakSanitizer's lock of the allocator; tests/hooks hardening_forked_children_end_while_publishing).
//
// How: the work holds a lock that a pthread_atfork prepare handler takes, so a fork waits for the
// work in progress (an update of the figures, tens of microseconds; a round of the trace writer,
// longer when it writes to a slow disk) and none begins until the fork has returned.
// Rules for the work inside: it must not fork, and must not wait for a lock that another prepare
// handler takes (the IPC import table, the peer-access table): that handler may already hold it.
// Two works share the lock, so neither may be joined by a thread holding a lock the other waits for
// (stats/observers.cpp stops the publisher before the trace for that).
// Not covered: threads that work in answer to the program's calls (the tiering mover, the IPC
// server) are busy only while the program is, and are not held off a fork.
#pragma once

namespace uvmpool::config {

class QuietAtFork {
 public:
  QuietAtFork();
  ~QuietAtFork();
  QuietAtFork(const QuietAtFork&) = delete;
  QuietAtFork& operator=(const QuietAtFork&) = delete;
};

}  // namespace uvmpool::config
