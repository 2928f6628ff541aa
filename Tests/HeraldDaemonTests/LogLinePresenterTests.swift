import Glibc
import Herald
import HeraldTesting
import Logging
import Testing

@testable import HeraldDaemon

/// `herald serve`'s default presenter writes, per notification, the line the bus writes when no presenter is
/// registered, through the daemon's log handler.
@Suite("The log presenter")
struct LogLinePresenterTests {
    /// A pipe for a log handler to write to, read whole once the writer is closed.
    final class Pipe: @unchecked Sendable {
        // @unchecked Sendable: the descriptors are set once.
        let read: Int32
        let write: Int32

        init() {
            var ends: [Int32] = [0, 0]
            #expect(Glibc.pipe(&ends) == 0)
            (read, write) = (ends[0], ends[1])
        }

        /// Closes the writing end and returns every line written, without its timestamp.
        func lines() -> [String] {
            close(write)
            defer { close(read) }
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = Glibc.read(read, &chunk, chunk.count)
                if count <= 0 { break }
                bytes += chunk[..<count]
            }
            return String(decoding: bytes, as: UTF8.self).split(separator: "\n").map { line in
                line.firstIndex(of: " ").map { String(line[$0...]) } ?? String(line)
            }
        }
    }

    /// The notification lines an instance writes for `bodies`, with or without the log presenter, at `level`, each
    /// message ID replaced by `ID`; and how many messages were in flight after each answer.
    private func notificationLines(
        presenter: Bool, level: Logger.Level = .info, loggerMetadata: Logger.Metadata = [:], bodies: (String) -> [String]
    ) async throws -> (lines: [String], inFlight: [Int]) {
        let pipe = Pipe()
        let live = LiveLogLevel(level)
        var logger = Logger(label: "herald", factory: { label in LiveLevelLogHandler(label: label, level: live, descriptor: pipe.write) })
        for (key, value) in loggerMetadata { logger[metadataKey: key] = value }
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), logger: logger)
        let receiver = InMemoryReceiver()
        var inFlight: [Int] = []
        try await withStarted(herald, plugins: [receiver] + (presenter ? [LogLinePresenter(logger: logger, loop: herald.loop)] : [])) {
            herald in
            let token = try await herald.token()
            for body in bodies(token) {
                _ = try await receiver.sendFCM(body, to: herald).get()
                inFlight.append(try await herald.loop.submit { try herald.bus.messagesInFlight })
            }
            try await herald.waitUntilIdle()
        }
        let lines = pipe.lines().filter { $0.hasSuffix("] notification") }.map {
            $0.replacing(/message_id=[0-9]+/, with: "message_id=ID")
        }
        return (lines, inFlight)
    }

    static func bodies(_ token: String) -> [String] {
        [
            fcmBody(token: token, notification: ("Build finished", "All green, 8121 passed")),
            fcmBody(token: token, notification: ("Café", "é ✓ and = signs")),
            fcmBody(token: token, apns: #"{"payload": {"aps": {"alert": "a string alert", "sound": "default", "badge": 3}}}"#),
        ]
    }

    @Test("its lines are the bus's own, written without a task per notification")
    func sameLinesAsTheBus() async throws {
        let bus = try await notificationLines(presenter: false, bodies: Self.bodies)
        let presenter = try await notificationLines(presenter: true, bodies: Self.bodies)
        #expect(presenter.lines.count == 3)
        #expect(presenter.lines == bus.lines)
        #expect(
            presenter.lines.first
                == " info herald: body=All green, 8121 passed message_id=ID options=[] title=Build finished [Herald] notification")
        // Presented inside the delivery: nothing in flight once the sender has its answer.
        #expect(presenter.inFlight == [0, 0, 0])
    }

    @Test("with metadata of the logger's own, merged as the bus's statement is; above info, no line")
    func loggerMetadataAndLevel() async throws {
        let metadata: Logger.Metadata = ["instance": "a", "title": "the logger's"]
        let bus = try await notificationLines(presenter: false, loggerMetadata: metadata, bodies: Self.bodies)
        let presenter = try await notificationLines(presenter: true, loggerMetadata: metadata, bodies: Self.bodies)
        #expect(presenter.lines.count == 3)
        #expect(presenter.lines == bus.lines)
        #expect(presenter.lines.allSatisfy { $0.contains(" instance=a ") && !$0.contains("the logger's") })
        let quiet = try await notificationLines(presenter: true, level: .notice, bodies: Self.bodies)
        #expect(quiet.lines.isEmpty)
    }

    @Test("with a log handler other than the daemon's, the line goes through the logger: the bus's own statement")
    func anotherHandler() async throws {
        func lines(presenter: Bool) async throws -> [LogEntry] {
            let collector = LogCollector()
            let logger = collector.logger()
            let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), logger: logger)
            let receiver = InMemoryReceiver()
            try await withStarted(herald, plugins: [receiver] + (presenter ? [LogLinePresenter(logger: logger, loop: herald.loop)] : [])) {
                herald in
                let token = try await herald.token()
                for body in Self.bodies(token) { _ = try await receiver.sendFCM(body, to: herald).get() }
                try await herald.waitUntilIdle()
            }
            return collector.all.filter { $0.message == "notification" }
        }
        let bus = try await lines(presenter: false)
        let presenter = try await lines(presenter: true)
        #expect(presenter.count == 3)
        #expect(presenter.allSatisfy { $0.level == .info && $0.metadata["message_id"]?.isEmpty == false })
        func withoutIDs(_ entries: [LogEntry]) -> [[String: String]] {
            entries.map { entry in entry.metadata.filter { $0.key != "message_id" } }
        }
        #expect(withoutIDs(presenter) == withoutIDs(bus))
        #expect(presenter.first?.metadata["title"] == "Build finished" && presenter.first?.metadata["options"] == "[]")
    }
}
