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
        _ name: AnalyticsEvent.Name, for message: RemoteMessage, id: UInt64, timestamp: Int64, parameters: [String: String],
        messageID: String?, kind: MessageKind
    ) {
        let ttl = message.expiration.map { max(0, $0 - message.receivedAt / 1000) }
        let strings = (messageID, message.analyticsLabel, message.topic, message.collapseKey)
        write(name, id: id, timestamp: timestamp, receivedAt: message.receivedAt, ttl: ttl, priority: message.priority,
              messageType: kind.contains(.display) ? 1 : 2, strings: strings, customType: nil, parameters: parameters)
    }

    /// Appends a built event.
    mutating func append(_ event: AnalyticsEvent) {
        let type: UInt8 = switch event.messageType {
        case nil: 0
        case "DISPLAY_NOTIFICATION": 1
        case "DATA_MESSAGE": 2
        default: 3
        }
        write(event.name, id: event.id, timestamp: event.timestamp, receivedAt: event.receivedAt, ttl: event.ttl, priority: event.priority,
              messageType: type, strings: (event.messageID, event.analyticsLabel, event.topic, event.collapseKey),
              customType: type == 3 ? event.messageType : nil, parameters: event.parameters)
    }

    private mutating func write(
        _ name: AnalyticsEvent.Name, id: UInt64, timestamp: Int64, receivedAt: Int64?, ttl: Int64?, priority: MessagePriority?,
        messageType: UInt8, strings: (String?, String?, String?, String?), customType: String?, parameters: [String: String]
    ) {
        var size = 4 + 16 + (receivedAt == nil ? 0 : 8) + (ttl == nil ? 0 : 8) + 4
        size += Self.size(strings.0) + Self.size(strings.1) + Self.size(strings.2) + Self.size(strings.3)
        if messageType == 3 { size += Self.size(customType) }
        for (key, value) in parameters { size += Self.size(key) + Self.size(value) }
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
        writer.length(parameters.count)
        for (key, value) in parameters {
            writer.string(key)
            writer.string(value)
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
        var reader = Reader(raw: UnsafeRawBufferPointer(start: storage.base, count: storage.used))
        for _ in 0..<count { events.append(reader.event()) }
        withExtendedLifetime(storage) {}
        return events
    }

    private struct Reader {
        let raw: UnsafeRawBufferPointer
        var offset = 0

        mutating func event() -> AnalyticsEvent {
            let name = AnalyticsEvent.Name(code: byte())
            let present = byte()
            let priority = MessagePriority(rawValue: Int(byte()))
            let type = byte()
            let id = integer()
            let timestamp = Int64(bitPattern: integer())
            let receivedAt = present & 1 != 0 ? Int64(bitPattern: integer()) : nil
            let ttl = present & 2 != 0 ? Int64(bitPattern: integer()) : nil
            let messageID = string()
            let label = string()
            let topic = string()
            let collapseKey = string()
            let messageType: String? = switch type {
            case 1: "DISPLAY_NOTIFICATION"
            case 2: "DATA_MESSAGE"
            case 3: string()
            default: nil
            }
            var parameters: [String: String] = [:]
            let parameterCount = length()
            if parameterCount > 0 {
                parameters.reserveCapacity(parameterCount)
                for _ in 0..<parameterCount {
                    let key = string() ?? ""
                    parameters[key] = string() ?? ""
                }
            }
            var event = AnalyticsEvent(
                name: name, timestamp: timestamp, messageID: messageID, analyticsLabel: label, topic: topic, collapseKey: collapseKey,
                priority: priority, messageType: messageType, ttl: ttl, receivedAt: receivedAt, parameters: parameters
            )
            event.id = id
            return event
        }

        private mutating func byte() -> UInt8 {
            defer { offset += 1 }
            return raw[offset]
        }

        private mutating func integer() -> UInt64 {
            defer { offset += 8 }
            return UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }

        private mutating func length() -> Int {
            defer { offset += 4 }
            return Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
        }

        private mutating func string() -> String? {
            let count = length()
            guard count != Int(UInt32.max) else { return nil }
            defer { offset += count }
            return String(decoding: UnsafeRawBufferPointer(rebasing: raw[offset..<offset + count]), as: UTF8.self)
        }
    }
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
        }
    }

    fileprivate init(code: UInt8) {
        self = switch code {
        case 0: .notificationReceive
        case 1: .notificationForeground
        case 2: .notificationOpen
        case 3: .notificationDismiss
        case 4: .backgroundFetch
        case 5: .tokenRefresh
        case 6: .topicSubscribe
        case 7: .topicUnsubscribe
        case 8: .messageDropped
        default: .diagnostic
        }
    }
}
