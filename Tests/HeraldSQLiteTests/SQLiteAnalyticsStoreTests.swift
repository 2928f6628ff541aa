import Foundation
import Herald
import HeraldReport
import HeraldTesting
import Testing

@testable import HeraldSQLite

/// Milliseconds since 1970 of `day` days after 2026-03-01 00:00 UTC, plus `hours`.
private func at(day: Int64, hours: Int64 = 12) -> Int64 {
    let march1st2026: Int64 = 20_513  // days since 1970
    return (march1st2026 + day) * 86_400_000 + hours * 3_600_000
}

/// Event IDs as the bus assigns them: unique per event.
private let eventIDs = Locked<UInt64>(1_000)
private func nextEventID() -> UInt64 {
    eventIDs.withLock {
        $0 += 1
        return $0
    }
}

private func received(_ id: String, label: String?, day: Int64, hours: Int64 = 10, type: String = "DISPLAY_NOTIFICATION") -> AnalyticsEvent
{
    var event = AnalyticsEvent(
        name: .notificationReceive, timestamp: at(day: day, hours: hours), messageID: id, analyticsLabel: label, priority: .high,
        messageType: type,
        receivedAt: at(day: day, hours: hours))
    event.id = nextEventID()
    return event
}

/// An event about the message of `receipt`, `minutes` after it arrived.
private func follow(_ receipt: AnalyticsEvent, _ name: AnalyticsEvent.Name, minutes: Int64 = 1, _ parameters: [String: String] = [:])
    -> AnalyticsEvent
{
    var event = receipt
    event.id = nextEventID()
    event.name = name
    event.timestamp = receipt.timestamp + minutes * 60_000
    event.parameters = parameters
    return event
}

private func dropped(_ reason: String, label: String?, day: Int64, id: String? = nil) -> AnalyticsEvent {
    var event = AnalyticsEvent(
        name: .messageDropped, timestamp: at(day: day), messageID: id, analyticsLabel: label, receivedAt: id == nil ? nil : at(day: day),
        parameters: ["reason": reason, "detail": "test"])
    event.id = nextEventID()
    return event
}

private func withAnalyticsDirectory(_ body: (String) async throws -> Void) async throws {
    try await withTemporaryDirectory(prefix: "herald-analytics", body)
}

/// A clock the test moves.
private final class TestClock: Sendable {
    let now: Locked<Int64>
    init(_ start: Int64) { now = Locked(start) }
    func read() -> Int64 { now.withLock { $0 } }
    func set(_ value: Int64) { now.withLock { $0 = value } }
}

@Suite("SQLiteAnalyticsStore on real SQLite files")
struct SQLiteAnalyticsStoreTests {
    // MARK: - The file

