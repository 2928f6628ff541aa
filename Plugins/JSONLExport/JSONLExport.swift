import Glibc
public import Herald

/// FCM's message-delivery data export, as JSON lines: one JSON object per analytics event, with exactly the
/// columns of FCM's BigQuery export table, in its order, so the file loads into a table of that schema
/// (`bq load --source_format=NEWLINE_DELIMITED_JSON`) and the queries written for FCM's export run on it.
///
/// ```swift
/// try herald.register(JSONLExport(options: .init(path: "/var/lib/my-daemon/delivery-metrics.jsonl", appName: "com.example.weatherd"),
///                                 installationID: { try? await herald.installationID() }))
/// ```
///
/// ```
/// {"event_timestamp":"2025-03-01 12:00:00.123 UTC","project_number":1234567890,"message_id":"8410952874104582181",
///  "instance_id":"fX2…","message_type":"DISPLAY_NOTIFICATION","sdk_platform":"LINUX","app_name":"com.example.weatherd",
///  "collapse_key":null,"priority":10,"ttl":3600,"topic":"/topics/weather","bulk_id":null,"event":"MESSAGE_DELIVERED",
///  "analytics_label":"spring-sale"}
/// ```
/// (one line in the file).
///
/// **Columns** (``columns``; every line has all of them, in this order; a missing value is `null`):
///
/// | column | BigQuery type | value |
/// |---|---|---|
/// | `event_timestamp` | TIMESTAMP | the event's time, as BigQuery writes a TIMESTAMP: `YYYY-MM-DD HH:MM:SS.mmm UTC` |
/// | `project_number` | INTEGER | ``Options/projectNumber``, else the instance's sender ID when it is a number |
/// | `message_id` | STRING | `gcm.message_id` |
/// | `instance_id` | STRING | the installation ID (FCM's `fid`) |
/// | `message_type` | STRING | `DISPLAY_NOTIFICATION` or `DATA_MESSAGE`; `UNIFIEDPUSH` for a push to a UnifiedPush app |
/// | `sdk_platform` | STRING | ``Options/sdkPlatform``, `LINUX` (FCM's own values are `ANDROID`, `IOS`, `WEB`) |
/// | `app_name` | STRING | ``Options/appName`` (FCM: the app's package name or bundle ID) |
/// | `collapse_key` | STRING | `apns-collapse-id` |
/// | `priority` | INTEGER | 10 for high, 5 for normal, as FCM's SDKs report it |
/// | `ttl` | INTEGER | seconds the message had left to live when it arrived; `null` when it does not expire |
/// | `topic` | STRING | `/topics/{name}` for a topic message (the `from` the SDKs report), else `null` |
/// | `bulk_id` | INTEGER | always `null`: Herald has no bulk sends |
/// | `event` | STRING | see below |
/// | `analytics_label` | STRING | `fcm_options.analytics_label` |
///
/// Integers are JSON numbers (every value here is far below 2⁵³, where BigQuery asks for strings).
///
/// **Events.** Herald's events with a counterpart in FCM's export get FCM's name (``fcmEventName(for:)``):
/// `notification_receive` → `MESSAGE_DELIVERED`, `notification_open` → `MESSAGE_OPEN` (FCM's SDK event for a
/// notification opened), and drops the sender was told of: `message_dropped` with reason `invalid` →
/// `INVALID_PARAMETERS`, `rejected_backpressure` → `QUOTA_EXCEEDED`, `store_failure` →
/// `MESSAGE_RECEIVED_INTERNAL_ERROR`. The other events about a message have no FCM counterpart and are written
/// with Herald's name, lower case so that they never match an FCM event name: `notification_foreground`,
/// `notification_dismiss`, `background_fetch:{result}` (`newData`, `noData`, `failed`) and
/// `message_dropped:{reason}` (`duplicate`, `expired`, `not_targeted`, `collapsed`). With
/// ``EventSelection/fcmEventsOnly`` they are skipped. Events about the instance rather than a message
/// (`token_refresh`, `topic_subscribe`, `topic_unsubscribe`) and `diagnostic` are never written: FCM's export
/// has one row per message event.
///
/// **UnifiedPush.** Events about pushes Herald keeps for UnifiedPush apps (`message_type` `UNIFIEDPUSH`) take the
/// names of FCM's server side, Herald being the push service there: a push accepted (`notification_receive`) →
/// `MESSAGE_ACCEPTED`, taken by its app (`message_delivered`) → `MESSAGE_DELIVERED`; its drops are written as
/// above (`message_dropped:expired`, `message_dropped:collapsed` for a push a newer one with its `Topic`
/// replaced, `message_dropped:unregistered` for a push to an endpoint its app unregistered).
///
/// **Files.** Lines are appended with POSIX `open(O_APPEND)` / `write`, one `write` per batch (per file when a
/// batch spans a rotation), serialized: concurrent batches never interleave. The file is rotated by size
/// (``Options/maximumFileBytes``) to `file.1` … `file.N` (``Options/keptFiles``; the oldest is removed); a line
/// is never split across files and a file never passes the limit (unless one line alone is longer). A path that
/// is not a regular file (a FIFO, `/dev/stdout`) is written to but never rotated.
///
/// **Durability.** `fsync` at each rotation (before the file is moved) and at ``stop()``; batches that arrive
/// after `stop()` (the shutdown's last analytics flush comes after plugins stop) are written and synced one by
/// one. ``Options/syncEveryBatch`` syncs every batch. Between syncs a power loss can lose the last lines, never
/// split one: a torn last line is cut off when the file is opened again.
///
/// **Failures.** A failed write throws ``JSONLExportError`` naming the file; the analytics pipeline counts it and
/// retries the batch. The bytes of a failed write are taken back, and the export remembers how many lines of a
/// failed batch are already in a file, so a retried batch is written without duplicates. At ``start(_:)`` the
/// file's directory is created if missing and the file opened: a path that cannot be used stops the start. A
/// directory removed later is not created again: writes fail (and are retried) until it is back.
public final class JSONLExport: AnalyticsSink, AnalyticsRecordSink, TokenHandler, Sendable {
    /// Which events become lines.
    public enum EventSelection: Sendable, Hashable {
        /// FCM's events, and Herald's other events about a message under Herald's names (the default).
        case messageEvents
        /// Only events with an FCM counterpart.
        case fcmEventsOnly
    }

