import Herald

/// A `Clock` whose time moves only when the test says so, for code that waits with `clock.sleep(for:)` (such as
/// TokenWebhook's retry back-off). A sleep ends when ``advance(by:)`` reaches its deadline, or at once with
/// `CancellationError` when its task is cancelled. The sleeps asked for are recorded, so a test checks the
/// delays themselves instead of timing them, and ``sleepers`` tells whether anything still waits (a send that
/// was cancelled or gave up leaves nobody waiting).
///
/// ```swift
/// let clock = ManualClock()
/// let webhook = try TokenWebhook(options: options, clock: clock)
/// #expect(await eventually { clock.sleepers == 1 })   // waiting to retry
/// clock.advance(by: .seconds(1))                       // the retry goes out now
/// ```
public final class ManualClock: Clock, Sendable {
    public struct Instant: InstantProtocol {
        /// Time since the clock was made.
        public var offset: Duration

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        var id: Int
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextID = 0
        var sleepers: [Sleeper] = []
        /// Sleeps cancelled before their continuation was stored.
        var cancelled: Set<Int> = []
        var requested: [Duration] = []
    }

    private let state = Locked(State())

    public init() {}

    public var now: Instant { state.withLock { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many sleeps are waiting now.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// Every sleep asked for so far, as the duration from the moment it was asked to its deadline, in order.
    public var requestedSleeps: [Duration] { state.withLock { $0.requested } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            state.requested.append(state.now.duration(to: deadline))
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome: Result<Void, any Error>? = state.withLock { state in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper: Sleeper? = state.withLock { state in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else {
                    state.cancelled.insert(id)
                    return nil
                }
                return state.sleepers.remove(at: index)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
        // A cancellation that came after the sleep ended leaves its mark behind; clear it.
        state.withLock { _ = $0.cancelled.remove(id) }
    }

    /// Moves time forward by `duration` and ends, in deadline order, every sleep whose deadline it reaches.
    public func advance(by duration: Duration) {
        let due: [Sleeper] = state.withLock { state in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
            state.sleepers.removeAll { $0.deadline <= now }
            return due
        }
        for sleeper in due { sleeper.continuation.resume() }
    }
}