    @Test("opens its own file beside herald.sqlite: WAL, synchronous NORMAL, its application ID, schema analytics-v2-by-cohort")
    func ownFile() async throws {
        try await withAnalyticsDirectory { directory in
            let inbox = try SQLiteStore(directory: directory)
            let store = try SQLiteAnalyticsStore(directory: directory)
            #expect(store.path == directory + "/analytics.sqlite")
            #expect(inbox.path != store.path)
            #expect(try store.fetchString("PRAGMA journal_mode") == "wal")
            #expect(try store.fetchString("PRAGMA synchronous") == "1")  // NORMAL
            #expect(try store.fetchString("PRAGMA application_id") == String(0x4852_4C41))
            #expect(try store.fetchString("SELECT group_concat(identifier) FROM grdb_migrations") == "analytics-v1,analytics-v2-by-cohort")
            // One B-tree in the order of cohort_at, no index beside it.
            #expect(
                try store.fetchString(
                    "SELECT sql LIKE '%PRIMARY KEY (cohort_at, event_key)%WITHOUT ROWID' FROM sqlite_master WHERE name = 'event'") == "1")
            #expect(try store.fetchString("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'event'") == "0")
            // The inbox store's file has no analytics table, and the other way round.
            #expect(try inbox.pragma("application_id") == String(0x4852_4C44))
            #expect(try store.fetchString("SELECT count(*) FROM sqlite_master WHERE name = 'inbox'") == "0")
        }
    }

    @Test("every field of an event is stored; reason, result and duration_ms get columns of their own")
    func storesEveryField() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            let receipt = AnalyticsEvent(
                name: .notificationReceive, timestamp: 1_000, messageID: "m1", analyticsLabel: "spring", topic: "offers", collapseKey: "ck",
                priority: .normal, messageType: "DATA_MESSAGE", ttl: 60, receivedAt: 900, parameters: ["a": "1", "b": "é\"\n"])
            let fetch = follow(receipt, .backgroundFetch, ["result": "noData", "duration_ms": "42", "workers": "1"])
            let drop = dropped("duplicate", label: "spring", day: 0, id: "m1")
            try await store.record([receipt, fetch, drop])
            let row = try store.fetchString(
                """
                SELECT name || '|' || timestamp || '|' || cohort_at || '|' || message_id || '|' || analytics_label || '|' || topic || '|' ||
                       collapse_key || '|' || priority || '|' || message_type || '|' || ttl || '|' || received_at || '|' || parameters
                FROM event WHERE name = 'notification_receive'
                """)
            #expect(row == #"notification_receive|1000|900|m1|spring|offers|ck|5|DATA_MESSAGE|60|900|{"a":"1","b":"é\"\n"}"#)
            #expect(try store.fetchString("SELECT result || '|' || duration_ms FROM event WHERE name = 'background_fetch'") == "noData|42")
            #expect(try store.fetchString("SELECT reason FROM event WHERE name = 'message_dropped'") == "duplicate")
            #expect(try store.fetchString("SELECT count(*) FROM event WHERE reason IS NOT NULL OR result IS NOT NULL") == "2")
            #expect(try store.fetchString("SELECT count(DISTINCT length(event_key)) || ':' || min(length(event_key)) FROM event") == "1:8")
        }
    }

    // MARK: - Idempotence

    @Test(
        "a batch recorded again is stored once; two drops alike but for their IDs are both kept; a retried batch with new events adds only those"
    )
    func retriedBatchIsStoredOnce() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            let receipt = received("m1", label: "spring", day: 0)
            let duplicateDrop = dropped("duplicate", label: "spring", day: 0, id: "m1")
            var sameButForID = duplicateDrop
            sameButForID.id = nextEventID()
            let batch = [receipt, follow(receipt, .notificationForeground), duplicateDrop, sameButForID]
            try await store.record(batch)
            try await store.record(batch)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "4")
            let report = try store.report(days: 1, now: at(day: 0))
            #expect(report.total(label: "spring") == .init(received: 1, impressions: 1, drops: ["duplicate": 2]))

            // The bus retried the batch with more events behind it: only the new ones are added.
            let open = follow(receipt, .notificationOpen, minutes: 5, ["action": NotificationResponse.defaultActionIdentifier])
            try await store.record(batch + [open, dropped("duplicate", label: "spring", day: 0, id: "m1")])
            #expect(try store.fetchString("SELECT count(*) FROM event") == "6")
            let after = try store.report(days: 1, now: at(day: 0))
            #expect(after.total(label: "spring") == .init(received: 1, impressions: 1, opens: 1, drops: ["duplicate": 3]))
        }
    }

    @Test(
        "batches of every size around the events one INSERT takes are stored whole, each event's fields in its own row; an event twice in one INSERT is stored once",
        arguments: [1, 2, 15, 16, 17, 31, 32, 33, 50])
    func batchesAroundTheInsertGroup(size: Int) async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            var batch: [AnalyticsEvent] = []
            var expected: [String] = []
            for index in 0..<size {
                // Out of key order now and then (an older message's event after newer ones).
                let day: Int64 = index % 7 == 3 ? -1 : 0
                let id = "n\(size)-\(String(index + 100))"
                switch index % 3 {
                case 0:
                    let event = received(id, label: "l\(index)", day: day, hours: Int64(index % 24))
                    batch.append(event)
                    expected.append("\(id)|notification_receive|||\(event.timestamp)|{}")
                case 1:
                    var event = dropped("reason \(index)", label: nil, day: day, id: id)
                    event.parameters["extra"] = "x\(index)"
                    batch.append(event)
                    expected.append(
                        #"\#(id)|message_dropped|reason \#(index)||\#(event.timestamp)|{"detail":"test","extra":"x\#(index)","reason":"reason \#(index)"}"#
                    )
                default:
                    let event = follow(
                        received(id, label: nil, day: day), .backgroundFetch, ["result": "newData", "duration_ms": "\(index)"])
                    batch.append(event)
                    expected.append(#"\#(id)|background_fetch||newData|\#(event.timestamp)|{"duration_ms":"\#(index)","result":"newData"}"#)
                }
            }
            if size > 2 { batch.insert(batch[1], at: min(size, 9)) }
            try await store.record(batch)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "\(size)")
            let rows = try store.fetchString(
                """
                SELECT group_concat(line, ';') FROM (
                    SELECT message_id || '|' || name || '|' || ifnull(reason, '') || '|' || ifnull(result, '') || '|' || timestamp || '|' ||
                           parameters AS line
                    FROM event ORDER BY message_id)
                """)
            #expect(rows == expected.sorted().joined(separator: ";"))
            // Given again, as the bus does after a failed write: nothing more.
            try await store.record(batch)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "\(size)")
        }
    }

    @Test("event keys are the event IDs, eight bytes most significant first; each event without an ID gets a key of its own")
    func eventKeys() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            var event = received("m1", label: "l", day: 0)
            event.id = 0x0102_0304_0506_0708
            var unassigned = event
            unassigned.id = 0
            try await store.record([event, unassigned, unassigned])
            #expect(try store.fetchString("SELECT count(*) FROM event") == "3")
            #expect(try store.fetchString("SELECT count(*) FROM event WHERE hex(event_key) = '0102030405060708'") == "1")
            #expect(try store.fetchString("SELECT count(DISTINCT event_key) || ':' || min(length(event_key)) FROM event") == "3:8")
        }
    }

    @Test("a write that fails throws AnalyticsWriteError naming the file, stores nothing of the batch; the retry stores it once")
    func failedWriteThrows() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            let receipt = received("m1", label: "spring", day: 0)
            let batch = [receipt, follow(receipt, .notificationForeground)]
            try store.execute(sql: "PRAGMA query_only = ON")
            var failure: AnalyticsWriteError?
            do {
                try await store.record(batch)
            } catch let error as AnalyticsWriteError {
                failure = error
            }
            guard case .writeFailed(let path, _)? = failure?.storeError else {
                Issue.record("expected writeFailed, got \(String(describing: failure))")
                return
            }
            #expect(path == store.path)
            #expect(failure?.description.contains(store.path) == true)
            #expect(failure?.description.contains("retried") == true)
            try store.execute(sql: "PRAGMA query_only = OFF")
            #expect(try store.fetchString("SELECT count(*) FROM event") == "0")
            try await store.record(batch)
            try await store.record(batch)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "2")
        }
    }

    // MARK: - Opening

    @Test(
        "a 0.1.0 file (schema analytics-v1) is brought to analytics-v2-by-cohort at its first open: every event kept, the report unchanged, a batch given again still stored once"
    )
    func migratesVersion1() async throws {
        try await withAnalyticsDirectory { directory in
            let (day0, later) = (at(day: 0, hours: 10), at(day: 0, hours: 11))
            try SQLiteAnalyticsStore.createOlderSchema(
                directory: directory, upTo: "analytics-v1",
                then: """
                    INSERT INTO event (event_key, name, timestamp, cohort_at, message_id, analytics_label, topic, priority, message_type,
                                       received_at, reason, parameters)
                    VALUES (X'0000000000000001', 'notification_receive', \(day0), \(day0), 'm1', 'spring', 'offers', 10,
                            'DISPLAY_NOTIFICATION', \(day0), NULL, '{}'),
                           (X'0000000000000002', 'notification_open', \(later), \(day0), 'm1', 'spring', 'offers', 10,
                            'DISPLAY_NOTIFICATION', \(day0), NULL, '{"action":"com.apple.UNNotificationDefaultActionIdentifier"}'),
                           (X'0000000000000003', 'message_dropped', \(later), \(later), NULL, 'spring', NULL, NULL, NULL, NULL,
                            'malformed', '{"reason":"malformed"}');
                    """)
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil), clock: { later })
            #expect(try store.fetchString("SELECT group_concat(identifier) FROM grdb_migrations") == "analytics-v1,analytics-v2-by-cohort")
            #expect(try store.fetchString("SELECT sql LIKE '%WITHOUT ROWID' FROM sqlite_master WHERE name = 'event'") == "1")
            #expect(
                try store.fetchString(
                    "SELECT group_concat(hex(event_key) || ':' || name || ':' || ifnull(topic, '-'), ',') FROM event")
                    == "0000000000000001:notification_receive:offers,0000000000000002:notification_open:offers,0000000000000003:message_dropped:-"
            )
            let report = try store.report(days: 1, now: later)
            #expect(report.total(label: "spring") == .init(received: 1, impressions: 0, opens: 1, drops: ["malformed": 1]))

            // The open, given again with its ID: stored once. A new event beside it is added.
            var open = AnalyticsEvent(
                name: .notificationOpen, timestamp: later, messageID: "m1", analyticsLabel: "spring", topic: "offers", priority: .high,
                messageType: "DISPLAY_NOTIFICATION", receivedAt: day0)
            open.id = 2
            try await store.record([open, received("m2", label: "spring", day: 0)])
            #expect(try store.fetchString("SELECT count(*) FROM event") == "4")
            #expect(try store.report(days: 1, now: later).total(label: "spring")?.received == 2)
        }
    }

    @Test("a file with a newer analytics schema is refused, by the store and by the report")
    func refusesNewerSchema() async throws {
        try await withAnalyticsDirectory { directory in
            do {
                let store = try SQLiteAnalyticsStore(directory: directory)
                try store.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('analytics-v99')")
            }
            var openError: StoreError?
            do throws(StoreError) { _ = try SQLiteAnalyticsStore(directory: directory) } catch { openError = error }
            #expect(openError == .newerSchema(path: directory + "/analytics.sqlite", found: "analytics-v99"))
            var readError: StoreError?
            do throws(StoreError) { _ = try AnalyticsReport.read(directory: directory) } catch { readError = error }
            #expect(readError == .newerSchema(path: directory + "/analytics.sqlite", found: "analytics-v99"))
        }
    }

    @Test("the inbox store's file, a database with another application ID and a file that is not a database are refused")
    func refusesOtherFiles() async throws {
        try await withAnalyticsDirectory { directory in
            _ = try SQLiteStore(directory: directory)
            try FileManager.default.copyItem(atPath: directory + "/herald.sqlite", toPath: directory + "/analytics.sqlite")
            var error: StoreError?
            do throws(StoreError) { _ = try SQLiteAnalyticsStore(directory: directory) } catch let caught { error = caught }
            guard case .corrupt(let path, let detail)? = error else {
                Issue.record("expected corrupt, got \(String(describing: error))")
                return
            }
            #expect(path == directory + "/analytics.sqlite")
            #expect(detail.contains("herald.sqlite"))
            var readError: StoreError?
            do throws(StoreError) { _ = try AnalyticsReport.read(directory: directory) } catch let caught { readError = caught }
            if case .corrupt? = readError {} else { Issue.record("expected corrupt, got \(String(describing: readError))") }

            try FileManager.default.removeItem(atPath: directory + "/analytics.sqlite")
            do {
                let other = try SQLiteAnalyticsStore(directory: directory)
                try other.execute(sql: "PRAGMA application_id = 7")
            }
            var foreign: StoreError?
            do throws(StoreError) { _ = try SQLiteAnalyticsStore(directory: directory) } catch let caught { foreign = caught }
            if case .corrupt(_, let detail)? = foreign {
                #expect(detail.contains("application_id 7"))
            } else {
                Issue.record("expected corrupt, got \(String(describing: foreign))")
            }

            try FileManager.default.removeItem(atPath: directory + "/analytics.sqlite")
            #expect(FileManager.default.createFile(atPath: directory + "/analytics.sqlite", contents: Data(repeating: 0x41, count: 4096)))
            var garbage: StoreError?
            do throws(StoreError) { _ = try SQLiteAnalyticsStore(directory: directory) } catch let caught { garbage = caught }
            if case .corrupt? = garbage {} else { Issue.record("expected corrupt, got \(String(describing: garbage))") }
        }
    }

    @Test("the report of a directory without an analytics store says so, naming the file, and creates nothing")
    func reportWithoutStore() async throws {
        try await withAnalyticsDirectory { directory in
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            var error: StoreError?
            do throws(StoreError) { _ = try AnalyticsReport.read(directory: directory) } catch let caught { error = caught }
            guard case .cannotOpen(let path, let detail)? = error else {
                Issue.record("expected cannotOpen, got \(String(describing: error))")
                return
            }
            #expect(path == directory + "/analytics.sqlite")
            #expect(detail.contains("no analytics store"))
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    // MARK: - Retention

    @Test("events of messages older than the retention are deleted at open and then once per prune interval, in a batch's transaction")
    func retention() async throws {
        try await withAnalyticsDirectory { directory in
            let clock = TestClock(at(day: 0))
            let options = SQLiteAnalyticsStore.Options(retentionDays: 10, pruneInterval: .seconds(3600))
            do {
                let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil), clock: clock.read)
                try await store.record([
                    received("old", label: nil, day: -20), received("edge", label: nil, day: -9), received("new", label: nil, day: 0),
                ])
            }
            // Opening prunes: the message received 20 days ago goes, the one of 9 days ago stays.
            let store = try SQLiteAnalyticsStore(directory: directory, options: options, clock: clock.read)
            #expect(
                try store.fetchString("SELECT group_concat(message_id, ',') FROM (SELECT message_id FROM event ORDER BY message_id)")
                    == "edge,new")
            // A day later (11:00) the message received at 10:00 nine days ago is past 10 days: the next batch prunes it.
            clock.set(at(day: 1, hours: 11))
            try await store.record([received("a", label: nil, day: 1)])
            #expect(try store.fetchString("SELECT count(*) FROM event WHERE message_id = 'edge'") == "0")
            // Within the interval (an hour) nothing is pruned, even past retention.
            try await store.record([received("stale", label: nil, day: -30)])
            clock.set(at(day: 1, hours: 11) + 30 * 60_000)
            try await store.record([received("b", label: nil, day: 1)])
            #expect(try store.fetchString("SELECT count(*) FROM event WHERE message_id = 'stale'") == "1")
            clock.set(at(day: 1, hours: 12) + 1)
            try await store.record([received("c", label: nil, day: 1)])
            #expect(try store.fetchString("SELECT count(*) FROM event WHERE message_id = 'stale'") == "0")
            #expect(try store.prune(now: at(day: 100)) == 4)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "0")
        }
    }

    @Test("without retention nothing is deleted")
    func noRetention() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil), clock: { at(day: 1000) })
            try await store.record([received("ancient", label: nil, day: -5000)])
            #expect(try store.prune(now: at(day: 10_000)) == 0)
            #expect(try store.fetchString("SELECT count(*) FROM event") == "1")
        }
    }

    // MARK: - The report

    /// Two labels and unlabelled messages over three days, with replays, late opens, fetches and drops.
    private static func knownEvents() -> [AnalyticsEvent] {
        var events: [AnalyticsEvent] = []
        // Day 0, spring: three notifications; two presented, one opened (twice: one open), one dismissed.
        let s1 = received("s1", label: "spring", day: 0)
        let s2 = received("s2", label: "spring", day: 0)
        let s3 = received("s3", label: "spring", day: 0)
        events += [s1, s2, s3, follow(s1, .notificationForeground), follow(s2, .notificationForeground)]
        events += [follow(s1, .notificationOpen, minutes: 2), follow(s1, .notificationOpen, minutes: 3), follow(s2, .notificationDismiss)]
        events += [dropped("duplicate", label: "spring", day: 0, id: "s1"), dropped("duplicate", label: "spring", day: 0, id: "s1")]
        // s3 replayed after a crash: received again later, the same message.
        events.append(follow(s3, .notificationReceive, minutes: 30))
        // Day 1, spring: one notification, opened on day 2 (counts on day 1, when it arrived).
        let s4 = received("s4", label: "spring", day: 1, hours: 23)
        events += [s4, follow(s4, .notificationForeground), follow(s4, .notificationOpen, minutes: 120)]
        events.append(dropped("not_targeted", label: "spring", day: 1, id: "x1"))
        // Day 1, digest: two notifications, both presented, none opened.
        let d1 = received("d1", label: "digest", day: 1)
        let d2 = received("d2", label: "digest", day: 1)
        events += [d1, d2, follow(d1, .notificationForeground), follow(d2, .notificationForeground)]
        // Unlabelled: silent messages with each result, a data message, invalid requests, an expired and a collapsed one.
        let f1 = received("f1", label: nil, day: 0, type: "DATA_MESSAGE")
        let f2 = received("f2", label: nil, day: 0, type: "DATA_MESSAGE")
        let f3 = received("f3", label: nil, day: 2, type: "DATA_MESSAGE")
        let data = received("data", label: nil, day: 2, type: "DATA_MESSAGE")
        events += [f1, f2, f3, data]
        events += [
            follow(f1, .backgroundFetch, ["result": "newData", "duration_ms": "100"]),
            follow(f2, .backgroundFetch, ["result": "noData", "duration_ms": "300"]),
        ]
        events += [follow(f3, .backgroundFetch, ["result": "failed", "duration_ms": "30000"])]
        events += [
            dropped("invalid", label: nil, day: 2), dropped("invalid", label: nil, day: 2),
            dropped("expired", label: nil, day: 2, id: "e1"),
        ]
        events += [dropped("collapsed", label: nil, day: 0, id: "c1")]
        // Not in the report: too old, or not a report event.
        events.append(received("old", label: "spring", day: -7))
        events.append(AnalyticsEvent(name: .tokenRefresh, timestamp: at(day: 1)))
        events.append(AnalyticsEvent(name: .diagnostic, timestamp: at(day: 1), parameters: ["detail": "unknown_category"]))
        return events
    }

    @Test("the figures per label and per day match a known set of events exactly")
    func reportFigures() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil), clock: { at(day: 2) })
            // In two batches, the second given twice, in an order unlike the events'.
            let events = Self.knownEvents()
            try await store.record(Array(events.suffix(from: 20)))
            try await store.record(Array(events.prefix(20)))
            try await store.record(Array(events.prefix(20)))
            let report = try AnalyticsReport.read(directory: directory, days: 3, now: at(day: 2, hours: 20))
            #expect(report.firstDay == 20_513 && report.lastDay == 20_515)
            #expect(report.labels.map(\.label) == ["spring", "digest", nil])
            #expect(
                report.figures(label: "spring", date: "2026-03-01")
                    == .init(received: 3, impressions: 2, opens: 1, dismissals: 1, drops: ["duplicate": 2]))
            #expect(
                report.figures(label: "spring", date: "2026-03-02")
                    == .init(received: 1, impressions: 1, opens: 1, drops: ["not_targeted": 1]))
            #expect(report.figures(label: "spring", date: "2026-03-03") == nil)
            #expect(
                report.total(label: "spring")
                    == .init(received: 4, impressions: 3, opens: 2, dismissals: 1, drops: ["duplicate": 2, "not_targeted": 1]))
            #expect(report.total(label: "spring")?.openRate == 2.0 / 3.0)
            #expect(report.figures(label: "digest", date: "2026-03-02") == .init(received: 2, impressions: 2))
            #expect(report.total(label: "digest")?.openRate == 0)
            #expect(
                report.figures(label: nil, date: "2026-03-01")
                    == .init(
                        received: 2, fetchNewData: 1, fetchNoData: 1, fetchMilliseconds: 400, timedFetches: 2, drops: ["collapsed": 1]))
            #expect(
                report.figures(label: nil, date: "2026-03-03")
                    == .init(
                        received: 2, fetchFailed: 1, fetchMilliseconds: 30_000, timedFetches: 1, drops: ["invalid": 2, "expired": 1]))
            #expect(report.total(label: nil)?.openRate == nil)
            #expect(report.daily.map(\.date) == ["2026-03-01", "2026-03-02", "2026-03-03"])
            #expect(report.daily.map(\.figures.received) == [5, 3, 2])
            #expect(report.total.received == 10 && report.total.impressions == 5 && report.total.opens == 2 && report.total.dropped == 7)
            #expect(report.total.averageFetchMilliseconds == 30_400.0 / 3)

            // --label and --days.
            let spring = try AnalyticsReport.read(directory: directory, days: 3, label: "spring", now: at(day: 2, hours: 20))
            #expect(spring.labels.map(\.label) == ["spring"])
            #expect(spring.total == report.total(label: "spring"))
            let lastDay = try AnalyticsReport.read(directory: directory, days: 1, now: at(day: 2, hours: 20))
            #expect(lastDay.daily.map(\.date) == ["2026-03-03"])
            #expect(lastDay.labels.map(\.label) == [nil])
            let wide = try AnalyticsReport.read(directory: directory, days: 30, now: at(day: 2, hours: 20))
            #expect(wide.total(label: "spring")?.received == 5)  // the old one too
            #expect(wide.daily.count == 30)
        }
    }

    @Test("the terminal table: one block per label, a row per day, totals, aligned columns")
    func table() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            let events = Self.knownEvents()
            try await store.record(events)
            let report = try store.report(days: 3, now: at(day: 2))
            let expected = """
                Herald analytics: \(directory)/analytics.sqlite
                2026-03-01 to 2026-03-03 (UTC days, by when each message arrived)
                open rate = opens / impressions (only presented notifications can be opened)

                label: spring
                  day         received  impressions  opens  open rate  fetch new  fetch no data  fetch failed  dropped  drops by reason
                  2026-03-01         3            2      1      50.0%          0              0             0        2  duplicate 2
                  2026-03-02         1            1      1     100.0%          0              0             0        1  not_targeted 1
                  total              4            3      2      66.7%          0              0             0        3  duplicate 2, not_targeted 1

                label: digest
                  day         received  impressions  opens  open rate  fetch new  fetch no data  fetch failed  dropped  drops by reason
                  2026-03-02         2            2      0       0.0%          0              0             0        0  -
                  total              2            2      0       0.0%          0              0             0        0  -

                label: (no label)
                  day         received  impressions  opens  open rate  fetch new  fetch no data  fetch failed  dropped  drops by reason
                  2026-03-01         2            0      0          -          1              1             0        1  collapsed 1
                  2026-03-03         2            0      0          -          0              0             1        3  invalid 2, expired 1
                  total              4            0      0          -          1              1             1        4  invalid 2, expired 1, collapsed 1

                label: all labels
                  day         received  impressions  opens  open rate  fetch new  fetch no data  fetch failed  dropped  drops by reason
                  2026-03-01         5            2      1      50.0%          1              1             0        3  duplicate 2, collapsed 1
                  2026-03-02         3            3      1      33.3%          0              0             0        1  not_targeted 1
                  2026-03-03         2            0      0          -          0              0             1        3  invalid 2, expired 1
                  total             10            5      2      40.0%          1              1             1        7  invalid 2, duplicate 2, expired 1, not_targeted 1, collapsed 1

                """
            #expect(report.table() == expected)
            let empty = try store.report(days: 3, label: "nothing", now: at(day: 2))
            #expect(empty.table().hasSuffix("\nNo events for label nothing in this range.\n"))
        }
    }

    @Test("labels are printed safely: control characters escaped in the table, markup escaped in the page")
    func hostileLabels() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            try await store.record([received("m1", label: "\u{1B}[2J<script>alert(1)</script>", day: 0)])
            let report = try store.report(days: 1, now: at(day: 0))
            #expect(!report.table().contains("\u{1B}"))
            #expect(report.table().contains("label: \\u{1B}[2J<script>alert(1)</script>"))
            let html = report.html(generatedAt: at(day: 0))
            #expect(!html.contains("<script"))
            #expect(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        }
    }

    @Test("the HTML page is self-contained and carries the figures, the funnel and the per-day chart")
    func htmlPage() async throws {
        try await withAnalyticsDirectory { directory in
            let store = try SQLiteAnalyticsStore(directory: directory, options: .init(retentionDays: nil))
            try await store.record(Self.knownEvents())
            let html = try store.report(days: 3, now: at(day: 2)).html(generatedAt: at(day: 2, hours: 9))
            #expect(html.hasPrefix("<!DOCTYPE html>"))
            for forbidden in ["http://", "https://", "<script", "<link", "<img", "src=", "url(", "@import", "//fonts", "<iframe"] {
                #expect(!html.contains(forbidden), "the page must load nothing: found \(forbidden)")
            }
            #expect(html.contains("<style>"))
            #expect(html.contains(#"data-figure="received">10<"#))
            #expect(html.contains(#"data-figure="impressions">5<"#))
            #expect(html.contains(#"data-figure="opens">2<"#))
            #expect(html.contains(#"data-figure="open-rate">40.0%<"#))
            #expect(html.contains(#"data-figure="dropped">7<"#))
            #expect(html.contains(#"aria-label="Delivery funnel: received, impressions, opens""#))
            #expect(html.contains(#"aria-label="Received, impressions, opens and drops per day""#))
            #expect(html.contains(#"aria-label="Background fetch results: new data, no data, failed""#))
            #expect(html.contains("<td class=\"left\">total</td><td>4</td><td>3</td><td>2</td><td>66.7%</td>"))
            #expect(html.contains("generated 2026-03-03 09:00 UTC"))
            #expect(html.components(separatedBy: "<svg ").count - 1 == 5)
        }
    }
}
