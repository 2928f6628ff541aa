import Foundation
import Herald
import HeraldDesktopPresenter
import HeraldTesting
import Testing

/// The presenter against a real notification server: dunst on a private bus and a private X display per test.
@Suite("Desktop presenter with dunst")
struct DunstTests {
    static let chat = NotificationCategory(
        identifier: "chat",
        actions: [
            NotificationAction(identifier: "archive", title: "Archive"),
            NotificationAction(identifier: "reply", title: "Reply", textInputPlaceholder: "Message"),
        ],
        options: [.customDismissAction])
    static let news = NotificationCategory(identifier: "news", actions: [NotificationAction(identifier: "read", title: "Read")])

    static func payload(title: String, body: String = "body", category: String? = nil, thread: String? = nil, extra: String = "") -> String
    {
        var aps = [#""alert": {"title": "\#(title)", "body": "\#(body)"}"#, #""sound": "default""#]
        if let category { aps.append(#""category": "\#(category)""#) }
        if let thread { aps.append(#""thread-id": "\#(thread)""#) }
        return #"{"aps": {\#(aps.joined(separator: ", "))\#(extra)}}"#
    }

    @Test("a notification is shown as mapped, its default action arrives as the default response, and the open is recorded")
    func shownAndOpened() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let handler = RecordingHandler()
        try await withPresenter(DesktopPresenter(options: .testing(session)), handler: handler, categories: [Self.chat]) {
            herald, receiver, sink, token in
            let payload =
                #"{"aps": {"alert": {"title": "Ada", "subtitle": "Lovelace", "body": "1 < 2 & 3"}, "category": "chat", "sound": "default", "interruption-level": "time-sensitive"}}"#
            let id = try await receiver.sendAPNs(payload, deviceToken: token, to: herald).get()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            try await session.dunstctl("action", "0")
            #expect(await eventually { handler.received.count == 1 })
            #expect(handler.received.first?.actionIdentifier == NotificationResponse.defaultActionIdentifier)
            #expect(handler.received.first?.message.messageID == id)
            #expect(await eventually { sink.events(named: .notificationOpen).contains { $0.messageID == id } })

            try await session.dunstctl("close")
            let shown = try #require(try await session.history().first)
            #expect(shown["summary"]?.stringValue == "Ada — Lovelace")
            // dunst reads markup (it has the body-markup capability): the text is sent escaped, and shows as written.
            #expect(shown["body"]?.stringValue == "1 &lt; 2 &amp; 3")
            #expect(shown["appname"]?.stringValue == "Herald")
            #expect(shown["category"]?.stringValue == "chat")
            #expect(shown["default_action_name"]?.stringValue == "default")

            // The close after the action is no dismissal: a later dismissal arrives alone.
            let second = try await receiver.sendAPNs(Self.payload(title: "second", category: "chat"), deviceToken: token, to: herald).get()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            try await session.dunstctl("close")
            #expect(await eventually { handler.received.count == 2 })
            #expect(
                handler.received.map(\.actionIdentifier) == [
                    NotificationResponse.defaultActionIdentifier, NotificationResponse.dismissActionIdentifier,
                ])
            #expect(handler.received.last?.message.messageID == second)
        }
    }

    @Test("closing a notification is a dismiss response only for a category with customDismissAction, recorded as a dismissal")
    func dismissal() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let handler = RecordingHandler()
        try await withPresenter(DesktopPresenter(options: .testing(session)), handler: handler, categories: [Self.chat, Self.news]) {
            herald, receiver, sink, token in
            _ = try await receiver.sendAPNs(Self.payload(title: "news", category: "news"), deviceToken: token, to: herald).get()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            try await session.dunstctl("close")
            let chat = try await receiver.sendAPNs(Self.payload(title: "chat", category: "chat"), deviceToken: token, to: herald).get()
            #expect(await eventually { (try? await session.displayedCount()) == 1 })
            try await session.dunstctl("close")
            #expect(await eventually { !handler.received.isEmpty })
            // The news notification closed first, on the same connection: had it answered, it would be first.
            #expect(handler.received.map(\.message.messageID) == [chat])
            #expect(handler.received.first?.isDismissal == true)
            #expect(await eventually { sink.events(named: .notificationDismiss).map(\.messageID) == [chat] })
        }
    }

    @Test("a thread-id or an apns-collapse-id replaces the notification shown before")
    func replacement() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        try await withPresenter(DesktopPresenter(options: .testing(session))) { herald, receiver, _, token in
            _ = try await receiver.sendAPNs(Self.payload(title: "first", thread: "t1"), deviceToken: token, to: herald).get()
            _ = try await receiver.sendAPNs(Self.payload(title: "second", thread: "t1"), deviceToken: token, to: herald).get()
            let collapse = ["apns-collapse-id": "score"]
            _ = try await receiver.sendAPNs(Self.payload(title: "1:0"), headers: collapse, deviceToken: token, to: herald).get()
            _ = try await receiver.sendAPNs(Self.payload(title: "2:0"), headers: collapse, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            try await session.dunstctl("close-all")
            let summaries = try await session.history().compactMap { $0["summary"]?.stringValue }
            #expect(summaries.sorted() == ["2:0", "second"])
        }
    }

    @Test("options without .banner show nothing; .badge alone sets the launcher count")
    func noBanner() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startDunst()
        let handler = RecordingHandler(options: [.list, .badge])
        try await withPresenter(DesktopPresenter(options: .testing(session)), handler: handler) { herald, receiver, _, token in
            let monitor = try await session.monitor("type='signal',interface='com.canonical.Unity.LauncherEntry'")
            _ = try await receiver.sendAPNs(Self.payload(title: "quiet", extra: #", "badge": 7"#), deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            let update = await eventuallyValue { monitor.output.contains("int64 7") ? monitor.output : nil }
            #expect(update?.contains("application://herald-test.desktop") == true)
            #expect(try await session.displayedCount() == 0)
            #expect(try await session.dunstctl("count", "waiting").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        }
    }
}
