// Clang's thread-safety analysis (-Wthread-safety), for the locks whose fields say which lock guards
// them. Under GCC the macros vanish; the clang check in scripts/test.sh compiles the annotated code
// with -Werror=thread-safety, so a field read without its lock, or a function that needs a lock
// called without it, fails CI.
//
//   Mutex mu_;
//   std::vector<Handle> free_ UVMPOOL_GUARDED_BY(mu_);
//   void take() UVMPOOL_REQUIRES(mu_);          // the caller holds mu_
//   { MutexLock lock(mu_); take(); }            // scoped
//
// Mutex is std::mutex with the annotations (libstdc++'s carries none); MutexLock is lock_guard's,
// UniqueMutexLock unique_lock's (for condition variables and early unlocks).
#pragma once

#include <mutex>

#if defined(__clang__)
#define UVMPOOL_TSA(x) __attribute__((x))
#else
#define UVMPOOL_TSA(x)
#endif

#define UVMPOOL_CAPABILITY(name) UVMPOOL_TSA(capability(name))
#define UVMPOOL_SCOPED_CAPABILITY UVMPOOL_TSA(scoped_lockable)
#define UVMPOOL_GUARDED_BY(lock) UVMPOOL_TSA(guarded_by(lock))
#define UVMPOOL_REQUIRES(...) UVMPOOL_TSA(requires_capability(__VA_ARGS__))
#define UVMPOOL_ACQUIRE(...) UVMPOOL_TSA(acquire_capability(__VA_ARGS__))
#define UVMPOOL_RELEASE(...) UVMPOOL_TSA(release_capability(__VA_ARGS__))
// For the few places the analysis cannot follow (fork handlers, destructors): say why beside it.
#define UVMPOOL_TRY_ACQUIRE(...) UVMPOOL_TSA(try_acquire_capability(__VA_ARGS__))
#define UVMPOOL_NO_THREAD_SAFETY_ANALYSIS UVMPOOL_TSA(no_thread_safety_analysis)

namespace uvmpool {

class UVMPOOL_CAPABILITY("mutex") Mutex {
 public:
  void lock() UVMPOOL_ACQUIRE() { m_.lock(); }
  void unlock() UVMPOOL_RELEASE() { m_.unlock(); }
  bool try_lock() UVMPOOL_TRY_ACQUIRE(true) { return m_.try_lock(); }
  std::mutex& native() { return m_; }  // for std::condition_variable, through UniqueMutexLock

 private:
  std::mutex m_;
};

class UVMPOOL_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) UVMPOOL_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~MutexLock() UVMPOOL_RELEASE() { m_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& m_;
};

// unique_lock's part the pool uses: unlock early, lock again, and a std::unique_lock<std::mutex> for
// a condition variable's wait.
class UVMPOOL_SCOPED_CAPABILITY UniqueMutexLock {
 public:
  explicit UniqueMutexLock(Mutex& m) UVMPOOL_ACQUIRE(m) : lock_(m.native()) {}
  ~UniqueMutexLock() UVMPOOL_RELEASE() = default;
  void lock() UVMPOOL_ACQUIRE() { lock_.lock(); }
  void unlock() UVMPOOL_RELEASE() { lock_.unlock(); }
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace uvmpool
