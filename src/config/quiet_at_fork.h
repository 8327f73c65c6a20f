// Work of uvmpool's own threads, run so that a fork never lands inside it; and every fork handler
// of the library, run in one order.
//
// Such work allocates, and fork copies the allocator's locks as they are at that instant. glibc's
// malloc takes its locks around fork, so its child finds them free; an allocator that does not
// (ASan's in GCC 12, whose LeakSanitizer exit check then takes every one of them) leaves the child
// waiting for ever on a lock held by a thread that does not exist there. The statistics publisher
// did that to a child of ipc_fork_keeps_server under ASan, and after it a thread's start (the IPC
// server's, begun by the export just before the fork; tests/hooks
// hardening_forked_children_end_while_publishing, ipc_fork_keeps_server). So a thread that works
// under the lock is started with a handshake: its starter returns once the thread holds the lock.
//
// How: the work holds a lock shared (QuietAtFork), and the one prepare handler of the library takes
// it exclusive before anything else, so a fork waits for the work in progress and none begins until
// the fork has returned. A work is short (an update of the figures, tens of microseconds; a trace
// round, longer on a slow disk; an IPC request, a few driver calls), and a fork waits for it at most
// kLongestForkWait: past that, it goes ahead as
// it would without the lock, so a wait no one foresaw (a driver's own fork handler, run before ours,
// holding a lock the work's driver call needs) costs a fork a second, never the program. Works do not exclude each other: the lock prefers readers, so a work that
// waits for another's (the IPC server's free waiting for the reserve thread) never waits behind a
// fork that waits for it. A work that blocks for long (a socket wait for a slow peer) lets a fork in
// meanwhile (ForkMayLandHere).
//
// Every other handler goes through at_fork, never pthread_atfork: their prepare handlers take locks
// (the peer-access table, the IPC import table) that a work may wait for, so they must run only
// once the works are out; pthread_atfork runs prepare handlers newest first, which would put a
// table registered after the first work ahead of the quiet lock (the forking thread holding the
// table, waiting for the work; the work waiting for the table).
//
// Rules for a work: it must not fork, nor wait for a program thread (that one may be forking);
// it may wait for uvmpool's locks and threads. Covered: the statistics publisher's
// updates, the trace writer's rounds, the IPC server (all but its waits for sockets). Not covered:
// the tiering mover and its stall guard, which wait for the program's GPU work (which may wait for
// the program), and the host reserve's thread, whose rounds follow one another while the program
// spills: covered, a fork waited the whole kLongestForkWait each time (client_hardening
// fork-exit-spilling, 1002 ms against 1.2 ms). Forks while those run, or while the program's own
// threads allocate, are no safer under such an allocator than without uvmpool.
#pragma once

#include <chrono>

namespace uvmpool::config {

// The longest a fork waits for the works in progress.
inline constexpr std::chrono::milliseconds kLongestForkWait{1000};

// Held shared for its lifetime; nests on one thread.
class QuietAtFork {
 public:
  QuietAtFork();
  ~QuietAtFork();
  QuietAtFork(const QuietAtFork&) = delete;
  QuietAtFork& operator=(const QuietAtFork&) = delete;
};

// Inside a QuietAtFork of this thread: lets a fork in for its lifetime (the thread must then not
// touch the allocator: a poll(), a blocking read); elsewhere nothing.
class ForkMayLandHere {
 public:
  ForkMayLandHere();
  ~ForkMayLandHere();
  ForkMayLandHere(const ForkMayLandHere&) = delete;
  ForkMayLandHere& operator=(const ForkMayLandHere&) = delete;

 private:
  int depth_;  // this thread's QuietAtFork depth, given back on destruction
};

// pthread_atfork for uvmpool's handlers (any may be null): prepare handlers run newest first after
// the quiet lock is taken, parent and child handlers oldest first before it is given back. Never
// allocates: safe from any hook.
void at_fork(void (*prepare)(), void (*parent)(), void (*child)());

}  // namespace uvmpool::config
