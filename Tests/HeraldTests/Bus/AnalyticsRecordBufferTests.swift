import Testing

@testable import Herald

@Suite("AnalyticsRecordBuffer: events written as bytes on the loop, read back off it")
struct AnalyticsRecordBufferTests {
    @Test("events about messages read back exactly as AnalyticsEvent(_:for:parameters:) builds them")
    func aboutMessages() throws {
        let messages = [
            RemoteMessage(
                userInfo: [
                    "gcm.message_id": "0:1700000000000001%31bd1c9631bd1c96", "google.c.a.m_l": "match-alerts",
                    "aps": ["alert": ["title": "Portugal vs. Denmark"]], "n": "1",
                ],
                target: .topic("weather"), collapseKey: "score", priority: .normal, expiration: 1_800_000_000, receivedAt: 1_700_000_000_123
            ),
            RemoteMessage(userInfo: ["aps": ["content-available": 1]], target: .token("t"), receivedAt: 0),
            RemoteMessage(
                userInfo: ["gcm.message_id": "é ✓ \u{0}", "data": "x"], target: .condition("'a' in topics"), expiration: 1,
                receivedAt: 5_000),
        ]
        var buffer = AnalyticsRecordBuffer(reservingEvents: 4)
        var expected: [AnalyticsEvent] = []
        for (index, message) in messages.enumerated() {
            for name in AnalyticsEvent.Name.allCases {
                let parameters = index == 0 ? ["reason": "duplicate", "detail": "seen \(name)", "": "empty key"] : [:]
                let id = UInt64(index * 100) + UInt64(expected.count)
                let timestamp = Int64(-1 + index * 1_000)
                buffer.append(
                    name, for: message, id: id, timestamp: timestamp, parameters: parameters, messageID: message.messageID,
                    kind: message.kind)
                var event = AnalyticsEvent(name, for: message, parameters: parameters)
                event.id = id
                event.timestamp = timestamp
                expected.append(event)
            }
        }
        #expect(buffer.count == expected.count)
        #expect(buffer.events() == expected)
    }

    @Test("built events keep every field, nil or not, and any message type")
    func builtEvents() {
        var full = AnalyticsEvent(
            name: .backgroundFetch, timestamp: Int64.min, messageID: "m", analyticsLabel: "", topic: "t", collapseKey: "c",
            priority: .high, messageType: "SOMETHING_ELSE", ttl: Int64.max, receivedAt: -7,
            parameters: ["result": "newData", "duration_ms": "12"]
        )
        full.id = UInt64.max
        let empty = AnalyticsEvent(name: .tokenRefresh, timestamp: 0)
        var display = AnalyticsEvent(name: .notificationOpen, timestamp: 1, messageType: "DISPLAY_NOTIFICATION")
        display.id = 3
        var buffer = AnalyticsRecordBuffer()
        #expect(buffer.isEmpty && buffer.events().isEmpty)
        for event in [full, empty, display, full] { buffer.append(event) }
        let copy = buffer
        buffer.append(empty)
        #expect(buffer.events() == [full, empty, display, full, empty])
        #expect(copy.events() == [full, empty, display, full], "a copy keeps its own events (copy on write)")
    }
}
