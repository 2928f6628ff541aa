import Herald
import HeraldDBus
import Testing

@testable import HeraldDesktopPresenter

/// How a message and its presentation options become `Notify`'s arguments.
@Suite("Notify mapping")
struct MappingTests {
    static func message(_ aps: JSONObject, collapseKey: String? = nil, extra: JSONObject = [:]) -> RemoteMessage {
        var userInfo: JSONObject = ["aps": .object(aps), "gcm.message_id": "m1"]
        userInfo.merge(extra)
        return RemoteMessage(userInfo: userInfo, target: .token("t"), collapseKey: collapseKey)
    }

    static func request(
        _ message: RemoteMessage, options: PresentationOptions = [.banner, .list, .sound], actions: [NotificationAction] = [],
        capabilities: Set<String> = ["actions", "body"]
    ) -> NotifyRequest {
        var settings = DesktopPresenter.Options()
        settings.desktopEntry = "org.example.App"
        return NotifyRequest(message: message, options: options, actions: actions, capabilities: capabilities, settings: settings)
    }

    static func hint(_ request: NotifyRequest, _ key: String) -> DBusValue? {
        request.hints.first { $0.key == key }?.value
    }

    @Test("interruption levels map to urgencies", arguments: [("passive", 0), ("active", 1), ("time-sensitive", 2), ("critical", 2)])
    func urgency(level: String, urgency: UInt8) {
        let request = Self.request(Self.message(["alert": "hi", "interruption-level": .string(level)]))
        #expect(Self.hint(request, "urgency") == .byte(urgency))
    }

    @Test("sounds: default is the themed new-message sound, a file name its themed name, a path a file; without .sound, silence")
    func sounds() {
        #expect(Self.hint(Self.request(Self.message(["alert": "hi", "sound": "default"])), "sound-name") == .string("message-new-instant"))
        #expect(Self.hint(Self.request(Self.message(["alert": "hi", "sound": "bell.caf"])), "sound-name") == .string("bell"))
        #expect(
            Self.hint(Self.request(Self.message(["alert": "hi", "sound": "/usr/share/sounds/a.oga"])), "sound-file")
                == .string("/usr/share/sounds/a.oga"))
        let muted = Self.request(Self.message(["alert": "hi", "sound": "default"]), options: [.banner])
        #expect(Self.hint(muted, "suppress-sound") == .boolean(true))
        #expect(Self.hint(muted, "sound-name") == nil)
    }

    @Test("the body is escaped only for servers that read markup")
    func markup() {
        let message = Self.message(["alert": ["title": "T", "body": "<b>&</b>"]])
        #expect(Self.request(message).body == "<b>&</b>")
        #expect(Self.request(message, capabilities: ["body-markup"]).body == "&lt;b&gt;&amp;&lt;/b&gt;")
    }

    @Test("summary: title and subtitle; the application name when both are missing")
    func summary() {
        #expect(Self.request(Self.message(["alert": ["title": "T", "subtitle": "S", "body": "B"]])).summary == "T — S")
        #expect(Self.request(Self.message(["alert": ["subtitle": "S"]])).summary == "S")
        #expect(Self.request(Self.message(["alert": "B"])).summary == "Herald")
    }

    @Test("actions: default first, the category's buttons, a text input as inline reply only where the server has it")
    func actions() {
        let actions = [
            NotificationAction(identifier: "like", title: "Like"),
            NotificationAction(identifier: "reply", title: "Reply", textInputPlaceholder: "Say something"),
        ]
        let message = Self.message(["alert": "hi", "category": "chat"])
        let plain = Self.request(message, actions: actions)
        #expect(plain.actions == ["default", "Open", "like", "Like"])
        #expect(plain.textActionIdentifier == nil)
        let kde = Self.request(message, actions: actions, capabilities: ["actions", "inline-reply"])
        #expect(kde.actions == ["default", "Open", "like", "Like", "inline-reply", "Reply"])
        #expect(kde.textActionIdentifier == "reply")
        #expect(Self.hint(kde, "x-kde-reply-placeholder-text") == .string("Say something"))
        #expect(Self.hint(kde, "category") == .string("chat"))
        #expect(Self.request(message, actions: actions, capabilities: []).actions.isEmpty)
    }

    @Test("replacement: the collapse ID first, else the thread")
    func replacement() {
        #expect(Self.request(Self.message(["alert": "hi", "thread-id": "t"], collapseKey: "c")).replacementKey == "c:c")
        #expect(Self.request(Self.message(["alert": "hi", "thread-id": "t"])).replacementKey == "t:t")
        #expect(Self.request(Self.message(["alert": "hi"])).replacementKey == nil)
    }

    @Test("pop-up, transience, desktop entry and a local image")
    func presentation() {
        let message = Self.message(["alert": "hi"], extra: ["fcm_options": ["image": "file:///tmp/a%20b.png"]])
        #expect(NotifyRequest.popsUp(message, options: [.banner]))
        #expect(NotifyRequest.popsUp(message, options: [.alert]))
        #expect(!NotifyRequest.popsUp(message, options: [.list, .sound, .badge]))
        #expect(!NotifyRequest.popsUp(Self.message(["badge": 3]), options: [.banner]))
        #expect(Self.hint(Self.request(message, options: [.banner]), "transient") == .boolean(true))
        #expect(Self.hint(Self.request(message), "transient") == nil)
        #expect(Self.hint(Self.request(message), "image-path") == .string("/tmp/a b.png"))
        #expect(Self.hint(Self.request(message), "desktop-entry") == .string("org.example.App"))
        let remote = Self.message(["alert": "hi"], extra: ["fcm_options": ["image": "https://example.com/a.png"]])
        #expect(Self.hint(Self.request(remote), "image-path") == nil)
        #expect(PresenterSession.launcherPathComponent("org.example-App") == "org_2eexample_2dApp")
    }
}
