import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldJSONLExport

func fileExists(_ path: String) -> Bool {
    FileManager.default.fileExists(atPath: path)
}

func fileSize(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.intValue ?? 0
}

/// The export's files, oldest first: `path.N` … `path.1`, `path` (those that exist).
func exportFiles(_ path: String, kept: Int) -> [String] {
    (stride(from: kept, through: 1, by: -1).map { "\(path).\($0)" } + [path]).filter(fileExists)
}

/// The raw lines of a file, each without its newline; `endsWithNewline` says whether the last byte is one.
func rawLines(_ path: String) -> (lines: [String], endsWithNewline: Bool) {
    guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else { return ([], true) }
    let bytes = [UInt8](data)
    let lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast().map {
        String(decoding: $0, as: UTF8.self)
    }
    return (Array(lines), bytes.last == UInt8(ascii: "\n"))
}

/// The JSON type of a column value, as the test checks it.
enum ColumnType: String {
    case string, integer, null, other
}

func columnType(_ value: JSONValue) -> ColumnType {
    switch value {
    case .string: .string
    case .int: .integer
    case .null: .null
    default: .other
    }
}

/// The types each column may have (BigQuery: TIMESTAMP and STRING are JSON strings, INTEGER JSON integers).
let allowedTypes: [String: Set<ColumnType>] = [
    "event_timestamp": [.string], "project_number": [.integer, .null], "message_id": [.string, .null],
    "instance_id": [.string, .null], "message_type": [.string, .null], "sdk_platform": [.string], "app_name": [.string, .null],
    "collapse_key": [.string, .null], "priority": [.integer, .null], "ttl": [.integer, .null], "topic": [.string, .null],
    "bulk_id": [.null], "event": [.string], "analytics_label": [.string, .null],
]

/// Parses one exported line and checks it against the column list and types; records an issue otherwise.
func parseRow(_ line: String, sourceLocation: SourceLocation = #_sourceLocation) -> JSONObject? {
    guard let value = try? JSONParser.parse(Array(line.utf8)), let row = value.objectValue else {
        Issue.record("not a JSON object: \(line)", sourceLocation: sourceLocation)
        return nil
    }
    #expect(row.keys == JSONLExport.columns, "columns: \(row.keys)", sourceLocation: sourceLocation)
    for key in JSONLExport.columns {
        guard let value = row[key] else { continue }
        #expect(
            allowedTypes[key]?.contains(columnType(value)) == true, "\(key) is \(columnType(value)) in \(line)",
            sourceLocation: sourceLocation)
    }
    if let timestamp = row["event_timestamp"]?.stringValue {
        #expect(isBigQueryTimestamp(timestamp), "event_timestamp \(timestamp)", sourceLocation: sourceLocation)
    }
    return row
}

/// `YYYY-MM-DD HH:MM:SS.mmm UTC`.
func isBigQueryTimestamp(_ text: String) -> Bool {
    let pattern = Array("dddd-dd-dd dd:dd:dd.ddd UTC")
    let characters = Array(text)
    guard characters.count == pattern.count else { return false }
    return zip(characters, pattern).allSatisfy { character, expected in
        expected == "d" ? character.isASCII && character.isNumber : character == expected
    }
}

/// Every row of the export's files, oldest first; checks that every file ends with a whole line and that none
/// is larger than `limit`.
func exportedRows(_ path: String, kept: Int, limit: Int? = nil, sourceLocation: SourceLocation = #_sourceLocation) -> [JSONObject] {
    var rows: [JSONObject] = []
    for file in exportFiles(path, kept: kept) {
        let (lines, whole) = rawLines(file)
        #expect(whole, "\(file) ends in the middle of a line", sourceLocation: sourceLocation)
        if let limit {
            #expect(fileSize(file) <= limit, "\(file) has \(fileSize(file)) bytes, over \(limit)", sourceLocation: sourceLocation)
        }
        rows += lines.compactMap { parseRow($0, sourceLocation: sourceLocation) }
    }
    return rows
}

/// A `notification_receive` event for message `id`, as the bus records one.
func receiveEvent(_ id: String, label: String? = nil) -> AnalyticsEvent {
    AnalyticsEvent(name: .notificationReceive, messageID: id, analyticsLabel: label, priority: .high, messageType: "DATA_MESSAGE")
}

