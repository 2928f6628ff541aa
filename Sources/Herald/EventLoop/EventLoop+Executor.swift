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
