import Foundation
import Herald
import HeraldDesktopPresenter
import HeraldTesting
import Testing

/// No bus, no service, a service that restarts, a bus that goes away: one warning each, the log meanwhile, and
/// every notification presented once a service is there.
@Suite("Desktop presenter without a service")
struct ServiceLifecycleTests {
    static func warnings(_ logs: LogCollector, containing text: String) -> Int {
        logs.all.filter { $0.level == .warning && $0.message.contains(text) }.count
    }

    static func describe(_ logs: LogCollector) -> String {
        logs.all.map { "\($0.level) \($0.message) \($0.metadata)" }.joined(separator: "\n")
    }

    static func logged(_ logs: LogCollector, _ id: String) -> Bool {
        !logs.entries(with: ["message_id": id]).filter { $0.message == "notification" }.isEmpty
    }

    @Test("no service on the bus: one warning, the log, and the kept notifications shown once dunst appears")
    func serviceAppearsLater() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        let logs = LogCollector()
        let presenter = DesktopPresenter(options: .testing(session))
        try await withPresenter(presenter, logs: logs) { herald, receiver, _, token in
            #expect(await eventually { await presenter.state() == "no-service" })
            let first = try await receiver.sendAPNs(DunstTests.payload(title: "first"), deviceToken: token, to: herald).get()
            let second = try await receiver.sendAPNs(DunstTests.payload(title: "second"), deviceToken: token, to: herald).get()
            #expect(await eventually { Self.logged(logs, first) && Self.logged(logs, second) })
            #expect(Self.warnings(logs, containing: "no notification service") == 1)

            try await session.startDunst()
            #expect(await eventually { await presenter.state() == "ready" })
            _ = try await receiver.sendAPNs(DunstTests.payload(title: "third"), deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(await eventually { (try? await session.displayedCount()) == 3 })
            try await session.dunstctl("close-all")
            let summaries = try await session.history().compactMap { $0["summary"]?.stringValue }
            #expect(summaries.sorted() == ["first", "second", "third"])
            #expect(Self.warnings(logs, containing: "no notification service") == 1)
        }
    }

