import Foundation
import Herald
import HeraldReport
import HeraldTesting
import Testing

@testable import HeraldSQLite

/// Presents every notification `[.list, .banner]`, tells waiters when one was presented (its response may then be
/// given), answers background fetches with the message's `fetch` data value, and takes data messages.
private final class ReportApp: NotificationHandler, Presenter, BackgroundFetchWorker, MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: state behind a lock.
    private let state = Locked<(presented: Set<String>, waiters: [String: [CheckedContinuation<Void, Never>]])>(([], [:]))

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions { [.list, .banner] }

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        guard let id = message.messageID else { return }
        let waiters = state.withLock { state in
            state.presented.insert(id)
            return state.waiters.removeValue(forKey: id) ?? []
        }
        for waiter in waiters { waiter.resume() }
    }

    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        BackgroundFetchResult(rawValue: message.data["fetch"] ?? "") ?? .noData
    }

    func didReceive(_ message: RemoteMessage) async throws {}

    /// Returns once the notification `id` has been presented.
    func presented(_ id: String) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if state.presented.contains(id) { return true }
                state.waiters[id, default: []].append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }
}

/// Fails a batch after writing it, the first time: the bus retries it, and the store must not count it twice.
private final class FailingOnceAfterWrite: AnalyticsSink, Sendable {
    let store: SQLiteAnalyticsStore
    let calls = Locked(0)

    init(_ store: SQLiteAnalyticsStore) { self.store = store }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "failing-once") }

    func record(_ events: [AnalyticsEvent]) async throws {
        try await store.record(events)
        let call = calls.withLock {
            $0 += 1
            return $0
        }
        if call == 1 { throw AnalyticsWriteError(.writeFailed(path: store.path, detail: "the answer was lost")) }
    }
}

private struct Sent {
    var token = ""
    var ids: [String: String] = [:]
    var firstDay = ""
    var lastDay = ""
}

