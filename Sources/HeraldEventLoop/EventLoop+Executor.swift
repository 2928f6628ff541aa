/// The loop as a Swift executor: an actor whose `unownedExecutor` is the loop's, or a task started with
/// `Task(executorPreference: loop)`, runs its code on the loop thread, with no hop between loop callbacks
/// and `async` code.
extension EventLoop: SerialExecutor, TaskExecutor {
    /// Queues a job of the Swift runtime; it runs on the loop thread in submission order.
    public func enqueue(_ job: consuming ExecutorJob) {
        enqueue(.job(UnownedJob(job)))
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(ordinary: self)
    }

    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    public func isSameExclusiveExecutionContext(other: EventLoop) -> Bool {
        self === other
    }

    public func checkIsolated() {
        preconditionInEventLoop()
    }
}

/// An ``EventLoop``'s own task executor (``EventLoop/taskExecutor``): `Task(executorPreference: loop.taskExecutor)`
/// runs the task on the loop thread, in order with the loop's other work, but *not isolated* to the loop as a
/// serial executor, so its calls to nonisolated `async` functions continue on the thread at once. With the
/// loop itself as the preference, each such call goes through the loop's queue (a hop per `await`: about
/// 2,000 instructions and a lock each). The bus runs every message's handlers this way.
public final class LoopTaskExecutor: TaskExecutor {
    // The loop owns its task executor; the executor only points back (weakly: a task may outlive the loop, and
    // its jobs are then dropped, as the loop drops all work submitted after it closed).
    private weak let loop: EventLoop?

    init(loop: EventLoop) {
        self.loop = loop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        loop?.enqueue(.taskJob(UnownedJob(job)))
    }
}
