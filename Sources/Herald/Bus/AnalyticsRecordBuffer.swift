/// A batch of analytics events as the loop records them: each event's values written one after another into a
/// single byte buffer, decoded into ``AnalyticsEvent`` values off the loop by the first sink task that needs them.
///
/// Why bytes and not events or messages: whatever the loop hands to another thread costs it cache-line transfers
/// for as long as both touch it (reference counts of shared strings and dictionaries, memory freed by the other
/// thread's allocator). A buffer written once by the loop and read once by a sink shares nothing else: the loop
/// copies a few short strings per event and never sees the buffer again.
struct AnalyticsRecordBuffer: Sendable {
    private var storage: Storage
    private(set) var count = 0

    init(reservingEvents events: Int = 0) {
        storage = Storage(capacity: max(256, events * 96))
    }

    var isEmpty: Bool { count == 0 }

    // MARK: Writing (the loop)

    /// Appends an event about `message` with what ``AnalyticsEvent/init(_:for:parameters:)`` gives it; `messageID`
    /// and `kind` are the message's.
    mutating func append(
        _ name: AnalyticsEvent.Name, for message: RemoteMessage, id: UInt64, timestamp: Int64, parameters: [String: String]?,
        messageID: String?, kind: MessageKind
    ) {
        let ttl = message.expiration.map { max(0, $0 - message.receivedAt / 1000) }
        let strings = (messageID, message.analyticsLabel, message.topic, message.collapseKey)
        write(
            name, id: id, timestamp: timestamp, receivedAt: message.receivedAt, ttl: ttl, priority: message.priority,
            messageType: kind.contains(.display) ? 1 : 2, strings: strings, customType: nil, parameters: parameters)
    }

    /// Appends a built event.
    mutating func append(_ event: AnalyticsEvent) {
        let type: UInt8 =
            switch event.messageType {
            case nil: 0
            case "DISPLAY_NOTIFICATION": 1
            case "DATA_MESSAGE": 2
            default: 3
            }
        write(
            event.name, id: event.id, timestamp: event.timestamp, receivedAt: event.receivedAt, ttl: event.ttl, priority: event.priority,
            messageType: type, strings: (event.messageID, event.analyticsLabel, event.topic, event.collapseKey),
            customType: type == 3 ? event.messageType : nil, parameters: event.parameters)
    }

    private mutating func write(
        _ name: AnalyticsEvent.Name, id: UInt64, timestamp: Int64, receivedAt: Int64?, ttl: Int64?, priority: MessagePriority?,
        messageType: UInt8, strings: (String?, String?, String?, String?), customType: String?, parameters: [String: String]?
    ) {
        var size = 4 + 16 + (receivedAt == nil ? 0 : 8) + (ttl == nil ? 0 : 8) + 4
        size += Self.size(strings.0) + Self.size(strings.1) + Self.size(strings.2) + Self.size(strings.3)
        if messageType == 3 { size += Self.size(customType) }
        if let parameters, !parameters.isEmpty {
            for (key, value) in parameters { size += Self.size(key) + Self.size(value) }
        }
        if !isKnownUniquelyReferenced(&storage) { storage = storage.copy() }
        var writer = Writer(base: storage.reserve(size))
        writer.byte(name.code)
        writer.byte((receivedAt == nil ? 0 : 1) | (ttl == nil ? 0 : 2))
        writer.byte(priority.map { UInt8($0.rawValue) } ?? 0)
        writer.byte(messageType)
        writer.integer(id)
        writer.integer(UInt64(bitPattern: timestamp))
        if let receivedAt { writer.integer(UInt64(bitPattern: receivedAt)) }
        if let ttl { writer.integer(UInt64(bitPattern: ttl)) }
        writer.string(strings.0)
        writer.string(strings.1)
        writer.string(strings.2)
        writer.string(strings.3)
        if messageType == 3 { writer.string(customType) }
        if let parameters, !parameters.isEmpty {
            writer.length(parameters.count)
            for (key, value) in parameters {
                writer.string(key)
                writer.string(value)
            }
        } else {
            writer.length(0)
        }
        count += 1
    }

