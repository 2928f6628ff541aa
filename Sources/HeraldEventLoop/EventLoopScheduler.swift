/// What the real ``EventLoop`` and the test loop `HeraldTesting.ManualEventLoop` have in common:
/// running work on the loop and scheduling it for later.
///
/// Code that only needs to run and schedule work takes `any EventLoopScheduler`, so its tests can drive
/// time by hand instead of sleeping.
public protocol EventLoopScheduler: AnyObject, Sendable {
    /// The loop's notion of the current time. Always use this (not ``Deadline/now()``) for deadlines
    /// that tests should control. Callable from any thread.
    var now: Deadline { get }

    /// Whether the caller is running on this loop. Callable from any thread.
    var inEventLoop: Bool { get }

    /// Runs `task` on the loop, after the work already queued. Callable from any thread: tasks submitted
    /// from one thread run in the order they were submitted. Work submitted after the loop has shut down
    /// is dropped.
    func execute(_ task: @escaping @Sendable () -> Void)

    /// Runs `task` on the loop once `deadline` has passed, unless the returned task is cancelled first.
    /// Tasks with the same deadline run in the order they were scheduled. Callable from any thread.
    @discardableResult
    func scheduleTask(deadline: Deadline, _ task: @escaping @Sendable () -> Void) -> ScheduledTask
}

extension EventLoopScheduler {
    /// Runs `task` on the loop after `delay`, unless the returned task is cancelled first. Callable from any thread.
    @discardableResult
    public func scheduleTask(in delay: Duration, _ task: @escaping @Sendable () -> Void) -> ScheduledTask {
        scheduleTask(deadline: now + delay, task)
    }

    /// Runs `task` on the loop first after `initialDelay` and then again `delay` after each run ends, until
    /// the returned ``RepeatedTask`` is cancelled (also from inside `task`). Callable from any thread.
    @discardableResult
    public func scheduleRepeatedTask(
        initialDelay: Duration,
        delay: Duration,
        _ task: @escaping @Sendable (RepeatedTask) -> Void
    ) -> RepeatedTask {
        let repeated = RepeatedTask()
        scheduleNextRun(of: repeated, at: now + initialDelay, delay: delay, task)
        return repeated
    }

    private func scheduleNextRun(
        of repeated: RepeatedTask,
        at deadline: Deadline,
        delay: Duration,
        _ task: @escaping @Sendable (RepeatedTask) -> Void
    ) {
        let next = scheduleTask(deadline: deadline) { [self] in
            guard !repeated.isCancelled else { return }
            task(repeated)
            guard !repeated.isCancelled else { return }
            scheduleNextRun(of: repeated, at: now + delay, delay: delay, task)
        }
        repeated.setCurrent(next)
    }

    /// Stops the process when the caller is not on the loop. Use it on entry points that must run on the loop.
    public func preconditionInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        precondition(inEventLoop, "this must be called on the event loop thread", file: file, line: line)
    }

    /// Like ``preconditionInEventLoop(file:line:)``, but checked only in debug builds: for internal hot paths.
    public func assertInEventLoop(file: StaticString = #fileID, line: UInt = #line) {
        assert(inEventLoop, "this must be called on the event loop thread", file: file, line: line)
    }
}
