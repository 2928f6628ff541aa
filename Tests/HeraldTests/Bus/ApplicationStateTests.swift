import Herald
import HeraldTesting
import Testing

/// Foreground and background, as on an Apple device: active, willPresent decides; in the background the payload
/// does, and handlers see the notification only when it is opened.
@Suite("Application state")
struct ApplicationStateTests {
    @Test("background: presented as the payload asks without willPresent; the handler sees it when opened; silent messages still fetch")
    func background() async throws {
        let app = RecordingApp()
        var ids: [String] = []
        try await withHerald(plugins: [app]) { herald, receiver, sink in
            #expect(herald.applicationState == .active)
            let token = try await herald.token()
            let alert = #"{"aps": {"alert": {"title": "Hi", "body": "there"}, "sound": "default", "badge": 3}}"#
            ids.append(try await receiver.sendAPNs(alert, deviceToken: token, to: herald).get())
            try await herald.waitUntilIdle()
            herald.applicationState = .background
            ids.append(try await receiver.sendAPNs(alert, deviceToken: token, to: herald).get())
            ids.append(try await receiver.sendAPNs(#"{"aps": {"alert": "quiet"}}"#, deviceToken: token, to: herald).get())
            ids.append(try await receiver.sendAPNs(#"{"aps": {"content-available": 1}}"#, deviceToken: token, to: herald).get())
            try await herald.waitUntilIdle()
            #expect(app.willPresent == [ids[0]])
            #expect(app.presented[ids[1]] == [.banner, .list, .sound, .badge])
            #expect(app.presented[ids[2]] == [.banner, .list])
            #expect(app.fetched == [ids[3]])
            #expect(app.responses.isEmpty)
            try await herald.respond(to: ids[1])
            #expect(app.responses == [ids[1]])
            herald.applicationState = .active
            ids.append(try await receiver.sendAPNs(alert, deviceToken: token, to: herald).get())
            try await herald.waitUntilIdle()
            #expect(app.willPresent == [ids[0], ids[4]])
            let (backgroundIDs, foregroundIDs) = ([ids[1], ids[2]].sorted(), [ids[0], ids[4]])
            #expect(
                await eventually {
                    sink.events(named: .notificationBackground).compactMap(\.messageID).sorted() == backgroundIDs
                        && sink.events(named: .notificationForeground).compactMap(\.messageID) == foregroundIDs
                })
            #expect(
                sink.events(named: .notificationBackground).first { $0.messageID == ids[1] }?.parameters["options"]
                    == "[.list, .banner, .sound, .badge]")
        }
    }

    @Test("the state set before start applies from the first message")
    func setBeforeStart() async throws {
        let app = RecordingApp()
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        herald.applicationState = .background
        let receiver = InMemoryReceiver()
        try await withStarted(herald, plugins: [receiver, app]) { herald in
            let token = try await herald.token()
            let id = try await receiver.sendAPNs(#"{"aps": {"alert": "hello"}}"#, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
            #expect(app.willPresent.isEmpty)
            #expect(app.presented[id] == [.banner, .list])
        }
    }
}

private final class RecordingApp: NotificationHandler, BackgroundFetchWorker, Presenter {
    private struct Seen {
        var willPresent: [String] = []
        var presented: [String: PresentationOptions] = [:]
        var fetched: [String] = []
        var responses: [String] = []
    }
    private let seen = Locked(Seen())
    var willPresent: [String] { seen.withLock { $0.willPresent } }
    var presented: [String: PresentationOptions] { seen.withLock { $0.presented } }
    var fetched: [String] { seen.withLock { $0.fetched } }
    var responses: [String] { seen.withLock { $0.responses } }

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        seen.withLock { $0.willPresent.append(message.messageID ?? "") }
        return [.banner]
    }

    func didReceive(_ response: NotificationResponse) async {
        seen.withLock { $0.responses.append(response.message.messageID ?? "") }
    }

    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        seen.withLock { $0.fetched.append(message.messageID ?? "") }
        return .noData
    }

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        seen.withLock { $0.presented[message.messageID ?? ""] = options }
    }
}
