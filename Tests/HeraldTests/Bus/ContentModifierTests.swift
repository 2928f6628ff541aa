import Herald
import HeraldTesting
import Testing

/// Content modifiers (Apple's notification service extension): what they change reaches willPresent and the
/// presenters; at the deadline the best attempt is presented.
@Suite("Content modifiers")
struct ContentModifierTests {
    static func payload(mutable: Bool) -> String {
        #"{"aps": {"alert": {"title": "Encrypted", "body": "…", "launch-image": "l.png"}, "mutable-content": \#(mutable ? 1 : 0)}, "secret": "hello"}"#
    }

    @Test("a mutable-content notification is changed before willPresent; others are not given to the modifier")
    func changesBeforeWillPresent() async throws {
        let modifier = Decrypting(blockAfterFirstChange: false)
        let handler = Presented()
        var ids: [String] = []
        try await withHerald(plugins: [modifier, handler]) { herald, receiver, _ in
            let token = try await herald.token()
            ids.append(try await receiver.sendAPNs(Self.payload(mutable: true), deviceToken: token, to: herald).get())
            ids.append(try await receiver.sendAPNs(Self.payload(mutable: false), deviceToken: token, to: herald).get())
            try await herald.waitUntilIdle()
        }
        let seen = Dictionary(uniqueKeysWithValues: handler.messages.map { ($0.messageID ?? "", $0) })
        #expect(seen.count == 2)
        let modified = try #require(seen[ids[0]])
        #expect(modified.aps.alert?.title == "hello")
        #expect(modified.aps.alert?.subtitle == "decrypted")
        #expect(modified.aps.alert?.launchImage == "l.png")
        #expect(modified.attachments.map(\.path) == ["/tmp/picture.png"])
        #expect(seen[ids[1]]?.aps.alert?.title == "Encrypted")
        #expect(modifier.calls == 1)
    }

    @Test("at the deadline serviceExtensionTimeWillExpire gives the best attempt, which is presented; a diagnostic names the modifier")
    func deadline() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.contentModifierDeadline = .seconds(1)
        let modifier = Decrypting(blockAfterFirstChange: true)
        let handler = Presented()
        try await withHerald(configuration: configuration, plugins: [modifier, handler]) { herald, receiver, sink in
            let token = try await herald.token()
            _ = try await receiver.sendAPNs(Self.payload(mutable: true), deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(
                await eventually {
                    sink.events(named: .diagnostic).contains {
                        $0.parameters["detail"] == "content_modifier_deadline" && $0.parameters["plugin"] == "decrypting"
                    }
                })
        }
        #expect(handler.messages.first?.aps.alert?.title == "hello")
        #expect(handler.messages.first?.aps.alert?.body == "best attempt")
        #expect(await eventually { modifier.wasCancelled })
    }

    @Test("the deadline counts from when the modifiers start: a wait for a thread longer than it uses none of their time")
    func deadlineFromStart() async throws {
        let modifier = Decrypting(blockAfterFirstChange: false)
        let handler = Presented()
        try await withWorkHeldBackAMinute(plugins: [modifier, handler]) { herald, receiver, token in
            _ = try await receiver.sendAPNs(Self.payload(mutable: true), deviceToken: token, to: herald).get()
        } then: { _, sink in
            #expect(!sink.events(named: .diagnostic).contains { $0.parameters["detail"] == "content_modifier_deadline" })
        }
        #expect(handler.messages.first?.aps.alert?.title == "hello")
        #expect(handler.messages.first?.aps.alert?.subtitle == "decrypted")
        #expect(modifier.calls == 1)
    }
}

/// Puts the data key `secret` in the title; blocking, it waits until cancelled after its first change.
private final class Decrypting: ContentModifier {
    let blockAfterFirstChange: Bool
    private let state = Locked((calls: 0, cancelled: false))
    var calls: Int { state.withLock { $0.calls } }
    var wasCancelled: Bool { state.withLock { $0.cancelled } }

    init(blockAfterFirstChange: Bool) { self.blockAfterFirstChange = blockAfterFirstChange }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "decrypting") }

    func modify(_ request: ContentModificationRequest) async {
        state.withLock { $0.calls += 1 }
        request.update { $0.title = request.message.data["secret"] }
        if blockAfterFirstChange {
            // A modifier that never finishes by itself: it waits until the deadline cancels it (an AsyncStream's
            // iteration ends at its task's cancellation; nothing is ever yielded).
            let (never, continuation) = AsyncStream<Never>.makeStream()
            for await _ in never {}
            continuation.finish()
            state.withLock { $0.cancelled = Task.isCancelled }
            return
        }
        request.update {
            $0.subtitle = "decrypted"
            $0.attachments = [NotificationAttachment(identifier: "picture", path: "/tmp/picture.png", type: "image/png")]
        }
    }

    func serviceExtensionTimeWillExpire(_ request: ContentModificationRequest) {
        request.update { $0.body = "best attempt" }
    }
}

private final class Presented: NotificationHandler {
    private let captured = Locked<[RemoteMessage]>([])
    var messages: [RemoteMessage] { captured.withLock { $0 } }
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        captured.withLock { $0.append(message) }
        return []
    }
}
