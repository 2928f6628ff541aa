import Glibc
import HeraldEventLoop
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

    /// The line `log(event:)` writes for a statement at `level` from `source` whose metadata is `entries` (string
    /// values, in key order, distinct keys), without the `Logger.Metadata` dictionary a statement builds and this
    /// handler would sort: for a line written per message (the log presenter's). With metadata of the logger's own or
    /// a metadata provider to merge in, it goes through `log(event:)`. With `loop`, the caller runs on that loop's
    /// thread and the line is gathered there, written with the others of the loop's turn before the loop next polls.
    func log(
        _ level: Logger.Level, _ message: String, entries: KeyValuePairs<String, String>, source: String, gatheringOn loop: EventLoop? = nil
    ) {
        guard metadataText == nil, metadataProvider == nil else {
            var metadata: Logger.Metadata = [:]
            for (key, value) in entries { metadata[key] = .string(value) }
            log(
                event: LogEvent(
                    level: level, message: "\(message)", metadata: metadata, source: source, file: #fileID, function: #function,
                    line: #line))
            return
        }
        var entriesLength = 0
        for (key, value) in entries { entriesLength += 2 + key.utf8.count + value.utf8.count }
        writeLine(level: level, source: source, message: message, metadataLength: entriesLength, gatheringOn: loop) { line in
            for (key, value) in entries {
                line.append(UInt8(ascii: " "))
                line.appendText(key)
                line.append(UInt8(ascii: "="))
                line.appendText(value)
            }
        }
    }

    /// `<timestamp> <level> <label>:<metadata> [<source>] <message>` and a newline, in one `write(2)` (or gathered on
    /// `loop`); room is made for it at once when `metadataLength` (the bytes `metadata` appends) is known.
    private func writeLine(
        level: Logger.Level, source: String, message: String, metadataLength: Int? = nil, gatheringOn loop: EventLoop? = nil,
        metadata: (inout [UInt8]) -> Void
    ) {
        // The timestamp (`2026-11-29T16:22:00+0000`), the spaces, the colon and the brackets: 40 bytes covers them.
        let length =
            metadataLength.map { 40 + level.rawValue.utf8.count + label.utf8.count + $0 + source.utf8.count + message.utf8.count } ?? 256
        func compose(_ line: inout [UInt8]) {
            LogClock.appendTimestamp(to: &line)
            line.append(UInt8(ascii: " "))
            line.appendText(level.rawValue)
            if !label.isEmpty { line.append(UInt8(ascii: " ")) }
            line.appendText(label)
            line.append(UInt8(ascii: ":"))
            metadata(&line)
            line.append(contentsOf: " [".utf8)
            line.appendText(source)
            line.append(contentsOf: "] ".utf8)
            line.appendText(message)
            line.append(UInt8(ascii: "\n"))
        }
        if let loop {
            output.gather(on: loop, reserving: length, compose)
            return
        }
        var line: [UInt8] = []
        line.reserveCapacity(length)
        compose(&line)
        output.write(line)
    }

    /// The metadata as `StreamLogHandler` merges it: the logger's own, then the provider's, then the statement's, then
    /// the error's, each winning over the ones before; each entry preceded by a space.
    private func appendMetadata(of event: LogEvent, to line: inout [UInt8]) {
        let provided = metadataProvider?.get() ?? [:]
        let explicit = event.metadata ?? [:]
        if provided.isEmpty && explicit.isEmpty && event.error == nil {
            if let metadataText {
                line.append(UInt8(ascii: " "))
                line.appendText(metadataText)
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

    private static func append(_ metadata: Logger.Metadata, to line: inout [UInt8]) {
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: " "))
            line.appendText(key)
            line.append(UInt8(ascii: "="))
            if case .string(let text) = value {
                line.appendText(text)
            } else {
                line.appendText(value.description)
            }
        }
    }

    private static func text(of metadata: Logger.Metadata) -> String? {
        guard !metadata.isEmpty else { return nil }
        var line: [UInt8] = []
        append(metadata, to: &line)
        return String(decoding: line.dropFirst(), as: UTF8.self)
    }
}

extension [UInt8] {
    /// Appends `text`'s UTF-8 bytes in one copy (`append(contentsOf: text.utf8)` goes through the generic sequence
    /// path).
    fileprivate mutating func appendText(_ text: String) {
        if text.utf8.withContiguousStorageIfAvailable({ append(contentsOf: $0) }) == nil {
            var text = text
            text.withUTF8 { append(contentsOf: $0) }
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

    static func appendTimestamp(to line: inout [UInt8]) {
        var now = time(nil)
        last.withLock { last in
            if last.second != now {
                var local = tm()
                var buffer = [CChar](repeating: 0, count: 64)
                let count = localtime_r(&now, &local) == nil ? 0 : strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &local)
                last.text = count == 0 ? Array("<unknown>".utf8) : buffer[..<count].map { UInt8(bitPattern: $0) }
                last.second = now
            }
            line.append(contentsOf: last.text)
        }
    }
}
