import Glibc
public import Herald

/// Writes one JSON object per line for every event it handles — the `--echo` of `herald serve`, and a
/// handler to start from. Each line has `event` and, for messages, the message's `userInfo`:
///
///     {"event":"willPresent","messageID":"…","options":["list","banner","sound"],"userInfo":{…}}
///     {"event":"didReceiveResponse","messageID":"…","action":"…","userText":"…","userInfo":{…}}
///     {"event":"message","messageID":"…","userInfo":{…}}
///     {"event":"backgroundFetch","messageID":"…","result":"noData","userInfo":{…}}
///     {"event":"token","token":"…","installationID":"…"}
///     {"event":"dropped","messageID":"…","reason":"duplicate"}
///
/// It answers display notifications with ``Options/presentation`` (`[.list, .banner, .sound]`, as the
/// reference AppDelegate) and silent messages with ``Options/fetchResult`` (`.noData`: it fetched nothing).
/// Drops reach it as `message_dropped` analytics events, so their lines come in the analytics batches, a
/// little after the event. Lines are written whole with one `write(2)` each, never interleaved.
public final class EchoHandler: NotificationHandler, MessageHandler, BackgroundFetchWorker, TokenHandler, AnalyticsSink, Sendable {
    public struct Options: Sendable {
        /// What ``willPresent(_:)`` answers.
        public var presentation: PresentationOptions = [.list, .banner, .sound]
        /// What ``fetch(_:)`` answers.
        public var fetchResult: BackgroundFetchResult = .noData

        public init() {}
    }

    private let options: Options
    private let installationID: @Sendable () async -> String?
    /// The descriptor lines are written to, used under its lock so that lines from several threads do not interleave.
    /// (A lock around a value of its own: Thread Sanitizer reported the accesses to a `Locked(())`'s empty value as a
    /// race, the instrumentation of an access to nothing being free to move outside the lock.)
    private let output: Locked<Int32>

    /// Echoes to file descriptor `output` (1, standard output, by default). `installationID` supplies the
    /// `installationID` of `token` lines (for example `{ try? await herald.installationID() }`).
    public init(options: Options = Options(), output: Int32 = 1, installationID: @escaping @Sendable () async -> String? = { nil }) {
        self.options = options
        self.output = Locked(output)
        self.installationID = installationID
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "echo", summary: "one JSON line per handled event on standard output")
    }

    public func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        let names: [JSONValue] = [
            (PresentationOptions.list, "list"), (.banner, "banner"), (.sound, "sound"), (.badge, "badge"), (.alert, "alert"),
        ]
        .filter { options.presentation.contains($0.0) }.map { .string($0.1) }
        emit("willPresent", message, ["options": .array(names)])
        return options.presentation
    }

    public func didReceive(_ response: NotificationResponse) async {
        var extra: JSONObject = ["action": .string(response.actionIdentifier)]
        if let userText = response.userText { extra["userText"] = .string(userText) }
        emit("didReceiveResponse", response.message, extra)
    }

    public func didReceive(_ message: RemoteMessage) async throws {
        emit("message", message, [:])
    }

    public func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        emit("backgroundFetch", message, ["result": .string(options.fetchResult.rawValue)])
        return options.fetchResult
    }

    public func didReceiveRegistrationToken(_ token: String?) async {
        var line: JSONObject = ["event": "token", "token": token.map { .string($0) } ?? .null]
        line["installationID"] = await installationID().map { .string($0) } ?? .null
        write(line)
    }

    public func record(_ events: [AnalyticsEvent]) async throws {
        for event in events where event.name == .messageDropped {
            var line: JSONObject = ["event": "dropped"]
            line["messageID"] = event.messageID.map { .string($0) } ?? .null
            line["reason"] = event.parameters["reason"].map { .string($0) } ?? .null
            if let detail = event.parameters["detail"] { line["detail"] = .string(detail) }
            write(line)
        }
    }

    private func emit(_ event: String, _ message: RemoteMessage, _ extra: JSONObject) {
        var line: JSONObject = ["event": .string(event)]
        line["messageID"] = message.messageID.map { .string($0) } ?? .null
        line.merge(extra)
        line["userInfo"] = .object(message.userInfo)
        write(line)
    }

    private func write(_ line: JSONObject) {
        var bytes = JSONValue.object(line).jsonBytes()
        bytes.append(UInt8(ascii: "\n"))
        output.withLock { output in
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { Glibc.write(output, $0.baseAddress, $0.count) }
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }
}
