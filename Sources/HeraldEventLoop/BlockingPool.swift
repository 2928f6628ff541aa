/// A fixed number of threads for blocking work (file I/O, a slow C library, CPU-heavy work) that must not
/// run on an event loop. The queue is bounded: a job submitted to a full queue is refused at once.
///
/// Each ``EventLoop`` owns one, created on first use; ``EventLoop/offload(_:)`` is the usual way in.
public final class BlockingPool: Sendable {
    /// A job and what to do instead when the pool shuts down before the job started.
    struct Job {
        let run: @Sendable () -> Void
        let cancel: @Sendable () -> Void
    }

    private struct State {
        var jobs: [Job] = []
        var head = 0
        var running = true
        var queued: Int { jobs.count - head }
    }

    /// How many threads run jobs.
    public let threadCount: Int
    /// How many jobs may wait for a thread before ``submit(_:onCancel:)`` refuses more.
    public let queueLimit: Int
    private let state: ConditionLock<State>
    private let threads: ConditionLock<[SpawnedThread]>

    /// Starts `threads` threads named `name`.
    public init(threads: Int, queueLimit: Int, name: String = "herald-blocking") throws {
        precondition(threads > 0 && queueLimit > 0, "a blocking pool needs at least one thread and one queue slot")
        self.threadCount = threads
        self.queueLimit = queueLimit
        self.state = ConditionLock(State())
        self.threads = ConditionLock([])
        for index in 0..<threads {
            let thread = try SpawnedThread.spawn(name: "\(name)-\(index)") { [state] in
                BlockingPool.work(state)
            }
            self.threads.withLockBroadcasting { $0.append(thread) }
        }
    }

    private static func work(_ state: ConditionLock<State>) {
        while true {
            let job: Job? = state.wait(
                until: { !$0.running || $0.queued > 0 },
                then: { state in
                    guard state.queued > 0 else { return nil }
                    let job = state.jobs[state.head]
                    state.head += 1
                    if state.head == state.jobs.count {
                        state.jobs.removeAll(keepingCapacity: true)
                        state.head = 0
                    }
                    return job
                })
            guard let job else { return }
            job.run()
        }
    }

    /// Queues `work` for a pool thread. Throws ``EventLoopError/poolExhausted(limit:)`` when the queue is full
    /// and ``EventLoopError/shutDown`` after ``shutdown()``. If the pool shuts down before the job starts,
    /// `onCancel` runs instead. Callable from any thread.
    public func submit(_ work: @escaping @Sendable () -> Void, onCancel: @escaping @Sendable () -> Void = {}) throws(EventLoopError) {
        // One job wakes one idle thread (each wakeup of a thread that then finds no job costs two context switches).
        let outcome: EventLoopError? = state.withLockSignalling { state in
            guard state.running else { return .shutDown }
            guard state.queued < queueLimit else { return .poolExhausted(limit: queueLimit) }
            state.jobs.append(Job(run: work, cancel: onCancel))
            return nil
        }
        if let outcome { throw outcome }
    }

    /// Stops taking jobs, cancels the ones that have not started (their `onCancel` runs), waits for the
    /// running ones to finish and joins the threads. Callable from any thread but a pool thread; idempotent.
    public func shutdown() {
        let cancelled: [Job] = state.withLockBroadcasting { state in
            state.running = false
            defer {
                state.jobs.removeAll()
                state.head = 0
            }
            return Array(state.jobs[state.head...])
        }
        for job in cancelled { job.cancel() }
        let joined = threads.withLockBroadcasting { threads in
            defer { threads.removeAll() }
            return threads
        }
        for thread in joined { thread.join() }
    }
}
