import Glibc

/// A pthread mutex with a condition variable, for the few places that must block a thread
/// (pool workers waiting for jobs, `EventLoop.waitUntilClosed()`). Never used on the loop's hot path.
final class ConditionLock<State>: @unchecked Sendable {
    // @unchecked Sendable: `state` is only read or written between pthread_mutex_lock and unlock.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var state: State

    init(_ state: State) {
        self.state = state
        pthread_mutex_init(mutex, nil)
        pthread_cond_init(condition, nil)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    // Waiters are woken after the lock is released: a waiter woken while it is held (at once, when it runs on the
    // waker's CPU) would find the lock taken and sleep on it again, two more context switches and futex calls for each
    // wake-up. Every waiter checks what it waits for under the lock, so none misses a change made before the wake-up.
    // The caller keeps the lock alive across the call (a waiter that returns may drop its reference before the
    // wake-up): the pool's submitters hold the pool, the loop thread holds its loop.

    /// Runs `body` with the lock held and wakes every waiter afterwards.
    func withLockBroadcasting<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer {
            pthread_mutex_unlock(mutex)
            pthread_cond_broadcast(condition)
        }
        return try body(&state)
    }

    /// Runs `body` with the lock held and wakes one waiter afterwards: for a change only one waiter can act on (a job
    /// queued for one of the pool's threads), where waking all of them would make the rest find nothing and sleep again.
    func withLockSignalling<R>(_ body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer {
            pthread_mutex_unlock(mutex)
            pthread_cond_signal(condition)
        }
        return try body(&state)
    }

    /// Waits until `ready` holds, then runs `body` with the lock held.
    func wait<R>(until ready: (State) -> Bool, then body: (inout State) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while !ready(state) { pthread_cond_wait(condition, mutex) }
        return try body(&state)
    }
}
