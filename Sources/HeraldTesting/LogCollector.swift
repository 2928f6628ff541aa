import Herald
public import Logging

/// One log line as a `LogHandler` got it: level, text, and every metadata value (the logger's and the call's).
public struct LogEntry: Sendable {
    public var level: Logger.Level
    public var message: String
    public var metadata: [String: String]
}

/// Keeps every log line of the loggers made with ``logger()``.
public final class LogCollector: Sendable {
    let entries = Locked<[LogEntry]>([])

    public init() {}

    public func logger() -> Logger {
        var logger = Logger(label: "herald-test") { _ in CollectingLogHandler(collector: self) }
        logger.logLevel = .trace
        return logger
    }

    public var all: [LogEntry] { entries.withLock { $0 } }

    /// Lines with every one of `metadata`.
    public func entries(with metadata: [String: String]) -> [LogEntry] {
        all.filter { entry in metadata.allSatisfy { entry.metadata[$0.key] == $0.value } }
    }
}

struct CollectingLogHandler: LogHandler {
    let collector: LogCollector
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged: [String: String] = [:]
        for (key, value) in metadata { merged[key] = "\(value)" }
        for (key, value) in event.metadata ?? [:] { merged[key] = "\(value)" }
        let entry = LogEntry(level: event.level, message: "\(event.message)", metadata: merged)
        collector.entries.withLock { $0.append(entry) }
    }
}