    private static func size(_ string: String?) -> Int { 4 + (string?.utf8.count ?? 0) }

    private struct Writer {
        var base: UnsafeMutableRawPointer

        mutating func byte(_ value: UInt8) {
            base.storeBytes(of: value, as: UInt8.self)
            base += 1
        }

        mutating func integer(_ value: UInt64) {
            base.storeBytes(of: value.littleEndian, as: UInt64.self)
            base += 8
        }

        mutating func length(_ value: Int) {
            base.storeBytes(of: UInt32(truncatingIfNeeded: value).littleEndian, as: UInt32.self)
            base += 4
        }

        mutating func string(_ value: String?) {
            guard let value else {
                length(Int(UInt32.max))
                return
            }
            let utf8 = value.utf8
            let count = utf8.count
            length(count)
            let copied: Bool? = utf8.withContiguousStorageIfAvailable { bytes in
                if let source = bytes.baseAddress { base.copyMemory(from: source, byteCount: count) }
                return true
            }
            if copied == nil {
                var offset = 0
                for byte in utf8 {
                    base.storeBytes(of: byte, toByteOffset: offset, as: UInt8.self)
                    offset += 1
                }
            }
            base += count
        }
    }

    /// The bytes, grown by doubling; freed when the last buffer value referring to them goes (in a sink task).
    private final class Storage: @unchecked Sendable {
        // @unchecked Sendable: written by the loop only while it holds the only reference (the buffer is copied on
        // write), then only read.
        private(set) var base: UnsafeMutableRawPointer
        private var capacity: Int
        private(set) var used = 0

        init(capacity: Int) {
            self.capacity = capacity
            base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        }

        deinit { base.deallocate() }

        /// Room for `size` more bytes: where to write them.
        func reserve(_ size: Int) -> UnsafeMutableRawPointer {
            if used + size > capacity {
                var grown = capacity * 2
                while used + size > grown { grown *= 2 }
                let moved = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 8)
                moved.copyMemory(from: base, byteCount: used)
                base.deallocate()
                base = moved
                capacity = grown
            }
            defer { used += size }
            return base + used
        }

        func copy() -> Storage {
            let copy = Storage(capacity: capacity)
            copy.base.copyMemory(from: base, byteCount: used)
            copy.used = used
            return copy
        }
    }

    // MARK: Reading (a sink task)

    /// The events, in the order they were appended.
    func events() -> [AnalyticsEvent] {
        var events: [AnalyticsEvent] = []
        events.reserveCapacity(count)
        forEach(upTo: count) { events.append($0.event()) }
        return events
    }

    /// Calls `body` with each of the first `limit` records, in order, as views of the bytes (valid during the call).
    func forEach<E: Error>(upTo limit: Int, _ body: (AnalyticsRecord) throws(E) -> Void) throws(E) {
        var offset = 0
        let base = UnsafeRawPointer(storage.base)
        for _ in 0..<Swift.min(limit, count) {
            let record = AnalyticsRecord(base, at: &offset)
            try body(record)
        }
        withExtendedLifetime(storage) {}
    }
}

