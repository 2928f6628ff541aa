import CNATS
import Testing

@testable import HeraldNATSReceiver

/// A JetStream delivery's metadata read from its reply subject without allocating, and the stored message's ID
/// written straight into its string: the same as cnats's natsMsg_GetMetaData and the ID's interpolated form.
@Suite("Stored deliveries: reply-subject metadata and message IDs")
struct StoredDeliveryTests {
    private func parse(_ reply: String?) -> (stream: String, delivery: herald_nats_delivery)? {
        var delivery = herald_nats_delivery()
        let parsed =
            reply.map { reply in reply.withCString { herald_nats_delivery_parse($0, &delivery) } }
            ?? herald_nats_delivery_parse(nil, &delivery)
        guard parsed else { return nil }
        // The stream points into the subject: read here as a count of bytes from the subject's start.
        return (String(decoding: UnsafeRawBufferPointer(start: delivery.stream, count: delivery.streamLength), as: UTF8.self), delivery)
    }

    @Test("the reply subject of nats-server before 2.9 (7 tokens after $JS.ACK.)")
    func versionOne() throws {
        let reply = "$JS.ACK.HERALD_DEMO_TOPICS.c1.2.1234.17.1732812345123456789.42"
        var delivery = herald_nats_delivery()
        let stream: String = try reply.withCString { subject in
            #expect(herald_nats_delivery_parse(subject, &delivery))
            let start = try #require(delivery.stream)
            #expect(start - subject == 8)
            return String(decoding: UnsafeRawBufferPointer(start: start, count: delivery.streamLength), as: UTF8.self)
        }
        #expect(stream == "HERALD_DEMO_TOPICS")
        #expect(delivery.delivered == 2)
        #expect(delivery.streamSequence == 1234)
        #expect(delivery.consumerSequence == 17)
        #expect(delivery.timestamp == 1_732_812_345_123_456_789)
        #expect(delivery.pending == 42)
    }

    @Test("the reply subject of nats-server 2.9 and later (domain and account hash first, a random token last)")
    func versionTwo() {
        for reply in [
            "$JS.ACK._.ACCHASH.HERALD_DEMO.c1.1.5.6.1732812345000000000.0.RANDOM",
            "$JS.ACK.hub.ACCHASH.HERALD_DEMO.c1.1.5.6.1732812345000000000.0",
        ] {
            var delivery = herald_nats_delivery()
            let stream: String? = reply.withCString { subject in
                guard herald_nats_delivery_parse(subject, &delivery) else { return nil }
                return String(decoding: UnsafeRawBufferPointer(start: delivery.stream, count: delivery.streamLength), as: UTF8.self)
            }
            #expect(stream == "HERALD_DEMO")
            #expect(delivery.delivered == 1 && delivery.streamSequence == 5 && delivery.consumerSequence == 6)
            #expect(delivery.timestamp == 1_732_812_345_000_000_000 && delivery.pending == 0)
        }
    }

    @Test("subjects that are not a JetStream delivery's reply are refused")
    func refused() {
        for reply in [
            nil, "", "_INBOX.abc", "$JS.ACK.", "$JS.ACK.S.c.1.2.3.4", "$JS.ACK.S.c.1.2.3.4.5.6", "$JS.ACK.S.c.x.2.3.4.5",
            "$JS.ACK..c.1.2.3.4.5", "$JS.ACK.S.c.1..3.4.5", "$JS.ACK.S.c.1.2.3.99999999999999999999.5",
            "$JS.ACK.S.c.1.2.3.4.99999999999999999999999",
        ] {
            #expect(parse(reply) == nil, "\(reply ?? "nil")")
        }
    }

    @Test("the message ID is nats-<stream>-<stream sequence>-<Nats-Msg-Id, else the time stored>")
    func messageID() {
        let cases: [(stream: String, sequence: UInt64, unique: String?, storedAt: Int64)] = [
            ("HERALD_DEMO_TOPICS", 1, nil, 1_732_812_345_123_456_789), ("S", 0, nil, 0), ("S", UInt64.max, nil, Int64.max),
            ("S", 7, nil, -5), ("S", 7, nil, Int64.min), ("HERALD_DEMO", 12_345, "publisher-id-1", 99),
            ("HERALD_DEMO", 9, "", 99), ("HERALD_DEMO", 9, "ünïcode ✓", 99),
        ]
        for item in cases {
            let made = Array(item.stream.utf8).withUnsafeBytes { stream in
                if let unique = item.unique {
                    unique.withCString {
                        NATSReceiver.storedMessageID(stream: stream, sequence: item.sequence, unique: $0, storedAt: item.storedAt)
                    }
                } else {
                    NATSReceiver.storedMessageID(stream: stream, sequence: item.sequence, unique: nil, storedAt: item.storedAt)
                }
            }
            #expect(made == "nats-\(item.stream)-\(item.sequence)-\(item.unique ?? "\(item.storedAt)")")
        }
    }
}
