import Glibc

/// The real-time clock (`CLOCK_REALTIME`), for timestamps that leave the process (analytics, expirations).
/// Deadlines inside the process use the monotonic `HeraldEventLoop/Deadline` instead.
public enum WallClock {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    public static func nowMilliseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    public static func nowSeconds() -> Int64 { nowMilliseconds() / 1000 }
}
