import Glibc

/// A value guarded by a pthread mutex.
///
/// Used instead of the standard library's `Synchronization.Mutex` because Thread Sanitizer understands
/// pthread mutexes but not the futex-based `Mutex` on Linux, whose critical sections it reports as races.
/// Keeping the loop's locks visible to TSan is what lets CI run the loop tests under it.
package final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is only read or written between pthread_mutex_lock and unlock.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Unchecked for exclusivity: every access is in `withLock`, under the mutex, which is not recursive (a nested
    /// `withLock` on one thread deadlocks before it could overlap an access), so the run-time check could never fire.
    @exclusivity(unchecked) private var value: Value

    package init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with the lock held.
    @inline(__always)
    package func withLock<R, E: Error>(_ body: (inout Value) throws(E) -> R) throws(E) -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

extension Locked where Value == Bool {
    /// Sets the flag and returns whether this call was the one that set it: for work that several paths may finish
    /// (a continuation resumed by whichever of a timer and a result comes first) but only one may act on. Any thread.
    package func setFirst() -> Bool {
        withLock { flag in
            let first = !flag
            flag = true
            return first
        }
    }
}
