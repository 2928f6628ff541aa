import Glibc

/// A point in time on the monotonic clock (`CLOCK_MONOTONIC`, the clock libuv's timers use),
/// in nanoseconds since an arbitrary origin. Deadlines compare and subtract; they never go backwards.
///
/// Code that should be testable with manual time asks its loop for ``EventLoopScheduler/now``
/// rather than calling ``now()`` directly.
public struct Deadline: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Nanoseconds since the clock's origin.
    public var uptimeNanoseconds: UInt64

    public init(uptimeNanoseconds: UInt64) {
        self.uptimeNanoseconds = uptimeNanoseconds
    }

    /// The current time on the monotonic clock.
    public static func now() -> Deadline {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Deadline(uptimeNanoseconds: UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec))
    }

    /// The earliest representable deadline: a task scheduled for it is due at once.
    public static let distantPast = Deadline(uptimeNanoseconds: 0)
    /// A deadline that is never reached.
    public static let distantFuture = Deadline(uptimeNanoseconds: .max)

    public static func < (lhs: Deadline, rhs: Deadline) -> Bool { lhs.uptimeNanoseconds < rhs.uptimeNanoseconds }

    /// The deadline `duration` after `lhs`, saturating at the ends of the clock.
    public static func + (lhs: Deadline, rhs: Duration) -> Deadline {
        let delta = rhs.nanosecondsClamped
        if delta >= 0 {
            let (sum, overflow) = lhs.uptimeNanoseconds.addingReportingOverflow(UInt64(delta))
            return Deadline(uptimeNanoseconds: overflow ? .max : sum)
        }
        let magnitude = UInt64(-(delta + 1)) + 1
        return Deadline(uptimeNanoseconds: lhs.uptimeNanoseconds > magnitude ? lhs.uptimeNanoseconds - magnitude : 0)
    }

    /// The deadline `duration` before `lhs`, saturating at the ends of the clock.
    public static func - (lhs: Deadline, rhs: Duration) -> Deadline {
        lhs + (Duration.zero - rhs)
    }

    /// The time from `rhs` to `lhs` (negative when `lhs` is earlier).
    public static func - (lhs: Deadline, rhs: Deadline) -> Duration {
        if lhs >= rhs {
            return .nanoseconds(Int64(clamping: lhs.uptimeNanoseconds - rhs.uptimeNanoseconds))
        }
        return .nanoseconds(-Int64(clamping: rhs.uptimeNanoseconds - lhs.uptimeNanoseconds))
    }

    public var description: String { "Deadline(\(uptimeNanoseconds) ns)" }
}

extension Duration {
    /// The duration in whole nanoseconds (the fraction truncated toward zero), clamped to `Int64`.
    public var nanosecondsClamped: Int64 {
        // One 128-bit division of the duration's attoseconds: `components` costs some 220 instructions, and a
        // deadline is moved by a duration at every read of an HTTP connection.
        Int64(clamping: attoseconds / 1_000_000_000)
    }
}
