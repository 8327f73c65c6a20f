// The lock of quiet_at_fork.h and its fork handlers.
#include "config/quiet_at_fork.h"

#include <pthread.h>

#include <mutex>

namespace uvmpool::config {
namespace {

void lock_for_fork();
void unlock_after_fork();

std::mutex& work_mu() {
  // Made and registered at the first work, before which no fork needs to wait; never destroyed
  // (background threads may work during exit).
  static std::mutex* mu = [] {
    auto* m = new std::mutex;
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
    return m;
  }();
  return *mu;
}

// The forking thread holds the lock across fork; in the child it is that same thread, which may
// unlock it.
void lock_for_fork() { work_mu().lock(); }
void unlock_after_fork() { work_mu().unlock(); }

}  // namespace

QuietAtFork::QuietAtFork() { work_mu().lock(); }
QuietAtFork::~QuietAtFork() { work_mu().unlock(); }

}  // namespace uvmpool::config
