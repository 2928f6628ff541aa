import Testing

@testable import HeraldNATSReceiver

/// The rules of one ack per committed group (AckPolicy `all`), without a server: messages stand for themselves
/// (pointer n is stream sequence n), and the ack that would be sent is recorded.
@Suite("CumulativeAcks: an ack covers only what was committed, whatever the order, the redeliveries and the gaps")
struct CumulativeAcksTests {
    final class Recorder: @unchecked Sendable {
        var sent: [UInt64] = []
        var freed: [UInt64] = []
    }

    static func message(_ sequence: UInt64) -> OpaquePointer { OpaquePointer(bitPattern: UInt(sequence))! }

    static func make(
        _ recorder: Recorder, acknowledgedThrough: UInt64 = 0, lastDelivery: UInt64 = 0, deliveredThrough: UInt64 = 0,
        unacknowledged: Int = 0, ackWait: Duration = .seconds(30), maxDeliver: Int = -1
    ) -> CumulativeAcks {
        CumulativeAcks(
            acknowledgedThrough: acknowledgedThrough, lastDelivery: lastDelivery, deliveredThrough: deliveredThrough,
            unacknowledged: unacknowledged, ackWait: ackWait, redeliveryDelay: .milliseconds(100), maxDeliver: maxDeliver
        ) { recorder.freed.append(UInt64(UInt(bitPattern: $0))) }
    }

    /// Acknowledges what may be; answers the stream sequence acked, if any.
    static func ack(_ acks: CumulativeAcks, _ recorder: Recorder) -> UInt64? {
        let before = recorder.sent.count
        _ = acks.acknowledge { message in
            recorder.sent.append(UInt64(UInt(bitPattern: message)))
            return true
        }
        return recorder.sent.count > before ? recorder.sent.last : nil
    }

    @Test("a group committed in order: one ack, for its last message, which covers all")
    func inOrder() {
        let recorder = Recorder()
        let acks = Self.make(recorder)
        for n: UInt64 in 1...5 { #expect(acks.delivered(n, delivery: n)) }
        for n: UInt64 in 1...5 { acks.settle(Self.message(n), sequence: n, terminated: false) }
        #expect(acks.acknowledge { _ in true } == 5)
        #expect(acks.acknowledgedThrough == 5)
        #expect(recorder.freed.sorted() == [1, 2, 3, 4, 5])
        // A copy of one of them delivered again before the ack reached the server: nothing to answer.
        #expect(!acks.delivered(3, delivery: 6))
    }

    @Test("committed out of order: nothing past a message not committed yet")
    func outOfOrder() {
        let recorder = Recorder()
        let acks = Self.make(recorder)
        for n: UInt64 in 1...3 { _ = acks.delivered(n, delivery: n) }
        acks.settle(Self.message(2), sequence: 2, terminated: false)
        acks.settle(Self.message(3), sequence: 3, terminated: false)
        #expect(Self.ack(acks, recorder) == nil)
        acks.settle(Self.message(1), sequence: 1, terminated: false)
        #expect(Self.ack(acks, recorder) == 3)
    }

    @Test("a message handed back (bus full) holds back the acks of those after it until its redelivery is committed")
    func handedBack() {
        let recorder = Recorder()
        let acks = Self.make(recorder)
        for n: UInt64 in 1...4 { _ = acks.delivered(n, delivery: n) }
        acks.settle(Self.message(1), sequence: 1, terminated: false)
        #expect(acks.handBack(2, deliveries: 1))
        acks.settle(Self.message(3), sequence: 3, terminated: false)
        acks.settle(Self.message(4), sequence: 4, terminated: true)
        #expect(Self.ack(acks, recorder) == 1)
        // Its redelivery (a new delivery sequence, the same stream sequence), committed: all covered.
        #expect(acks.delivered(2, delivery: 5))
        acks.settle(Self.message(2), sequence: 2, terminated: false)
        #expect(acks.acknowledge { _ in true } == 2)  // 2 and 3; 4 was terminated
        #expect(acks.acknowledgedThrough == 4)
    }

    @Test("a message JetStream will not deliver again (max deliveries reached) holds back nothing")
    func maxDeliver() {
        let recorder = Recorder()
        let acks = Self.make(recorder, maxDeliver: 2)
        for n: UInt64 in 1...2 { _ = acks.delivered(n, delivery: n) }
        #expect(!acks.handBack(1, deliveries: 2))
        acks.settle(Self.message(2), sequence: 2, terminated: false)
        #expect(Self.ack(acks, recorder) == 2)
    }

    @Test(
        "a gap in the delivery sequence (a delivery lost with a connection): nothing past what was settled before it, for twice the ack wait"
    )
    func gap() {
        let recorder = Recorder()
        let acks = Self.make(recorder)
        for n: UInt64 in 1...2 { _ = acks.delivered(n, delivery: n) }
        for n: UInt64 in 1...2 { acks.settle(Self.message(n), sequence: n, terminated: false) }
        // Delivery 3 (stream sequence 3, or a redelivery of anything pending) never arrived.
        _ = acks.delivered(4, delivery: 4)
        acks.settle(Self.message(4), sequence: 4, terminated: false)
        #expect(Self.ack(acks, recorder) == 2)
        #expect(Self.ack(acks, recorder) == nil)
        // Its redelivery comes within the ack wait, and is committed; the barrier still holds until it has passed.
        _ = acks.delivered(3, delivery: 5)
        acks.settle(Self.message(3), sequence: 3, terminated: false)
        #expect(Self.ack(acks, recorder) == nil)

        // With no ack wait, the barrier is over at once.
        let quick = Self.make(recorder, ackWait: .zero)
        _ = quick.delivered(1, delivery: 1)
        _ = quick.delivered(3, delivery: 3)
        quick.settle(Self.message(3), sequence: 3, terminated: false)
        // Delivery 1 (stream sequence 1) is not settled: it still holds the ack back.
        #expect(Self.ack(quick, recorder) == nil)
        quick.settle(Self.message(1), sequence: 1, terminated: false)
        #expect(Self.ack(quick, recorder) == 3)
    }

    @Test("a consumer kept from an earlier run with messages unacknowledged: no ack until as many of those are settled")
    func keptWithPending() {
        let recorder = Recorder()
        // Acked through 10; delivered through 12 (delivery 7); 2 of them (11 and 12) wait for an ack.
        let acks = Self.make(recorder, acknowledgedThrough: 10, lastDelivery: 7, deliveredThrough: 12, unacknowledged: 2)
        _ = acks.delivered(13, delivery: 8)
        acks.settle(Self.message(13), sequence: 13, terminated: false)
        #expect(Self.ack(acks, recorder) == nil)
        // The two are delivered again (the inbox recognises them); once both are settled, all are covered.
        _ = acks.delivered(11, delivery: 9)
        acks.settle(Self.message(11), sequence: 11, terminated: false)
        #expect(Self.ack(acks, recorder) == nil)
        _ = acks.delivered(12, delivery: 10)
        acks.settle(Self.message(12), sequence: 12, terminated: false)
        #expect(Self.ack(acks, recorder) == 13)
    }

    @Test("a reconnect may have lost deliveries: acks wait as after a gap")
    func reconnect() {
        let recorder = Recorder()
        let acks = Self.make(recorder)
        _ = acks.delivered(1, delivery: 1)
        acks.settle(Self.message(1), sequence: 1, terminated: false)
        acks.reconnected()
        _ = acks.delivered(2, delivery: 2)
        acks.settle(Self.message(2), sequence: 2, terminated: false)
        #expect(Self.ack(acks, recorder) == 1)
    }
}
