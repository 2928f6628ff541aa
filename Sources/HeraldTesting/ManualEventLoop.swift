public import Herald

/// A loop for deterministic tests: the same scheduling API as `Herald/EventLoop` (it is an
/// `EventLoopScheduler`), with time that moves only when the test calls ``advanceTime(by:)`` or
/// ``advanceTime(to:)``, and queued work that runs only in ``run()`` or while time advances.
///
/// It runs everything on the thread that drives it and reports `inEventLoop == true` everywhere, like
/// SwiftNIO's `EmbeddedEventLoop`. Work may be submitted from any thread; it is locked.
public final class ManualEventLoop: EventLoopScheduler, Sendable {
    private struct State {
        var now: Deadline
        var queue: [@Sendable () -> Void] = []
        var timers = TimerHeap()
    }

    private let state: Locked<State>

    /// Creates a loop whose clock starts at `start` (by default an arbitrary fixed point, not the real time).
    public init(start: Deadline = Deadline(uptimeNanoseconds: 1_000_000_000)) {
        state = Locked(State(now: start))
    }

    public var now: Deadline { state.withLock { $0.now } }

    public var inEventLoop: Bool { true }

    public func execute(_ task: @escaping @Sendable () -> Void) {
        state.withLock { $0.queue.append(task) }
    }

    @discardableResult
    public func scheduleTask(deadline: Deadline, _ task: @escaping @Sendable () -> Void) -> ScheduledTask {
        let scheduled = ScheduledTask(manualDeadline: deadline, body: task)
        state.withLock { _ = $0.timers.insert(scheduled) }
        return scheduled
    }

    /// Runs queued work (including work queued while running) and timers due at the current time.
    public func run() {
        while true {
            let queued: [@Sendable () -> Void] = state.withLock { state in
                defer { state.queue.removeAll() }
                return state.queue
            }
            if !queued.isEmpty {
                for task in queued { task() }
                continue
            }
            guard let due = state.withLock({ $0.timers.popDue(at: $0.now) }) else { return }
            if due.claim() { due.body() }
        }
    }

    /// Moves the clock forward by `duration`, running each timer that falls due at its own deadline (the clock
    /// reads the timer's deadline while it runs), in deadline order, and queued work in between.
    public func advanceTime(by duration: Duration) {
        advanceTime(to: now + duration)
    }

    /// Moves the clock forward to `deadline` (never backwards); see ``advanceTime(by:)``.
    public func advanceTime(to deadline: Deadline) {
        run()
        while true {
            let due: ScheduledTask? = state.withLock { state in
                guard let first = state.timers.first, first.deadline <= deadline else { return nil }
                state.now = max(state.now, first.deadline)
                return state.timers.popDue(at: state.now)
            }
            guard let due else { break }
            if due.claim() { due.body() }
            run()
        }
        state.withLock { $0.now = max($0.now, deadline) }
        run()
    }

    /// Timers not yet run, cancelled ones included until their deadline passes.
    public var pendingTimerCount: Int { state.withLock { $0.timers.count } }
}
