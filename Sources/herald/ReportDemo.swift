import Glibc
import Herald
import HeraldDaemon
import HeraldReport
import HeraldSQLite

/// A fixed, made-up data set for `herald report --demo` (hidden; used by scripts/report-screenshot): 14 days of two
/// campaigns, silent and data messages and drops of every reason, the same every time for a given day.
enum ReportDemo {
    /// Writes the demo events into a new analytics store in `directory`; refuses a directory that already has one,
    /// so demo events never mix with real ones.
    static func write(directory: String, now: Int64) async throws {
        let path = SQLiteAnalyticsStore.path(inDirectory: directory)
        var info = stat()
        guard stat(path, &info) != 0 else {
            throw CommandFailure(message: "herald: --demo writes into a new analytics store, and \(path) exists; choose another --data-dir")
        }
        let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
        try await store.record(events(now: now))
    }

    /// The demo events of the 14 UTC days up to the day of `now`.
    ///
    /// Long because it is a data table: the demo's events, one line each.
    static func events(now: Int64) -> [AnalyticsEvent] {
        let today = AnalyticsReport.day(ofMilliseconds: now)
        var events: [AnalyticsEvent] = []
        for offset in 0..<14 {
            let day = today - 13 + Int64(offset)
            var random = DemoRandom(seed: UInt64(offset) &* 0x9E37_79B9 &+ 17)
            let dayStart = day * AnalyticsReport.millisecondsPerDay
            let dayLength = min(AnalyticsReport.millisecondsPerDay, max(now - dayStart, 60_000))
            var serial = 0
            func message(_ label: String?, type: String, topic: String? = nil) -> AnalyticsEvent {
                serial += 1
                let receivedAt = dayStart + Int64(random.below(Int(dayLength)))
                return AnalyticsEvent(
                    name: .notificationReceive, timestamp: receivedAt, messageID: "demo-\(day)-\(serial)", analyticsLabel: label,
                    topic: topic,
                    priority: type == "DISPLAY_NOTIFICATION" ? .high : .normal, messageType: type, receivedAt: receivedAt)
            }
            func then(_ event: AnalyticsEvent, _ name: AnalyticsEvent.Name, after milliseconds: Int, _ parameters: [String: String] = [:])
                -> AnalyticsEvent
            {
                var next = event
                next.name = name
                next.timestamp = event.timestamp + Int64(milliseconds)
                next.parameters = parameters
                return next
            }
            // Display campaigns: the weekly digest every day, the spring sale from the sixth day on.
            let campaigns: [(label: String, count: Int, presented: Double, opened: Double)] = [
                ("weekly_digest", 38 + random.below(20) + (offset % 7 == 1 ? 30 : 0), 0.9, 0.18 + Double(random.below(8)) / 100),
                (
                    "spring_sale", offset >= 5 ? 70 + random.below(60) + (offset == 6 ? 90 : 0) : 0, 0.93,
                    0.3 + Double(random.below(10)) / 100
                ),
            ]
            for campaign in campaigns {
                for _ in 0..<campaign.count {
                    let received = message(
                        campaign.label, type: "DISPLAY_NOTIFICATION", topic: campaign.label == "spring_sale" ? "offers" : nil)
                    events.append(received)
                    guard random.chance(campaign.presented) else { continue }
                    let shown = then(received, .notificationForeground, after: 40, ["options": "[.list, .banner, .sound]"])
                    events.append(shown)
                    if random.chance(campaign.opened) {
                        events.append(
                            then(
                                shown, .notificationOpen, after: 60_000 + random.below(3_600_000),
                                ["action": "com.apple.UNNotificationDefaultActionIdentifier"]))
                    } else if random.chance(0.2) {
                        events.append(
                            then(shown, .notificationDismiss, after: 30_000, ["action": "com.apple.UNNotificationDismissActionIdentifier"]))
                    }
                }
            }
            // Silent messages waking background fetch, and data-only messages, without a label.
            for _ in 0..<(24 + random.below(18)) {
                let received = message(nil, type: "DATA_MESSAGE", topic: "sync")
                events.append(received)
                let draw = random.below(100)
                let result = draw < 58 ? "newData" : draw < 90 ? "noData" : "failed"
                let duration = result == "failed" ? 5_000 + random.below(25_000) : 80 + random.below(900)
                events.append(
                    then(received, .backgroundFetch, after: duration, ["result": result, "duration_ms": "\(duration)", "workers": "1"]))
            }
            for _ in 0..<(10 + random.below(12)) {
                events.append(message(nil, type: "DATA_MESSAGE"))
            }
            // Drops: retried sends, stale tokens, expired and collapsed messages, bad requests, a burst on day 12.
            var drops: [(String, String?)] = []
            drops += Array(repeating: ("duplicate", "weekly_digest"), count: random.below(5))
            drops += Array(repeating: ("not_targeted", "spring_sale"), count: offset >= 5 ? random.below(4) : 0)
            drops += Array(repeating: ("expired", nil), count: random.below(3))
            drops += Array(repeating: ("collapsed", nil), count: random.below(3))
            drops += Array(repeating: ("invalid", nil), count: random.below(3))
            if offset == 11 { drops += Array(repeating: ("rejected_backpressure", "spring_sale"), count: 9) }
            if offset == 8 { drops.append(("store_failure", "spring_sale")) }
            for (reason, label) in drops {
                let at = dayStart + Int64(random.below(Int(dayLength)))
                serial += 1
                events.append(
                    AnalyticsEvent(
                        name: .messageDropped, timestamp: at, messageID: reason == "invalid" ? nil : "demo-\(day)-\(serial)",
                        analyticsLabel: label,
                        receivedAt: reason == "invalid" ? nil : at, parameters: ["reason": reason, "detail": "demo"]))
            }
        }
        return events
    }
}

/// SplitMix64: the demo's deterministic choices.
private struct DemoRandom {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// 0 ..< bound (0 when bound is 0 or less).
    mutating func below(_ bound: Int) -> Int {
        bound > 0 ? Int(next() % UInt64(bound)) : 0
    }

    mutating func chance(_ probability: Double) -> Bool {
        Double(next() >> 11) / Double(1 << 53) < probability
    }
}
