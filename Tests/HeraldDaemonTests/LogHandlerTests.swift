import Glibc
import HeraldEventLoop
import Logging
import Testing

@testable import HeraldDaemon

/// The daemon's log lines are swift-log's `StreamLogHandler` lines, written faster: the same events through both give
/// the same text, but for the timestamp (which may straddle a second), checked for its own format.
@Suite("The daemon's log handler")
struct LogHandlerTests {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// `StreamLogHandler`'s output, collected.
    final class Collected: TextOutputStream, @unchecked Sendable {
        private let text = Locked("")
        func write(_ string: String) { text.withLock { $0 += string } }
        var lines: [String] { text.withLock { $0 }.split(separator: "\n").map(String.init) }
    }

    /// Runs `body` with a handler of each kind for `label`, the same metadata provider, level and logger metadata,
    /// and returns the lines of each, without their timestamps, and the daemon handler's timestamps.
    private func both(
        label: String, provider: Logger.MetadataProvider? = nil, metadata: Logger.Metadata = [:], _ body: (Logger) -> Void
    ) throws -> (daemon: [String], stream: [String], timestamps: [String]) {
        var pipe: [Int32] = [0, 0]
        #expect(Glibc.pipe(&pipe) == 0)
        defer { close(pipe[0]) }
        let live = LiveLogLevel(.trace)
        var daemon = LiveLevelLogHandler(label: label, level: live, descriptor: pipe[1])
        daemon.metadataProvider = provider
        let collected = Collected()
        var stream = StreamLogHandler(label: label, stream: collected, metadataProvider: provider)
        stream.logLevel = .trace
        var daemonLogger = Logger(label: label, factory: { _ in daemon })
        var streamLogger = Logger(label: label, factory: { _ in stream })
        for (key, value) in metadata {
            daemonLogger[metadataKey: key] = value
            streamLogger[metadataKey: key] = value
        }
        _ = daemon
        _ = stream
        body(daemonLogger)
        body(streamLogger)
        close(pipe[1])
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(pipe[0], &chunk, chunk.count)
            if count <= 0 { break }
            bytes += chunk[..<count]
        }
        let daemonLines = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        func split(_ line: String) throws -> (timestamp: String, rest: String) {
            guard let space = line.firstIndex(of: " ") else { throw Failure(description: "no timestamp in \(line)") }
            return (String(line[..<space]), String(line[space...]))
        }
        let daemonSplit = try daemonLines.map(split)
        return (daemonSplit.map(\.rest), try collected.lines.map(split).map(\.rest), daemonSplit.map(\.timestamp))
    }

    struct Refused: Error, CustomStringConvertible {
        var description: String { "refused: the disk is full" }
    }

    @Test("statements with and without metadata, every kind of value, an error: the same lines as StreamLogHandler")
    func sameLinesAsStreamLogHandler() throws {
        let lines = try both(label: "herald") { logger in
            logger.info("herald started")
            logger.info(
                "notification",
                metadata: ["title": "Hi", "body": "Body, with spaces", "message_id": "7466006403971758", "options": "[]"])
            logger.warning("nested", metadata: ["list": ["a", "b"], "map": ["k": "v"], "number": .stringConvertible(42)])
            logger.error("with an error", error: Refused(), metadata: ["plugin": "http"])
            logger.debug("non-ASCII: é ✓", metadata: ["clé": "valeur ✓", "Zebra": "upper first"])
            logger.trace("", metadata: [:])
            // Longer than the 512 bytes a line is first composed in.
            logger.notice("\(String(repeating: "m", count: 3_000))", metadata: ["long": "\(String(repeating: "v", count: 1_000))"])
        }
        #expect(lines.daemon.count == 7)
        #expect(lines.daemon[6].utf8.count > 4_000)
        #expect(lines.daemon == lines.stream)
        #expect(
            lines.daemon[1]
                == " info herald: body=Body, with spaces message_id=7466006403971758 options=[] title=Hi [HeraldDaemonTests] notification")
    }

    @Test("a line from fields in key order (the log presenter's) is a statement's line, also when metadata must be merged")
    func fieldsAsAStatement() throws {
        let provider = Logger.MetadataProvider { ["request": "r-1"] }
        for (provider, metadata) in [(nil, [:]), (provider, [:]), (nil, ["plugin": "socket"] as Logger.Metadata)] {
            var pipe: [Int32] = [0, 0]
            #expect(Glibc.pipe(&pipe) == 0)
            defer { close(pipe[0]) }
            var daemon = LiveLevelLogHandler(label: "herald", level: LiveLogLevel(.info), descriptor: pipe[1])
            daemon.metadataProvider = provider
            daemon.metadata = metadata
            daemon.log(.info, "notification", source: "Herald") { field in
                field("body", "B, b")
                field("message_id", "7")
                field("options", "[]")
                field("title", "T")
            }
            close(pipe[1])
            var bytes = [UInt8](repeating: 0, count: 4096)
            let count = read(pipe[0], &bytes, bytes.count)
            let line = String(decoding: bytes[..<max(count, 0)], as: UTF8.self)
            let collected = Collected()
            var stream = StreamLogHandler(label: "herald", stream: collected, metadataProvider: provider)
            stream.metadata = metadata
            Logger(label: "herald", factory: { _ in stream }).info(
                "notification", metadata: ["title": "T", "body": "B, b", "message_id": "7", "options": "[]"], source: "Herald")
            let expected = try #require(collected.lines.first)
            #expect(line.drop { $0 != " " } == expected.drop { $0 != " " } + "\n")
        }
    }

    @Test("the logger's own metadata, a metadata provider's and the statement's, merged in that order of precedence")
    func mergedMetadata() throws {
        let provider = Logger.MetadataProvider { ["request": "r-1", "plugin": "from-provider"] }
        let lines = try both(label: "herald", provider: provider, metadata: ["plugin": "socket", "loop": "0"]) { logger in
            logger.info("one")
            logger.info("two", metadata: ["plugin": "explicit", "extra": "x"])
        }
        #expect(lines.daemon == lines.stream)
        #expect(lines.daemon[1].contains("plugin=explicit"))
        let alone = try both(label: "", metadata: ["plugin": "socket"]) { logger in
            logger.notice("stopping")
            logger.notice("stopped", metadata: ["grace": "10s"])
        }
        #expect(alone.daemon == alone.stream)
    }

    @Test("timestamps in local time, to the second, with the zone's offset")
    func timestamps() throws {
        let lines = try both(label: "herald") { logger in
            for number in 0..<3 { logger.info("line \(number)") }
        }
        for timestamp in lines.timestamps {
            let pattern = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{4}/
            #expect(timestamp.wholeMatch(of: pattern) != nil, "\(timestamp)")
        }
    }

    @Test("the level: the daemon's live level unless the logger set its own")
    func levels() {
        let live = LiveLogLevel(.info)
        var handler = LiveLevelLogHandler(label: "herald", level: live)
        #expect(handler.logLevel == .info)
        live.level = .debug
        #expect(handler.logLevel == .debug)
        handler.logLevel = .error
        live.level = .trace
        #expect(handler.logLevel == .error)
    }
}