/// One recorded event as a view of its bytes in a batch (``AnalyticsRecords``): what ``AnalyticsEvent`` holds,
/// with its strings as the UTF-8 bytes they were recorded as, so a sink that reads them builds no values per event.
/// ``event()`` builds the event. Valid only inside the `forEach` call that passed it: its pointers are into the
/// batch's buffer, which the record does not keep alive.
package struct AnalyticsRecord {
    /// How the message type was recorded.
    package enum MessageType: Equatable {
        case none
        case display
        case data
        /// Another value: ``AnalyticsRecord/messageType`` has its bytes.
        case other
    }

    package let name: AnalyticsEvent.Name
    package let id: UInt64
    package let timestamp: Int64
    package let receivedAt: Int64?
    package let ttl: Int64?
    package let priority: MessagePriority?
    package let messageTypeKind: MessageType
    package let messageID: UnsafeRawBufferPointer?
    package let analyticsLabel: UnsafeRawBufferPointer?
    package let topic: UnsafeRawBufferPointer?
    package let collapseKey: UnsafeRawBufferPointer?
    /// `DISPLAY_NOTIFICATION`, `DATA_MESSAGE`, another type's bytes, or `nil`.
    package let messageType: UnsafeRawBufferPointer?
    private let parameterBytes: UnsafeRawPointer
    package let parameterCount: Int

    /// Reads the record at `offset` of `base` and moves `offset` past it.
    fileprivate init(_ base: UnsafeRawPointer, at offset: inout Int) {
        var reader = Reader(base: base + offset)
        name = AnalyticsEvent.Name(code: reader.byte())
        let present = reader.byte()
        priority = MessagePriority(rawValue: Int(reader.byte()))
        let type = reader.byte()
        id = reader.integer()
        timestamp = Int64(bitPattern: reader.integer())
        receivedAt = present & 1 != 0 ? Int64(bitPattern: reader.integer()) : nil
        ttl = present & 2 != 0 ? Int64(bitPattern: reader.integer()) : nil
        messageID = reader.string()
        analyticsLabel = reader.string()
        topic = reader.string()
        collapseKey = reader.string()
        switch type {
        case 1:
            messageTypeKind = .display
            messageType = Self.bytes(of: "DISPLAY_NOTIFICATION")
        case 2:
            messageTypeKind = .data
            messageType = Self.bytes(of: "DATA_MESSAGE")
        case 3:
            messageTypeKind = .other
            messageType = reader.string()
        default:
            messageTypeKind = .none
            messageType = nil
        }
        parameterCount = reader.length()
        parameterBytes = reader.base
        for _ in 0..<parameterCount {
            _ = reader.string()
            _ = reader.string()
        }
        offset = reader.base - base
    }

    private static func bytes(of text: StaticString) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
    }

    /// The value of parameter `key`, or `nil`.
    package func parameter(_ key: StaticString) -> UnsafeRawBufferPointer? {
        var reader = Reader(base: parameterBytes)
        let wanted = Self.bytes(of: key)
        for _ in 0..<parameterCount {
            let name = reader.string()
            let value = reader.string()
            if let name, name.elementsEqual(wanted) { return value }
        }
        return nil
    }

    /// Calls `body` with each parameter's key and value.
    package func forEachParameter(_ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer) -> Void) {
        var reader = Reader(base: parameterBytes)
        for _ in 0..<parameterCount {
            let key = reader.string() ?? UnsafeRawBufferPointer(start: nil, count: 0)
            let value = reader.string() ?? UnsafeRawBufferPointer(start: nil, count: 0)
            body(key, value)
        }
    }

    /// The event this record holds.
    package func event() -> AnalyticsEvent {
        func string(_ bytes: UnsafeRawBufferPointer?) -> String? {
            bytes.map { String(decoding: $0, as: UTF8.self) }
        }
        var parameters: [String: String] = [:]
        if parameterCount > 0 {
            parameters.reserveCapacity(parameterCount)
            forEachParameter { key, value in
                parameters[String(decoding: key, as: UTF8.self)] = String(decoding: value, as: UTF8.self)
            }
        }
        let type: String? =
            switch messageTypeKind {
            case .display: "DISPLAY_NOTIFICATION"
            case .data: "DATA_MESSAGE"
            case .other: string(messageType)
            case .none: nil
            }
        var event = AnalyticsEvent(
            name: name, timestamp: timestamp, messageID: string(messageID), analyticsLabel: string(analyticsLabel), topic: string(topic),
            collapseKey: string(collapseKey), priority: priority, messageType: type, ttl: ttl, receivedAt: receivedAt,
            parameters: parameters
        )
        event.id = id
        return event
    }

    private struct Reader {
        var base: UnsafeRawPointer

        mutating func byte() -> UInt8 {
            defer { base += 1 }
            return base.load(as: UInt8.self)
        }

        mutating func integer() -> UInt64 {
            defer { base += 8 }
            return UInt64(littleEndian: base.loadUnaligned(as: UInt64.self))
        }

        mutating func length() -> Int {
            defer { base += 4 }
            return Int(UInt32(littleEndian: base.loadUnaligned(as: UInt32.self)))
        }

        mutating func string() -> UnsafeRawBufferPointer? {
            let count = length()
            guard count != Int(UInt32.max) else { return nil }
            defer { base += count }
            return UnsafeRawBufferPointer(start: base, count: count)
        }
    }
}

