import Dispatch
import HeraldEventLoop

/// A task executor that holds the jobs given to it until `release()`, then runs them on a queue of its own: the
/// worker tasks of a Herald given it wait for a thread as long as the test wants, as on a busy machine.
final class HeldBackExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked Sendable: the queue is thread-safe; the count is behind a lock.
    private let queue = DispatchQueue(label: "held-back")
    private let enqueuedJobs = Locked(0)

    init() { queue.suspend() }

    /// How many jobs were given to the executor so far.
    var enqueued: Int { enqueuedJobs.withLock { $0 } }

    func enqueue(_ job: consuming ExecutorJob) {
        enqueuedJobs.withLock { $0 += 1 }
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// Runs the jobs held so far and every later one.
    func release() { queue.resume() }
}
