import Synchronization

/// A task scheduled to run on a loop at a deadline. Cancel it from any thread with ``cancel()``.
public final class ScheduledTask: Sendable {
    /// When the task is due.
    public let deadline: Deadline
    package let body: @Sendable () -> Void
    private let state = Atomic<UInt8>(State.pending)

    private enum State {
        static let pending: UInt8 = 0
        static let started: UInt8 = 1
        static let cancelled: UInt8 = 2
    }

    init(deadline: Deadline, body: @escaping @Sendable () -> Void) {
        self.deadline = deadline
        self.body = body
    }

    /// For schedulers outside this module (the manual test loop).
    package convenience init(manualDeadline: Deadline, body: @escaping @Sendable () -> Void) {
        self.init(deadline: manualDeadline, body: body)
    }

    /// Cancels the task. Returns `true` when the task will now never run, `false` when it has already
    /// started (or run, or was cancelled before). Callable from any thread.
    @discardableResult
    public func cancel() -> Bool {
        state.compareExchange(expected: State.pending, desired: State.cancelled, ordering: .acquiringAndReleasing).exchanged
    }

    /// Whether ``cancel()`` has succeeded for this task.
    public var isCancelled: Bool { state.load(ordering: .acquiring) == State.cancelled }

    /// Claims the task for running; `false` when it was cancelled. Each task is claimed at most once.
    package func claim() -> Bool {
        state.compareExchange(expected: State.pending, desired: State.started, ordering: .acquiringAndReleasing).exchanged
    }
}

/// A task that runs again and again on a loop until it is cancelled. Callable from any thread.
public final class RepeatedTask: Sendable {
    private let current = Locked<ScheduledTask?>(nil)
    private let cancelled = Atomic<Bool>(false)

    init() {}

    /// Stops further runs. A run that has already started finishes. Callable from any thread, including from the task itself.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
        _ = current.withLock { $0?.cancel() }
    }

    /// Whether ``cancel()`` was called.
    public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

    func setCurrent(_ task: ScheduledTask) {
        current.withLock { $0 = task }
        if isCancelled { task.cancel() }
    }
}

/// A min-heap of scheduled tasks ordered by deadline, then by insertion order. Owned by one loop; not thread-safe.
package struct TimerHeap {
    /// The ordering key is kept beside the task so that sifting never touches the task object.
    private struct Entry {
        let deadline: Deadline
        let sequence: UInt64
        let task: ScheduledTask

        @inline(__always)
        static func < (lhs: Entry, rhs: Entry) -> Bool {
            lhs.deadline != rhs.deadline ? lhs.deadline < rhs.deadline : lhs.sequence < rhs.sequence
        }
    }

    private var entries: [Entry] = []
    private var nextSequence: UInt64 = 0
    private var insertsSinceCompaction = 0

    package init() {}

    package var count: Int { entries.count }
    package var isEmpty: Bool { entries.isEmpty }

    /// The earliest task, cancelled or not.
    package var first: ScheduledTask? { entries.first?.task }

    /// Adds a task; returns `true` when it became the earliest.
    @discardableResult
    package mutating func insert(_ task: ScheduledTask) -> Bool {
        entries.append(Entry(deadline: task.deadline, sequence: nextSequence, task: task))
        nextSequence &+= 1
        insertsSinceCompaction += 1
        siftUp(entries.count - 1)
        return entries[0].task === task
    }

    /// Removes and returns the earliest task if it is due at `now`.
    package mutating func popDue(at now: Deadline) -> ScheduledTask? {
        guard let top = entries.first, top.deadline <= now else { return nil }
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            siftDown(0)
        }
        return top.task
    }

    /// Drops cancelled tasks, so that a pattern of schedule-then-cancel (idle timers reset on every request)
    /// does not grow the heap without bound. The scan runs only after as many inserts as half the heap holds,
    /// so its cost per insert stays constant however many timers are pending.
    package mutating func compactIfMostlyCancelled() {
        guard insertsSinceCompaction >= max(64, entries.count / 2) else { return }
        insertsSinceCompaction = 0
        let live = entries.filter { !$0.task.isCancelled }
        guard live.count * 2 < entries.count else { return }
        entries = live
        for index in stride(from: entries.count / 2 - 1, through: 0, by: -1) { siftDown(index) }
    }

    /// Removes every task, returning them.
    package mutating func removeAll() -> [ScheduledTask] {
        defer { entries.removeAll() }
        return entries.map(\.task)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        let moving = entries[child]
        while child > 0 {
            let parent = (child - 1) / 2
            guard moving < entries[parent] else { break }
            entries[child] = entries[parent]
            child = parent
        }
        entries[child] = moving
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let moving = entries[parent]
        let count = entries.count
        while true {
            let left = 2 * parent + 1
            guard left < count else { break }
            var smallest = left
            if left + 1 < count, entries[left + 1] < entries[left] { smallest = left + 1 }
            guard entries[smallest] < moving else { break }
            entries[parent] = entries[smallest]
            parent = smallest
        }
        entries[parent] = moving
    }
}