    public struct Options: Sendable {
        /// The file; rotated files are `path.1` … `path.N`.
        public var path: String = "herald-data/delivery-metrics.jsonl"
        /// The largest a file grows before it is rotated.
        public var maximumFileBytes: Int = 64 << 20
        /// How many rotated files are kept (`path.1` newest … `path.N` oldest); 0 removes the full file.
        public var keptFiles: Int = 5
        /// `app_name`: the daemon's name (FCM writes the app's package name or bundle ID).
        public var appName: String?
        /// `sdk_platform`. FCM's SDKs write `ANDROID`, `IOS` or `WEB`.
        public var sdkPlatform: String = "LINUX"
        /// `project_number`; `nil` takes the instance's sender ID when it is a number (else the column is `null`).
        public var projectNumber: Int64?
        /// Which events become lines.
        public var events: EventSelection = .messageEvents
        /// `fsync` after every batch (by default only at rotation and at stop).
        public var syncEveryBatch: Bool = false

        public init(
            path: String = "herald-data/delivery-metrics.jsonl", maximumFileBytes: Int = 64 << 20, keptFiles: Int = 5,
            appName: String? = nil, sdkPlatform: String = "LINUX", projectNumber: Int64? = nil,
            events: EventSelection = .messageEvents, syncEveryBatch: Bool = false
        ) {
            self.path = path
            self.maximumFileBytes = maximumFileBytes
            self.keptFiles = keptFiles
            self.appName = appName
            self.sdkPlatform = sdkPlatform
            self.projectNumber = projectNumber
            self.events = events
            self.syncEveryBatch = syncEveryBatch
        }
    }

