import Foundation
import Herald
import HeraldDesktopPresenter
import HeraldTesting
import Testing

/// What dunst cannot be driven to do — a named action, KDE's inline reply — from python-dbusmock's notification
/// daemon, which emits exactly the signals it is told to; and the `Notify` arguments it recorded.
@Suite("Desktop presenter with a mock server")
struct MockServerTests {
    @Test("a named action and an inline reply arrive as their actions, the reply with its text; Notify as mapped")
    func namedActionAndReply() async throws {
        let session = try DesktopSession()
        defer { session.stop() }
        try session.startBus()
        try await session.startMockServer(capabilities: ["actions", "body", "body-markup", "inline-reply"])
        let handler = RecordingHandler()
        try await withPresenter(DesktopPresenter(options: .testing(session)), handler: handler, categories: [DunstTests.chat]) {
            herald, receiver, _, token in
            let first = try await receiver.sendAPNs(
                DunstTests.payload(title: "one", body: "1 < 2 & 3", category: "chat"), deviceToken: token, to: herald
            ).get()
            let second = try await receiver.sendAPNs(DunstTests.payload(title: "two", category: "chat"), deviceToken: token, to: herald)
                .get()
            try await herald.waitUntilIdle()

            let calls = try await session.run(
                "/usr/bin/gdbus", "call", "--address", session.address, "--dest", "org.freedesktop.Notifications", "--object-path",
                "/org/freedesktop/Notifications", "--method", "org.freedesktop.DBus.Mock.GetCalls")
            #expect(calls.contains("'1 &lt; 2 &amp; 3'"))
            #expect(calls.contains("['default', 'Open', 'archive', 'Archive', 'inline-reply', 'Reply']"))
            #expect(calls.contains("'x-kde-reply-placeholder-text': <'Message'>"))
            #expect(calls.contains("'urgency': <byte 0x01>"))
            #expect(calls.contains("'sound-name': <'message-new-instant'>"))
            #expect(calls.contains("'desktop-entry': <'herald-test'>"))

            // The mock numbers notifications from 1.
            try await session.emitFromMock("ActionInvoked", signature: "us", "[<uint32 1>, <'archive'>]")
            try await session.emitFromMock("NotificationReplied", signature: "us", "[<uint32 2>, <'on my way'>]")
            #expect(await eventually { handler.received.count == 2 })
            let responses = handler.received
            #expect(responses.first?.message.messageID == first)
            #expect(responses.first?.actionIdentifier == "archive")
            #expect(responses.last?.message.messageID == second)
            #expect(responses.last?.actionIdentifier == "reply")
            #expect(responses.last?.userText == "on my way")
        }
    }
}