/// FCM v1 bodies.
private func display(_ token: String, label: String?, title: String = "Hi", silent: Bool = false, fetch: String? = nil) -> String {
    var message = #""token": "\#(token)", "notification": {"title": "\#(title)", "body": "there"}"#
    if let label { message += #", "fcm_options": {"analytics_label": "\#(label)"}"# }
    if silent {
        message += #", "apns": {"payload": {"aps": {"content-available": 1}}}"#
    }
    if let fetch { message += #", "data": {"fetch": "\#(fetch)"}"# }
    return #"{"message": {\#(message)}}"#
}

private func silent(_ token: String, fetch: String) -> String {
    #"{"message": {"token": "\#(token)", "data": {"fetch": "\#(fetch)"}, "apns": {"headers": {"apns-priority": "5", "apns-push-type": "background"}, "payload": {"aps": {"content-available": 1}}}}}"#
}

/// Delivers the known set of messages to a durable Herald with the SQLite analytics store registered (through `sink`
/// when given), responds to some, and shuts down.
private func deliverKnownSet(directory: String, sink: (SQLiteAnalyticsStore) -> any AnalyticsSink = { $0 }) async throws -> Sent {
    var sent = Sent()
    sent.firstDay = AnalyticsReport.date(ofDay: AnalyticsReport.day(ofMilliseconds: WallClock.nowMilliseconds()))
    let analytics = try SQLiteAnalyticsStore(directory: directory)
    let app = ReportApp()
    let receiver = InMemoryReceiver()
    try await withDurableHerald(directory: directory, plugins: [receiver, app, sink(analytics)]) { herald async throws in
        let token = try await herald.token()
        sent.token = token
        func send(_ name: String, _ body: String) async throws {
            let outcome = try await receiver.sendFCM(body, to: herald)
            sent.ids[name] = try outcome.get()
        }
        // spring_sale: three notifications: one opened, one dismissed, one left alone; the first sent again (a
        // duplicate), and one to a token that is not ours.
        try await send("a", display(token, label: "spring_sale", title: "A"))
        try await send("b", display(token, label: "spring_sale", title: "B"))
        try await send("c", display(token, label: "spring_sale", title: "C"))
        let first = try FCMSendRequest.decode(
            Array(display(token, label: "spring_sale", title: "A2").utf8), context: herald.decodingContext
        ).message
        #expect(try await receiver.send(first).get() == first.messageID)
        #expect(try await receiver.send(first).get() == first.messageID)  // the sender retried: a duplicate
        sent.ids["a2"] = first.messageID
        let wrong = try await receiver.sendFCM(display("not-our-token", label: "spring_sale"), to: herald)
        #expect(wrong.failureValue?.status == .unregistered)
        // weekly_digest: a notification opened twice (one open), and a notification that is also silent (fetch: newData),
        // opened.
        try await send("d", display(token, label: "weekly_digest", title: "D"))
        try await send("e", display(token, label: "weekly_digest", title: "E", silent: true, fetch: "newData"))
        // No label: a data message, silent messages with no data and a failure, a topic send nobody subscribed to, an
        // invalid request.
        try await send("data", #"{"message": {"token": "\#(token)", "data": {"k": "v"}}}"#)
        try await send("f1", silent(token, fetch: "noData"))
        try await send("f2", silent(token, fetch: "failed"))
        try await send("topic", #"{"message": {"topic": "nobody", "data": {"k": "v"}}}"#)
        let invalid = try await receiver.sendFCM(#"{"message": {"token": "\#(token)", "data": {"k": 1}}}"#, to: herald)
        #expect(invalid.failureValue?.status == .invalidArgument)

        for name in ["a", "b", "c", "a2", "d", "e"] { await app.presented(sent.ids[name]!) }
        try await herald.respond(to: sent.ids["a"]!)
        try await herald.respond(to: sent.ids["b"]!, action: NotificationResponse.dismissActionIdentifier)
        try await herald.respond(to: sent.ids["d"]!)
        try await herald.respond(to: sent.ids["d"]!)
        try await herald.respond(to: sent.ids["e"]!)
        try await herald.waitUntilIdle()
    }
    sent.lastDay = AnalyticsReport.date(ofDay: AnalyticsReport.day(ofMilliseconds: WallClock.nowMilliseconds()))
    return sent
}

/// The figures the known set must give, per label.
private let expectedSpring = AnalyticsReport.Figures(
    received: 4, impressions: 4, opens: 1, dismissals: 1, drops: ["duplicate": 1, "not_targeted": 1])
private let expectedDigest = AnalyticsReport.Figures(received: 2, impressions: 2, opens: 2, fetchNewData: 1, timedFetches: 1)
private let expectedUnlabelled = AnalyticsReport.Figures(
    received: 3, fetchNoData: 1, fetchFailed: 1, timedFetches: 2, drops: ["invalid": 1, "not_targeted": 1])

/// `figures` without the fetch durations, which depend on the machine.
private func untimed(_ figures: AnalyticsReport.Figures?) -> AnalyticsReport.Figures? {
    guard var figures else { return nil }
    figures.fetchMilliseconds = 0
    return figures
}

@Suite("herald report over a real Herald instance", .serialized)
struct AnalyticsReportTests {
    @Test("a known set of messages through a durable Herald gives exactly the expected figures per label and per day")
    func figuresFromHerald() async throws {
        try await withDataDirectory { directory in
            let sent = try await deliverKnownSet(directory: directory)
            let report = try AnalyticsReport.read(directory: directory, days: 2)
            #expect(report.labels.map(\.label) == ["spring_sale", "weekly_digest", nil])
            #expect(untimed(report.total(label: "spring_sale")) == expectedSpring)
            #expect(untimed(report.total(label: "weekly_digest")) == expectedDigest)
            #expect(untimed(report.total(label: nil)) == expectedUnlabelled)
            #expect(report.total(label: "spring_sale")?.openRate == 0.25)
            #expect(report.total(label: "weekly_digest")?.openRate == 1)
            // Everything happened today (or, across midnight, yesterday and today): each label's days add up to its total.
            for section in report.labels {
                #expect(section.days.allSatisfy { $0.date == sent.firstDay || $0.date == sent.lastDay })
                if sent.firstDay == sent.lastDay {
                    #expect(section.days.map(\.date) == [sent.firstDay])
                    #expect(report.figures(label: section.label, date: sent.firstDay) == section.total)
                }
            }
            #expect(report.total.received == 9 && report.total.impressions == 6 && report.total.opens == 3 && report.total.dropped == 4)
        }
    }

    @Test("a batch the bus retries after it was written (the answer lost) is counted once")
    func retriedBatchCountsOnce() async throws {
        try await withDataDirectory { directory in
            let flaky = Locked<FailingOnceAfterWrite?>(nil)
            _ = try await deliverKnownSet(directory: directory) { store in
                let sink = FailingOnceAfterWrite(store)
                flaky.withLock { $0 = sink }
                return sink
            }
            #expect((flaky.withLock { $0 }?.calls.withLock { $0 } ?? 0) >= 2, "the failed batch was retried")
            let report = try AnalyticsReport.read(directory: directory, days: 2)
            #expect(untimed(report.total(label: "spring_sale")) == expectedSpring)
            #expect(untimed(report.total(label: "weekly_digest")) == expectedDigest)
            #expect(untimed(report.total(label: nil)) == expectedUnlabelled)
        }
    }

    @Test("UnifiedPush pushes are counted apart: never in the messages' figures, in a table of their own")
    func unifiedPushApart() async throws {
        try await withDataDirectory { directory in
            let now = WallClock.nowMilliseconds()
            let store = try SQLiteAnalyticsStore(directory: directory)
            let push = AnalyticsEvent.unifiedPush
            var events = [
                AnalyticsEvent(name: .notificationReceive, messageID: "fcm", messageType: "DATA_MESSAGE", receivedAt: now),
                AnalyticsEvent(name: .notificationReceive, messageID: "p1", messageType: push, receivedAt: now),
                AnalyticsEvent(name: .notificationReceive, messageID: "p2", messageType: push, receivedAt: now),
                AnalyticsEvent(name: .messageDelivered, messageID: "p1", messageType: push, receivedAt: now),
                // Handed over again after a crash: the same push, counted once.
                AnalyticsEvent(name: .messageDelivered, messageID: "p1", messageType: push, receivedAt: now),
                AnalyticsEvent(
                    name: .messageDropped, messageID: "p2", messageType: push, receivedAt: now, parameters: ["reason": "expired"]),
                AnalyticsEvent(name: .messageDropped, messageType: push, parameters: ["reason": "unregistered"]),
                AnalyticsEvent(
                    name: .messageDropped, messageID: "fcm2", messageType: "DATA_MESSAGE", receivedAt: now,
                    parameters: ["reason": "duplicate"]),
            ]
            for index in events.indices { events[index].id = UInt64(index + 1) }
            try await store.record(events)

            let report = try AnalyticsReport.read(directory: directory, days: 1)
            #expect(report.total == AnalyticsReport.Figures(received: 1, drops: ["duplicate": 1]))
            #expect(
                report.unifiedPushTotal == AnalyticsReport.PushFigures(accepted: 2, delivered: 1, drops: ["expired": 1, "unregistered": 1]))
            #expect(report.unifiedPush.map(\.date) == [AnalyticsReport.date(ofDay: AnalyticsReport.day(ofMilliseconds: now))])
            let table = report.table()
            #expect(table.contains("UnifiedPush pushes"), "\(table)")
            #expect(table.contains("expired 1, unregistered 1"), "\(table)")
            // Pushes carry no analytics label: --label narrows the report to labelled messages.
            #expect(try AnalyticsReport.read(directory: directory, days: 1, label: "spring").unifiedPush.isEmpty)
        }
    }

    @Test("herald report prints the table; --html writes a self-contained page with the figures; --label narrows it")
    func reportCommand() async throws {
        try await withDataDirectory { directory in
            let sent = try await deliverKnownSet(directory: directory)
            try #require(sent.firstDay == sent.lastDay, "the run crossed midnight UTC; run again")
            let day = sent.firstDay
            let page = directory + "/report.html"
            let result = try await runHerald(["report", "--data-dir", directory, "--days", "1", "--html", page])
            #expect(result.status == 0, "\(result.error)")
            // Compared with runs of spaces collapsed: the content and order exactly (alignment is tested on its own).
            let collapsed = result.output.split(separator: "\n", omittingEmptySubsequences: false).map {
                $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            }
            let expected = """
                Herald analytics: \(directory)/analytics.sqlite
                \(day) (UTC days, by when each message arrived)
                open rate = opens / impressions (only presented notifications can be opened)

                label: spring_sale
                day received impressions opens open rate fetch new fetch no data fetch failed dropped drops by reason
                \(day) 4 4 1 25.0% 0 0 0 2 duplicate 1, not_targeted 1
                total 4 4 1 25.0% 0 0 0 2 duplicate 1, not_targeted 1

                label: weekly_digest
                day received impressions opens open rate fetch new fetch no data fetch failed dropped drops by reason
                \(day) 2 2 2 100.0% 1 0 0 0 -
                total 2 2 2 100.0% 1 0 0 0 -

                label: (no label)
                day received impressions opens open rate fetch new fetch no data fetch failed dropped drops by reason
                \(day) 3 0 0 - 0 1 1 2 invalid 1, not_targeted 1
                total 3 0 0 - 0 1 1 2 invalid 1, not_targeted 1

                label: all labels
                day received impressions opens open rate fetch new fetch no data fetch failed dropped drops by reason
                \(day) 9 6 3 50.0% 1 1 1 4 invalid 1, duplicate 1, not_targeted 2
                total 9 6 3 50.0% 1 1 1 4 invalid 1, duplicate 1, not_targeted 2

                """
            #expect(collapsed.joined(separator: "\n") == expected)
            #expect(result.error.contains("HTML report written to \(page)"))

            let html = try String(contentsOfFile: page, encoding: .utf8)
            #expect(!html.contains("http://") && !html.contains("https://"))
            #expect(!html.contains("<script") && !html.contains("<link") && !html.contains("src="))
            #expect(html.contains(#"data-figure="received">9<"#))
            #expect(html.contains(#"data-figure="impressions">6<"#))
            #expect(html.contains(#"data-figure="opens">3<"#))
            #expect(html.contains(#"data-figure="open-rate">50.0%<"#))
            #expect(html.contains(#"data-figure="dropped">4<"#))
            #expect(html.contains("spring_sale") && html.contains("weekly_digest"))
            #expect(html.contains("<td class=\"left\">total</td><td>4</td><td>4</td><td>1</td><td>25.0%</td>"))
            #expect(html.contains("<svg "))

            let spring = try await runHerald(["report", "--data-dir", directory, "--label", "spring_sale"])
            #expect(spring.status == 0)
            #expect(spring.output.contains("label: spring_sale"))
            #expect(
                !spring.output.contains("weekly_digest") && !spring.output.contains("(no label)") && !spring.output.contains("all labels"))
        }
    }

    @Test("herald report on a directory without an analytics store: one line naming the file, exit status 1; bad --days is a usage error")
    func reportCommandErrors() async throws {
        try await withDataDirectory { directory in
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let missing = try await runHerald(["report", "--data-dir", directory])
            #expect(missing.status == 1)
            #expect(missing.error.contains(directory + "/analytics.sqlite"))
            #expect(!missing.error.contains("Usage"))
            #expect(!FileManager.default.fileExists(atPath: directory + "/analytics.sqlite"))
            let badDays = try await runHerald(["report", "--data-dir", directory, "--days", "0"])
            #expect(badDays.status == 64)
        }
    }

    @Test("herald report --demo fills a new store with the demo set and refuses an existing one")
    func demoData() async throws {
        try await withDataDirectory { directory in
            let page = directory + "/demo.html"
            let first = try await runHerald(["report", "--data-dir", directory, "--demo", "--days", "14", "--html", page])
            #expect(first.status == 0, "\(first.error)")
            #expect(first.output.contains("label: spring_sale") && first.output.contains("label: weekly_digest"))
            #expect(FileManager.default.fileExists(atPath: page))
            let again = try await runHerald(["report", "--data-dir", directory, "--demo"])
            #expect(again.status == 1)
            #expect(again.error.contains("exists"))
        }
    }
}