    /// The columns of FCM's BigQuery export, in its order: the keys of every line.
    public static let columns = [
        "event_timestamp", "project_number", "message_id", "instance_id", "message_type", "sdk_platform", "app_name",
        "collapse_key", "priority", "ttl", "topic", "bulk_id", "event", "analytics_label",
    ]

    private struct WriterState {
        var file: RotatingLineFile
        var stopped = false
        /// Batches that failed after some of their lines reached a file: how many did. A retry of the same
        /// batch starts after them. At most ``maximumPartialBatches``, oldest forgotten first.
        var partial: [(batch: BatchKey, linesWritten: Int)] = []
    }

    /// Which batch a retry is: the events handed over, or (read from records) the IDs of the first and last event
    /// and the count, since the pipeline gives every event of a run its own ID.
    private enum BatchKey: Equatable {
        case events([AnalyticsEvent])
        case records(first: UInt64, last: UInt64, count: Int)
    }

    private struct Identity {
        var projectNumber: Int64?
        var instanceID: String?
    }

    private static let maximumPartialBatches = 16

    public let options: Options
    private let installationID: (@Sendable () async -> String?)?
    private let writer: Locked<WriterState>
    private let identity = Locked(Identity())
    private let warn = Locked<(@Sendable (String) -> Void)?>(nil)

