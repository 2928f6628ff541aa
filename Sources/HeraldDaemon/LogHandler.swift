import Glibc
import HeraldEventLoop
import HeraldJSON
import Logging

/// The daemon's log handler: lines on standard error in the format of swift-log's `StreamLogHandler`
/// (`2026-11-29T16:22:00+0000 info herald: key=value key=value [Module] message`, metadata sorted by key), filtered
/// by a ``LiveLogLevel`` instead of a level fixed at bootstrap; a logger that sets its own level keeps it.
///
/// It writes what `StreamLogHandler` writes, at a fraction of its cost, because `herald serve`'s default presenter
/// logs a line per notification: the timestamp is formatted once per second, not per line; a statement's metadata
/// is sorted and written straight into the line's bytes, without a merged dictionary and a string per entry when the
/// logger has no metadata of its own; and the line goes out in one `write(2)`, whole, so that lines of several
/// threads never interleave. The log presenter's lines, one per notification, are gathered on the loop and written
/// together (see ``LogOutput``).
struct LiveLevelLogHandler: LogHandler {
    private let label: String
    private let live: LiveLogLevel
    private let output: LogOutput
    private var own: Logger.Level?
    /// The logger's own metadata as text (`key=value` pairs sorted by key), made when it changes.
    private var metadataText: String?

    var metadataProvider: Logger.MetadataProvider?

    var metadata: Logger.Metadata = [:] {
        didSet { metadataText = Self.text(of: metadata) }
    }

    /// A handler writing to `output`, which the daemon's handlers share.
    init(label: String, level: LiveLogLevel, output: LogOutput) {
        self.label = label
        live = level
        self.output = output
        metadataProvider = LoggingSystem.metadataProvider
    }

    /// A handler writing to `descriptor` (standard error unless a test gives another) through an output of its own.
    init(label: String, level: LiveLogLevel, descriptor: Int32 = STDERR_FILENO) {
        self.init(label: label, level: level, output: LogOutput(descriptor: descriptor))
    }

    var logLevel: Logger.Level {
        get { own ?? live.level }
        set { own = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        writeLine(level: event.level, source: event.source, message: event.message.description) { line in
            appendMetadata(of: event, to: &line)
        }
    }

    /// The line `log(event:)` writes for a statement at `level` from `source` whose metadata is the string entries
    /// `fields` passes to the function it is given (`field("body", text)`, in key order, distinct keys), without the
    /// `Logger.Metadata` dictionary a statement builds and this handler would sort, or an array of entries (destroying
    /// one of string pairs cost more than writing them): for a line written per message (the log presenter's). With
    /// metadata of the logger's own or a metadata provider to merge in, it goes through `log(event:)`. With `loop`,
    /// the caller runs on that loop's thread and the line is gathered there, written with the others of the loop's
    /// turn before the loop next polls.
    @inline(__always)
    func log(
        _ level: Logger.Level, _ message: String, source: String, gatheringOn loop: EventLoop? = nil,
        fields: (_ field: (_ key: StaticString, _ value: String) -> Void) -> Void
    ) {
        guard metadataText == nil, metadataProvider == nil else {
            var metadata: Logger.Metadata = [:]
            fields { key, value in metadata[key.description] = .string(value) }
            log(
                event: LogEvent(
                    level: level, message: "\(message)", metadata: metadata, source: source, file: #fileID, function: #function,
                    line: #line))
            return
        }
        writeLine(level: level, source: source, message: message, gatheringOn: loop) { line in
            fields { key, value in
                line.append(UInt8(ascii: " "))
                line.append(key)
                line.append(UInt8(ascii: "="))
                line.append(value)
            }
        }
    }

    /// `<timestamp> <level> <label>:<metadata> [<source>] <message>` and a newline, composed on the stack (past 512
    /// bytes on the heap) and written in one `write(2)`, or gathered on `loop`.
    private func writeLine(
        level: Logger.Level, source: String, message: String, gatheringOn loop: EventLoop? = nil,
        metadata: (inout ByteWriter) -> Void
    ) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 512) { stack in
            var line = ByteWriter(stack)
            LogClock.appendTimestamp(to: &line)
            line.append(UInt8(ascii: " "))
            line.append(level.rawValue)
            if !label.isEmpty { line.append(UInt8(ascii: " ")) }
            line.append(label)
            line.append(UInt8(ascii: ":"))
            metadata(&line)
            line.append(" [" as StaticString)
            line.append(source)
            line.append("] " as StaticString)
            line.append(message)
            line.append(UInt8(ascii: "\n"))
            line.withBytes { line in
                if let loop {
                    output.gather(on: loop, line)
                } else {
                    output.write(line)
                }
            }
        }
    }

    /// The metadata as `StreamLogHandler` merges it: the logger's own, then the provider's, then the statement's, then
    /// the error's, each winning over the ones before; each entry preceded by a space.
    private func appendMetadata(of event: LogEvent, to line: inout ByteWriter) {
        let provided = metadataProvider?.get() ?? [:]
        let explicit = event.metadata ?? [:]
        if provided.isEmpty && explicit.isEmpty && event.error == nil {
            if let metadataText {
                line.append(UInt8(ascii: " "))
                line.append(metadataText)
            }
            return
        }
        if metadata.isEmpty && provided.isEmpty && event.error == nil {
            Self.append(explicit, to: &line)
            return
        }
        var merged = metadata
        merged.merge(provided) { _, provided in provided }
        merged.merge(explicit) { _, explicit in explicit }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
        }
        Self.append(merged, to: &line)
    }

    private static func append(_ metadata: Logger.Metadata, to line: inout ByteWriter) {
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: " "))
            line.append(key)
            line.append(UInt8(ascii: "="))
            if case .string(let text) = value {
                line.append(text)
            } else {
                line.append(value.description)
            }
        }
    }

    private static func text(of metadata: Logger.Metadata) -> String? {
        guard !metadata.isEmpty else { return nil }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 256) { stack in
            var line = ByteWriter(stack)
            append(metadata, to: &line)
            return line.withBytes { String(decoding: $0.dropFirst(), as: UTF8.self) }
        }
    }
}

/// The local time of log lines, `%Y-%m-%dT%H:%M:%S%z` as `StreamLogHandler` writes it, formatted once per second.
private enum LogClock {
    private struct Formatted {
        var second: time_t = -1
        var text: [UInt8] = []
    }

    private static let last = Locked(Formatted())

    static func appendTimestamp(to line: inout ByteWriter) {
        var now = time(nil)
        last.withLock { last in
            if last.second != now {
                var local = tm()
                var buffer = [CChar](repeating: 0, count: 64)
                let count = localtime_r(&now, &local) == nil ? 0 : strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
                last.text = count == 0 ? Array("<unknown>".utf8) : buffer[..<count].map { UInt8(bitPattern: $0) }
                last.second = now
            }
            last.text.withUnsafeBufferPointer { line.append($0) }
        }
    }
}