    @Test("no bus at start: one warning while retrying, then the bus and dunst appear and presentation resumes")
    func busAppearsLater() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        let logs = LogCollector()
        let presenter = DesktopPresenter(options: .testing(session))
        try await withPresenter(presenter, logs: logs) { herald, receiver, _, token in
            let first = try await receiver.sendAPNs(DunstTests.payload(title: "before the bus"), deviceToken: token, to: herald).get()
            #expect(await eventually { Self.logged(logs, first) })
            // Several attempts have failed by now; they warned once.
            #expect(await eventually { logs.all.filter { $0.message.contains("session bus still unavailable") }.count >= 2 })
            #expect(Self.warnings(logs, containing: "no session bus") == 1)

            try session.startBus()
            try await session.startDunst()
            let shown = await eventually { (try? await session.displayedCount()) == 1 }
            // When it is not shown (once, under Thread Sanitizer): where the presenter stands, and what it logged.
            let state = await presenter.state()
            #expect(shown, "presenter \(state); log: \(Self.describe(logs))")
            try await session.dunstctl("close-all")
            #expect(try await session.history().first?["summary"]?.stringValue == "before the bus")
        }
    }

    @Test("the bus does not answer who owns the notification service in time: asked again on a new connection, not left waiting")
    func ownerQuestionUnanswered() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        let logs = LogCollector()
        var options = DesktopPresenter.Options.testing(session)
        // No call to the bus can be answered within a microsecond: every GetNameOwner times out.
        options.callTimeout = .microseconds(1)
        let presenter = DesktopPresenter(options: options)
        try await withPresenter(presenter, logs: logs) { _, _, _, _ in
            let failure = "asking for the notification service failed; asking again"
            #expect(await eventually { logs.all.filter { $0.message == failure }.count >= 3 }, "\(Self.describe(logs))")
            #expect(await presenter.state() != "ready")
        }
    }

    @Test("dunst restarted mid-run: what arrived meanwhile is shown by the new one, whose responses arrive")
    func serviceRestarts() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let logs = LogCollector()
        let handler = RecordingHandler()
        let presenter = DesktopPresenter(options: .testing(session))
        try await withPresenter(presenter, handler: handler, logs: logs) { herald, receiver, _, token in
            _ = try await receiver.sendAPNs(DunstTests.payload(title: "before"), deviceToken: token, to: herald).get()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            session.stopServer()
            #expect(await eventually { await presenter.state() == "no-service" })
            let during = try await receiver.sendAPNs(DunstTests.payload(title: "during"), deviceToken: token, to: herald).get()
            #expect(await eventually { Self.logged(logs, during) })

            try await session.startDunst()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            try await session.dunstctl("action", "0")
            #expect(await eventually { handler.received.map(\.message.messageID) == [during] })
            try await session.dunstctl("close-all")
            #expect(try await session.history().first?["summary"]?.stringValue == "during")
            #expect(Self.warnings(logs, containing: "no notification service") == 1)
        }
    }

    @Test(
        "the service takes its name between the presenter's two questions (who owns it? can the bus start it?): the presenter sees it there, presents to it"
    )
    func serviceAppearsWhileAsking() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        // What the bus sends the presenter after its GetNameOwner is held back: the answer (no owner yet) and the
        // signal that the service took the name then reach it together, so it asks ListActivatableNames, which
        // answers "not activatable", after the name has changed hands.
        let relay = try BusRelay(busAddress: session.address, directory: session.directory)
        defer { relay.stop() }
        relay.hold(afterTheClientSends: "GetNameOwner")
        var options = DesktopPresenter.Options.testing(session)
        options.busAddress = relay.address
        let logs = LogCollector()
        let presenter = DesktopPresenter(options: options)
        try await withPresenter(presenter, logs: logs) { herald, receiver, _, token in
            #expect(await eventually { relay.holds("NameHasNoOwner") }, "\(Self.describe(logs))")
            try await session.startMockServer(capabilities: ["body"])
            #expect(await eventually { relay.holds("NameOwnerChanged") }, "\(Self.describe(logs))")
            relay.release()
            let ready = await eventually { await presenter.state() == "ready" }
            let state = await presenter.state()
            #expect(ready, "presenter \(state):\n\(Self.describe(logs))")
            _ = try await receiver.sendAPNs(DunstTests.payload(title: "shown"), deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            let calls = try await session.run(
                "/usr/bin/gdbus", "call", "--address", session.address, "--dest", "org.freedesktop.Notifications", "--object-path",
                "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.GetCalls")
            #expect(calls.contains("'shown'"), "\(calls)")
            #expect(Self.warnings(logs, containing: "no notification service") == 0, "\(Self.describe(logs))")
        }
    }

    /// The presenter's questions before it presents, and what in the bus's (or the service's) answer shows that the
    /// question was answered: the answer is held, so the question is still open when the connection ends.
    static let questions: [(question: String, answered: String, service: Bool)] = [
        ("GetNameOwner", "NameHasNoOwner", false),
        ("ListActivatableNames", "org.freedesktop.DBus", false),
        ("GetCapabilities", "body", true),
    ]

    @Test(
        "the bus lost while the presenter asks a question (who owns the service, can the bus start one, what can it do): reported as the loss it is (one warning, its reason, never \"no notification service\"), what waits sent to the log, reconnection with backoff",
        arguments: questions.indices
    )
    func busLostWhileAsking(_ index: Int) async throws {
        let (question, answered, service) = Self.questions[index]
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        if service { try await session.startMockServer(capabilities: ["body"]) }
        let relay = try BusRelay(busAddress: session.address, directory: session.directory)
        defer { relay.stop() }
        relay.hold(afterTheClientSends: question)
        var options = DesktopPresenter.Options.testing(session)
        options.busAddress = relay.address
        let logs = LogCollector()
        let presenter = DesktopPresenter(options: options)
        try await withPresenter(presenter, logs: logs) { herald, receiver, _, token in
            #expect(await eventually { relay.holds(answered) }, "\(question): \(Self.describe(logs))")
            let kept = try await receiver.sendAPNs(DunstTests.payload(title: "kept while asking"), deviceToken: token, to: herald).get()
            relay.stop()
            #expect(await eventually { Self.logged(logs, kept) }, "\(question): \(Self.describe(logs))")
            #expect(
                await eventually { logs.all.contains { $0.message.contains("session bus still unavailable") } },
                "\(question): \(Self.describe(logs))")
            // The warning is the loss's, not the failed reconnection's (the relay is gone).
            let warnings = logs.all.filter { $0.level == .warning && $0.message.contains("no session bus") }
            #expect(warnings.count == 1, "\(question): \(Self.describe(logs))")
            #expect(warnings.first.map { "\($0.metadata)".contains("connection lost") } == true, "\(question): \(Self.describe(logs))")
            #expect(Self.warnings(logs, containing: "no notification service") == 0, "\(question): \(Self.describe(logs))")
        }
    }

    @Test("the bus lost: one warning, reconnection with backoff, and nothing lost")
    func busRestarts() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let logs = LogCollector()
        let presenter = DesktopPresenter(options: .testing(session))
        try await withPresenter(presenter, logs: logs) { herald, receiver, _, token in
            #expect(await eventually { await presenter.state() == "ready" })
            session.stopBus()
            #expect(await eventually { await presenter.state() == "disconnected" })
            let during = try await receiver.sendAPNs(DunstTests.payload(title: "while the bus was away"), deviceToken: token, to: herald)
                .get()
            #expect(await eventually { Self.logged(logs, during) })
            #expect(await eventually { logs.all.filter { $0.message.contains("session bus still unavailable") }.count >= 2 })

            try session.startBus()
            try await session.startDunst()
            let shown = await eventually { (try? await session.displayedCount()) == 1 }
            let (state, count) = (await presenter.state(), try? await session.displayedCount())
            #expect(shown, "presenter \(state), dunst showing \(String(describing: count)):\n\(Self.describe(logs))")
            try await session.dunstctl("close-all")
            #expect(try await session.history().first?["summary"]?.stringValue == "while the bus was away")
            #expect(Self.warnings(logs, containing: "no session bus") == 1)
        }
    }
}