    /// Exports as `options` say. `installationID` supplies `instance_id` (for example
    /// `{ try? await herald.installationID() }`); without it the installation ID is read from the registration
    /// token (`<installation id>:<random>`). It is asked at start and whenever the token changes, never while
    /// writing: the last answer is used.
    public init(options: Options = Options(), installationID: (@Sendable () async -> String?)? = nil) {
        precondition(options.maximumFileBytes > 0, "maximumFileBytes must be positive")
        precondition(options.keptFiles >= 0, "keptFiles must not be negative")
        self.options = options
        self.installationID = installationID
        self.writer = Locked(
            WriterState(file: RotatingLineFile(path: options.path, maximumBytes: options.maximumFileBytes, keptFiles: options.keptFiles)))
        identity.withLock { $0.projectNumber = options.projectNumber }
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "jsonl-export", summary: "FCM's delivery-metrics export (BigQuery columns) as JSON lines, rotated by size")
    }

    // MARK: Plugin

    public func start(_ context: PluginContext) async throws {
        let logger = context.logger
        warn.withLock { $0 = { logger.warning("\($0)") } }
        if options.projectNumber == nil {
            let senderID = context.decoding.senderID
            let number = senderID.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } ? Int64(senderID) : nil
            identity.withLock { $0.projectNumber = number.flatMap { $0 > 0 ? $0 : nil } }
        }
        await refreshInstanceID(token: try? await context.topics.token())
        let repaired = try writer.withLock { (state: inout WriterState) throws(JSONLExportError) -> Int in
            state.stopped = false
            try state.file.createDirectory()
            return try state.file.openIfNeeded()
        }
        if repaired > 0 { report("cut \(repaired) bytes of a torn last line off \(options.path)") }
    }

    public func stop() async {
        let failure: JSONLExportError? = writer.withLock { state in
            state.stopped = true
            defer { state.file.close() }
            do throws(JSONLExportError) {
                try state.file.sync()
                return nil
            } catch {
                return error
            }
        }
        if let failure { report("\(failure)") }
    }

    public func didReceiveRegistrationToken(_ token: String?) async {
        await refreshInstanceID(token: token)
    }

    private func refreshInstanceID(token: String?) async {
        let resolved: String?
        if let installationID {
            resolved = await installationID()
        } else {
            resolved = token.flatMap { token in token.firstIndex(of: ":").map { String(token[..<$0]) } }
        }
        if let resolved { identity.withLock { $0.instanceID = resolved } }
    }

    private func report(_ text: String) {
        warn.withLock { $0 }?(text)
    }

    // MARK: Analytics

    public func record(_ events: [AnalyticsEvent]) async throws {
        let identity = identity.withLock { $0 }
        let lines = LineBatch(capacity: events.count * 400)
        var timestamps = TimestampCache()
        for event in events {
            guard let name = Self.exportedEventName(for: event, selection: options.events) else { continue }
            lines.appendLine(line(for: event, eventName: name, identity: identity, timestamps: &timestamps))
        }
        try write(lines) { .events(events) }
    }

    /// The pipeline's path: lines written straight from the recorded bytes into one buffer, byte for byte what
    /// ``record(_:)-([AnalyticsEvent])`` writes for the same events, without building an event, a string or a
    /// dictionary per event.
    package func record(_ records: AnalyticsRecords) async throws {
        let identity = identity.withLock { $0 }
        let columns = IdentityColumns(identity: identity, options: options)
        let lines = LineBatch(capacity: records.count * (300 + columns.count))
        var timestamps = TimestampCache()
        let selection = options.events
        records.forEach { record in
            guard let name = Self.exportedEventName(for: record, selection: selection) else { return }
            Self.writeLine(for: record, eventName: name, columns: columns, timestamps: &timestamps, into: lines)
        }
        try write(lines) {
            let ids = records.idRange
            return .records(first: ids.first, last: ids.last, count: records.count)
        }
    }

    /// Appends `lines` to the file, after the lines of them a failed attempt of the same batch already wrote.
    private func write(_ lines: LineBatch, batch: () -> BatchKey) throws {
        guard !lines.isEmpty else { return }
        try writer.withLock { (state: inout WriterState) throws(JSONLExportError) in
            var progress = 0
            var key: BatchKey?
            if !state.partial.isEmpty {
                let current = batch()
                key = current
                if let index = state.partial.firstIndex(where: { $0.batch == current }) {
                    progress = state.partial[index].linesWritten
                    state.partial.remove(at: index)
                }
            }
            do throws(JSONLExportError) {
                try state.file.append(lines, progress: &progress)
                if options.syncEveryBatch || state.stopped { try state.file.sync() }
                if state.stopped { state.file.close() }
            } catch {
                if progress > 0 {
                    state.partial.append((key ?? batch(), progress))
                    if state.partial.count > Self.maximumPartialBatches { state.partial.removeFirst() }
                }
                throw error
            }
        }
    }

    /// FCM's name for `event` in the delivery export, or `nil` when it has no counterpart.
    public static func fcmEventName(for event: AnalyticsEvent) -> String? {
        switch event.name {
        case .notificationReceive:
            return event.messageType == AnalyticsEvent.unifiedPush ? "MESSAGE_ACCEPTED" : "MESSAGE_DELIVERED"
        case .messageDelivered:
            return "MESSAGE_DELIVERED"
        case .notificationOpen:
            return "MESSAGE_OPEN"
        case .messageDropped:
            switch event.parameters["reason"].flatMap(AnalyticsEvent.DropReason.init(rawValue:)) {
            case .invalid: return "INVALID_PARAMETERS"
            case .rejectedBackpressure: return "QUOTA_EXCEEDED"
            case .storeFailure: return "MESSAGE_RECEIVED_INTERNAL_ERROR"
            default: return nil
            }
        default:
            return nil
        }
    }

    /// The `event` column written for `event`, or `nil` when no line is written for it (see the type's
    /// documentation).
    public static func exportedEventName(for event: AnalyticsEvent, selection: EventSelection = .messageEvents) -> String? {
        if let name = fcmEventName(for: event) { return name }
        guard selection == .messageEvents else { return nil }
        switch event.name {
        case .notificationForeground, .notificationBackground, .notificationDismiss:
            return event.name.rawValue
        case .backgroundFetch:
            return qualified(event.name, event.parameters["result"])
        case .messageDropped:
            return qualified(event.name, event.parameters["reason"])
        case .notificationReceive, .notificationOpen, .messageDelivered, .tokenRefresh, .topicSubscribe, .topicUnsubscribe, .diagnostic:
            return nil
        }
    }

    private static func qualified(_ name: AnalyticsEvent.Name, _ qualifier: String?) -> String {
        qualifier.map { "\(name.rawValue):\($0)" } ?? name.rawValue
    }

    /// One line, written straight into bytes (no intermediate JSON object: this runs once per event).
    private func line(for event: AnalyticsEvent, eventName: String, identity: Identity, timestamps: inout TimestampCache) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(400)
        // Each key with its quotes, colon and the comma before it: one append per column.
        func key(_ text: StaticString) {
            text.withUTF8Buffer { bytes.append(contentsOf: $0) }
        }
        func string(_ value: String?) {
            if let value { JSONValue.string(value).write(into: &bytes) } else { Self.appendNull(&bytes) }
        }
        func integer(_ value: Int64?) {
            if let value { Self.appendDecimal(value, to: &bytes) } else { Self.appendNull(&bytes) }
        }
        key(#"{"event_timestamp":""#)
        timestamps.append(milliseconds: event.timestamp, to: &bytes)
        key(#"","project_number":"#)
        integer(identity.projectNumber)
        key(#","message_id":"#)
        string(event.messageID)
        key(#","instance_id":"#)
        string(identity.instanceID)
        key(#","message_type":"#)
        string(event.messageType)
        key(#","sdk_platform":"#)
        string(options.sdkPlatform)
        key(#","app_name":"#)
        string(options.appName)
        key(#","collapse_key":"#)
        string(event.collapseKey)
        key(#","priority":"#)
        integer(event.priority.map { Int64($0.rawValue) })
        key(#","ttl":"#)
        integer(event.ttl)
        key(#","topic":"#)
        string(event.topic.map { "/topics/\($0)" })
        key(#","bulk_id":null,"event":"#)
        string(eventName)
        key(#","analytics_label":"#)
        string(event.analyticsLabel)
        key("}\n")
        return bytes
    }

    /// The columns that are the same on every line of a batch, with the keys around them, rendered once per batch.
    private struct IdentityColumns {
        /// `","project_number":…,"message_id":`
        var project: [UInt8] = []
        /// `,"instance_id":…,"message_type":`
        var instance: [UInt8] = []
        /// `,"sdk_platform":…,"app_name":…,"collapse_key":`
        var platform: [UInt8] = []

        init(identity: Identity, options: Options) {
            JSONLExport.appendStatic(#"","project_number":"#, to: &project)
            if let number = identity.projectNumber {
                JSONLExport.appendDecimal(number, to: &project)
            } else {
                JSONLExport.appendNull(&project)
            }
            JSONLExport.appendStatic(#","message_id":"#, to: &project)
            JSONLExport.appendStatic(#","instance_id":"#, to: &instance)
            if let id = identity.instanceID { JSONValue.string(id).write(into: &instance) } else { JSONLExport.appendNull(&instance) }
            JSONLExport.appendStatic(#","message_type":"#, to: &instance)
            JSONLExport.appendStatic(#","sdk_platform":"#, to: &platform)
            JSONValue.string(options.sdkPlatform).write(into: &platform)
            JSONLExport.appendStatic(#","app_name":"#, to: &platform)
            if let name = options.appName { JSONValue.string(name).write(into: &platform) } else { JSONLExport.appendNull(&platform) }
            JSONLExport.appendStatic(#","collapse_key":"#, to: &platform)
        }

        var count: Int { project.count + instance.count + platform.count }
    }

    /// The `event` column of a record: a fixed name, or Herald's name and a qualifier (`message_dropped:{reason}`).
    private struct RecordEventName {
        var name: StaticString
        var qualifier: UnsafeRawBufferPointer?
    }

    /// ``exportedEventName(for:selection:)`` of the event `record` holds.
    private static func exportedEventName(for record: AnalyticsRecord, selection: EventSelection) -> RecordEventName? {
        switch record.name {
        case .notificationReceive:
            if record.messageTypeKind == .other, let type = record.messageType, equal(type, "UNIFIEDPUSH") {
                return RecordEventName(name: "MESSAGE_ACCEPTED")
            }
            return RecordEventName(name: "MESSAGE_DELIVERED")
        case .messageDelivered:
            return RecordEventName(name: "MESSAGE_DELIVERED")
        case .notificationOpen:
            return RecordEventName(name: "MESSAGE_OPEN")
        case .messageDropped:
            let reason = record.parameter("reason")
            if let reason {
                if equal(reason, "invalid") { return RecordEventName(name: "INVALID_PARAMETERS") }
                if equal(reason, "rejected_backpressure") { return RecordEventName(name: "QUOTA_EXCEEDED") }
                if equal(reason, "store_failure") { return RecordEventName(name: "MESSAGE_RECEIVED_INTERNAL_ERROR") }
            }
            return selection == .messageEvents ? RecordEventName(name: "message_dropped", qualifier: reason) : nil
        case .notificationForeground:
            return selection == .messageEvents ? RecordEventName(name: "notification_foreground") : nil
        case .notificationBackground:
            return selection == .messageEvents ? RecordEventName(name: "notification_background") : nil
        case .notificationDismiss:
            return selection == .messageEvents ? RecordEventName(name: "notification_dismiss") : nil
        case .backgroundFetch:
            return selection == .messageEvents ? RecordEventName(name: "background_fetch", qualifier: record.parameter("result")) : nil
        case .tokenRefresh, .topicSubscribe, .topicUnsubscribe, .diagnostic:
            return nil
        }
    }

    private static func equal(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        bytes.count == text.utf8CodeUnitCount && (bytes.isEmpty || memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0)
    }

    /// One line for `record`, as ``line(for:eventName:identity:timestamps:)`` writes it for its event.
    private static func writeLine(
        for record: AnalyticsRecord, eventName: RecordEventName, columns: IdentityColumns, timestamps: inout TimestampCache,
        into lines: LineBatch
    ) {
        func length(_ bytes: UnsafeRawBufferPointer?) -> Int { bytes?.count ?? 0 }
        // Keys, numbers and the timestamp take under 400 bytes; a string grows at most sixfold when escaped.
        let strings =
            length(record.messageID) + length(record.messageType) + length(record.collapseKey) + length(record.topic)
            + length(eventName.qualifier) + length(record.analyticsLabel)
        lines.reserve(400 + columns.count + 6 * strings)
        func string(_ value: UnsafeRawBufferPointer?) {
            if let value { lines.appendJSONString(value) } else { lines.append("null") }
        }
        func integer(_ value: Int64?) {
            if let value { lines.appendDecimal(value) } else { lines.append("null") }
        }
        lines.append(#"{"event_timestamp":""#)
        timestamps.append(milliseconds: record.timestamp, to: lines)
        columns.project.withUnsafeBufferPointer { lines.append($0) }
        string(record.messageID)
        columns.instance.withUnsafeBufferPointer { lines.append($0) }
        string(record.messageType)
        columns.platform.withUnsafeBufferPointer { lines.append($0) }
        string(record.collapseKey)
        lines.append(#","priority":"#)
        integer(record.priority.map { Int64($0.rawValue) })
        lines.append(#","ttl":"#)
        integer(record.ttl)
        lines.append(#","topic":"#)
        if let topic = record.topic {
            lines.append(#""/topics/"#)
            lines.appendEscaped(topic)
            lines.append(UInt8(ascii: "\""))
        } else {
            lines.append("null")
        }
        lines.append(#","bulk_id":null,"event":""#)
        lines.append(eventName.name)
        if let qualifier = eventName.qualifier {
            lines.append(UInt8(ascii: ":"))
            lines.appendEscaped(qualifier)
        }
        lines.append(#"","analytics_label":"#)
        string(record.analyticsLabel)
        lines.append("}\n")
        lines.endLine()
    }

    private static func appendNull(_ bytes: inout [UInt8]) {
        appendStatic("null", to: &bytes)
    }

    /// `value` in decimal, without going through a String.
    static func appendDecimal(_ value: Int64, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // room for 20 digits, filled from the end
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    private static func appendStatic(_ text: StaticString, to bytes: inout [UInt8]) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// The formatted timestamp of the last second seen: the events of a batch mostly share their second, so
    /// `gmtime_r` and the date's digits run once per second, not once per line.
    struct TimestampCache {
        private var second: Int64 = .min
        private var prefix: [UInt8] = []

        mutating func append(milliseconds: Int64, to bytes: inout [UInt8]) {
            let second = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
            if second != self.second {
                self.second = second
                prefix.removeAll(keepingCapacity: true)
                // "YYYY-MM-DD hh:mm:ss." of the second; the milliseconds and " UTC" follow.
                JSONLExport.appendBigQueryTimestamp(milliseconds: second * 1000, to: &prefix)
                prefix.removeLast(7)
            }
            bytes.append(contentsOf: prefix)
            let millis = Int(milliseconds - second * 1000)
            bytes.append(UInt8(ascii: "0") + UInt8(millis / 100))
            bytes.append(UInt8(ascii: "0") + UInt8(millis / 10 % 10))
            bytes.append(UInt8(ascii: "0") + UInt8(millis % 10))
            JSONLExport.appendStatic(" UTC", to: &bytes)
        }

        mutating func append(milliseconds: Int64, to lines: LineBatch) {
            let second = milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000
            if second != self.second {
                var bytes: [UInt8] = []
                append(milliseconds: milliseconds, to: &bytes)  // caches the second's prefix
            }
            prefix.withUnsafeBufferPointer { lines.append($0) }
            let millis = Int(milliseconds - second * 1000)
            lines.append(UInt8(ascii: "0") + UInt8(millis / 100))
            lines.append(UInt8(ascii: "0") + UInt8(millis / 10 % 10))
            lines.append(UInt8(ascii: "0") + UInt8(millis % 10))
            lines.append(" UTC")
        }
    }

    /// `milliseconds` since 1970 as BigQuery writes a TIMESTAMP (`bq extract`, the console):
    /// `2025-03-01 12:00:00.123 UTC`. `bq load` reads it back.
    public static func bigQueryTimestamp(milliseconds: Int64) -> String {
        var bytes: [UInt8] = []
        appendBigQueryTimestamp(milliseconds: milliseconds, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    fileprivate static func appendBigQueryTimestamp(milliseconds: Int64, to bytes: inout [UInt8]) {
        var seconds = time_t(milliseconds >= 0 ? milliseconds / 1000 : (milliseconds - 999) / 1000)
        let millis = Int(milliseconds - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func digits(_ value: Int, _ width: Int) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = max(0, value)
            if rest >= divisor * 10 {  // wider than asked (a year past 9999): all its digits
                bytes.append(contentsOf: String(rest).utf8)
                return
            }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
        digits(Int(parts.tm_year) + 1900, 4)
        bytes.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        bytes.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        bytes.append(UInt8(ascii: " "))
        digits(Int(parts.tm_hour), 2)
        bytes.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        bytes.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        bytes.append(UInt8(ascii: "."))
        digits(millis, 3)
        appendStatic(" UTC", to: &bytes)
    }

    // MARK: Testing

    /// Makes the next writes fail after `bytes` more bytes with `code`: once, or until ``removeWriteFault()``.
    /// For tests.
    func injectWriteFault(afterBytes bytes: Int, code: Int32, once: Bool = false) {
        writer.withLock { $0.file.fault = (bytes, code, once) }
    }

    func removeWriteFault() {
        writer.withLock { $0.file.fault = nil }
    }
}