/// The events of one batch a sink takes, as recorded (one or more record buffers, each cut to the events the sink's
/// queue had room for): what a first-party sink that adopts ``AnalyticsRecordSink`` reads instead of
/// ``AnalyticsEvent`` values, so that it builds nothing per event.
package struct AnalyticsRecords: Sendable {
    struct Part: Sendable {
        let buffer: AnalyticsRecordBuffer
        let count: Int
    }

    private let parts: [Part]
    /// How many events.
    package let count: Int

    init(parts: [Part]) {
        self.parts = parts
        count = parts.reduce(0) { $0 + $1.count }
    }

    /// `events` recorded as the bus records them (their IDs kept): for tests and for sinks that are handed events.
    package init(_ events: [AnalyticsEvent]) {
        var buffer = AnalyticsRecordBuffer(reservingEvents: events.count)
        for event in events { buffer.append(event) }
        self.init(parts: [Part(buffer: buffer, count: buffer.count)])
    }

    /// Calls `body` with each record, in order.
    package func forEach<E: Error>(_ body: (AnalyticsRecord) throws(E) -> Void) throws(E) {
        for part in parts { try part.buffer.forEach(upTo: part.count, body) }
    }

    /// The events, built from the records.
    package func events() -> [AnalyticsEvent] {
        var events: [AnalyticsEvent] = []
        events.reserveCapacity(count)
        forEach { events.append($0.event()) }
        return events
    }

    /// The IDs of the first and the last event (0 when there are none): with ``count``, which batch this is, so
    /// a sink can recognize a batch handed to it again after it threw (IDs are unique within a run).
    package var idRange: (first: UInt64, last: UInt64) {
        var first: UInt64?
        var last: UInt64 = 0
        forEach { record in
            if first == nil { first = record.id }
            last = record.id
        }
        return (first ?? 0, last)
    }
}

/// An ``AnalyticsSink`` that reads the recorded bytes of a batch (``AnalyticsRecords``) instead of being handed
/// ``AnalyticsEvent`` values: the pipeline calls ``record(_:)-(AnalyticsRecords)`` on it, and builds events only
/// for the sinks that need them. For first-party sinks (JSON lines, Prometheus), whose cost per event matters on a
/// busy instance.
package protocol AnalyticsRecordSink: AnalyticsSink {
    /// Records a batch. A thrown error is counted and the batch retried later, as with `record(_ events:)`.
    func record(_ records: AnalyticsRecords) async throws
}

extension AnalyticsEvent.Name {
    /// A byte for the record buffer.
    fileprivate var code: UInt8 {
        switch self {
        case .notificationReceive: 0
        case .notificationForeground: 1
        case .notificationOpen: 2
        case .notificationDismiss: 3
        case .backgroundFetch: 4
        case .tokenRefresh: 5
        case .topicSubscribe: 6
        case .topicUnsubscribe: 7
        case .messageDropped: 8
        case .diagnostic: 9
        case .notificationBackground: 10
        case .messageDelivered: 11
        }
    }

    fileprivate init(code: UInt8) {
        self =
            switch code {
            case 0: .notificationReceive
            case 1: .notificationForeground
            case 2: .notificationOpen
            case 3: .notificationDismiss
            case 4: .backgroundFetch
            case 5: .tokenRefresh
            case 6: .topicSubscribe
            case 7: .topicUnsubscribe
            case 8: .messageDropped
            case 10: .notificationBackground
            case 11: .messageDelivered
            default: .diagnostic
            }
    }
}