/// Events of every kind with awkward values: every field missing or present, strings that need escaping (quotes,
/// backslashes, control characters, at the start, the end and past eight bytes), non-ASCII text, custom message
/// types, parameters beyond the ones the export reads, extreme numbers, timestamps across seconds and before 1970.
func awkwardEvents() -> [AnalyticsEvent] {
    let awkward = [
        "", "plain", "\"", "\\", "a\"b\\c/d", "\u{0}\u{1}\u{1F}\u{7F}", "line\nbreak\rtab\tbs\u{8}ff\u{C}",
        "éàü ✓ 🎉 日本", "a long value of more than eight bytes with a \" late and a \\ later\n", "/topics/already",
    ]
    var events: [AnalyticsEvent] = []
    var time: Int64 = 1_740_830_400_998
    func add(_ event: AnalyticsEvent) {
        var event = event
        event.id = 7_000 + UInt64(events.count)
        event.timestamp = time
        time += 1
        events.append(event)
    }
    for (index, text) in awkward.enumerated() {
        add(
            AnalyticsEvent(
                name: .notificationReceive, messageID: text, analyticsLabel: awkward[(index + 1) % awkward.count],
                topic: awkward[(index + 2) % awkward.count],
                collapseKey: awkward[(index + 3) % awkward.count], priority: index % 2 == 0 ? .high : .normal,
                messageType: index % 3 == 0 ? "DISPLAY_NOTIFICATION" : "DATA_MESSAGE", ttl: Int64(index * 1_000), receivedAt: Int64(index),
                parameters: ["detail": text, text: "key"]
            ))
        add(AnalyticsEvent(name: .messageDropped, messageID: text, parameters: ["reason": text]))
        add(
            AnalyticsEvent(
                name: .backgroundFetch, messageID: "m\(index)", messageType: "CUSTOM \(text)",
                parameters: ["result": text, "duration_ms": "12"]))
    }
    add(AnalyticsEvent(name: .notificationReceive))  // nothing but the name
    add(AnalyticsEvent(name: .notificationReceive, messageID: "up", priority: .high, messageType: AnalyticsEvent.unifiedPush, ttl: 60))
    add(AnalyticsEvent(name: .messageDelivered, messageID: "up", messageType: AnalyticsEvent.unifiedPush, ttl: 60))
    add(AnalyticsEvent(name: .notificationReceive, messageType: "SOMETHING_ELSE", ttl: .max, receivedAt: .min))
    add(AnalyticsEvent(name: .notificationReceive, messageID: "x", priority: .high, ttl: .min))
    for reason in AnalyticsEvent.DropReason.allCases {
        add(
            AnalyticsEvent(
                name: .messageDropped, messageID: "d-\(reason)", topic: "t", parameters: ["reason": reason.rawValue, "plugin": "p"]))
    }
    add(AnalyticsEvent(name: .messageDropped, messageID: "no reason"))
    add(AnalyticsEvent(name: .backgroundFetch, messageID: "no result"))
    for name in AnalyticsEvent.Name.allCases {
        add(
            AnalyticsEvent(
                name: name, messageID: "every-\(name.rawValue)", analyticsLabel: "l", topic: "weather", collapseKey: "c",
                priority: .normal, messageType: "DATA_MESSAGE", ttl: 0, parameters: ["result": "newData", "reason": "expired"]))
    }
    time = -1_001
    add(AnalyticsEvent(name: .notificationOpen, messageID: "1969"))
    time = 253_402_300_799_999
    add(AnalyticsEvent(name: .notificationDismiss, messageID: "9999"))
    return events
}

/// Answers every display notification with `[.list, .banner]`, so the bus records `notification_foreground`.
final class Presenting: NotificationHandler, MessageHandler, Sendable {
    let received = Locked<[String]>([])
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions { [.list, .banner] }
    func didReceive(_ message: RemoteMessage) async throws {
        received.withLock { $0.append(message.messageID ?? "") }
    }
}

/// Decodes an FCM v1 send body with `herald`'s context and delivers it through `herald.deliver`.
func deliverFCM(_ body: String, to herald: Herald) async throws -> (message: RemoteMessage, outcome: DeliveryOutcome) {
    let message = try FCMSendRequest.decode(Array(body.utf8), context: herald.decodingContext).message
    return (message, await herald.deliver(message))
}

extension JSONObject {
    func string(_ key: String) -> String? { self[key]?.stringValue }
    func integer(_ key: String) -> Int64? {
        guard case .int(let value)? = self[key] else { return nil }
        return value
    }
    func isNull(_ key: String) -> Bool { self[key] == .null }
}
