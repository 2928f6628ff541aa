import Herald
import HeraldEventLoop

/// The daemon's `STATUS=` line for systemd, which `systemctl status herald` shows: messages received, dropped and
/// background fetches since the start, sent every 2 s when they changed. An analytics sink, so it counts what the
/// analytics count; registered only when systemd listens (`NOTIFY_SOCKET` is set).
final class SystemdStatus: AnalyticsSink {
    private struct Counts: Equatable {
        var received = 0
        var dropped = 0
        var fetches = 0
    }

    private let counts = Locked(Counts())
    private let sent = Locked(Counts())
    private let ticker = Locked<RepeatedTask?>(nil)

    var descriptor: PluginDescriptor {
        PluginDescriptor(name: "systemd-status", summary: "counts of messages in the STATUS= line systemd shows")
    }

    func start(_ context: PluginContext) async throws {
        let task = context.loop.scheduleRepeatedTask(initialDelay: .seconds(2), delay: .seconds(2)) { [weak self] _ in self?.tick() }
        ticker.withLock { $0 = task }
    }

    func stop() async {
        ticker.withLock { $0?.cancel() }
    }

    func record(_ events: [AnalyticsEvent]) async throws {
        counts.withLock { counts in
            for event in events {
                switch event.name {
                case .notificationReceive: counts.received += 1
                case .messageDropped: counts.dropped += 1
                case .backgroundFetch: counts.fetches += 1
                default: break
                }
            }
        }
    }

    /// The status line for `counts`.
    private static func line(_ counts: Counts) -> String {
        "STATUS=receiving: \(counts.received) messages received, \(counts.dropped) dropped, \(counts.fetches) background fetches"
    }

    /// On the loop: sends the line when the counts changed; a line systemd had no room for is sent at a later tick.
    private func tick() {
        let now = counts.withLock { $0 }
        guard sent.withLock({ $0 != now }) else { return }
        if Systemd.notifyWithoutWaiting(Self.line(now)) { sent.withLock { $0 = now } }
    }
}
