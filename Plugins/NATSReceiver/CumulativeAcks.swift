import CNATS
import HeraldEventLoop

/// The acknowledgements of one durable consumer made with AckPolicy `all` (a stored topic's): an ack acknowledges
/// every message of the consumer up to it, by stream sequence, so one ack covers a whole committed group instead of
/// one ack per message (each of which JetStream takes, records and answers on its own).
///
/// A message may be covered only once every message of the consumer at or below it that JetStream still holds
/// pending was committed (or given up for good). So the tracker keeps:
/// - the stream sequences delivered and not settled yet (offered to the bus, held for collapsing, or handed back
///   for a redelivery, until that redelivery is settled): the ack goes to the highest settled message below the
///   lowest of them;
/// - a barrier while pending messages may exist that the instance never saw: those of a consumer kept from an
///   earlier run (until as many of them as JetStream counted were settled), and those of a delivery that never
///   arrived (a gap in the consumer's delivery sequence: lost with a connection). Nothing past the barrier is
///   acknowledged until JetStream has had the time to deliver everything pending again (twice the ack wait): the
///   settled messages wait meanwhile, and may come again (the inbox recognises them).
///
/// Loop-thread only.
final class CumulativeAcks: @unchecked Sendable {
    // @unchecked Sendable: created off the loop before any delivery, then used on the loop thread only.
    private let ackWait: Duration
    private let redeliveryDelay: Duration
    private let maxDeliver: Int
    /// Delivered, not settled: copies held here (0: handed back, its redelivery awaited, until `deadline`).
    private var outstanding: [UInt64: (copies: Int, deadline: ContinuousClock.Instant?)] = [:]
    /// Settled and not covered by an ack yet: the message, kept to answer on its reply subject, and whether it was
    /// terminated (refused for good) rather than committed.
    private var settled: [UInt64: (message: OpaquePointer, terminated: Bool)] = [:]
    /// The highest stream sequence acknowledged: below it nothing is tracked.
    private(set) var acknowledgedThrough: UInt64 = 0
    /// The last consumer (delivery) sequence seen; `nil` before the first when the consumer's is unknown.
    private var lastDelivery: UInt64?
    /// Nothing past `through` is acknowledged while pending messages may exist that were never seen here: until
    /// `deadline`, or (a consumer kept from an earlier run) once `remaining` of those at or below `below` are settled.
    private var barrier: (through: UInt64, deadline: ContinuousClock.Instant, below: UInt64, remaining: Int, seen: Set<UInt64>)?
    /// Whether an ack is due at the end of this loop turn.
    var isDue = false
    /// The ack scheduled for when the settled messages have waited long enough, if one is.
    var timer: ScheduledTask?
    /// Settled messages waiting for an ack.
    var waiting: Int { settled.count }

    /// Frees a message this no longer needs (herald_nats_message_free; tests track them instead).
    private let destroy: (OpaquePointer) -> Void

    /// A new consumer (`state` all zero), or one kept from an earlier run: its last delivery, and the messages
    /// delivered then that still wait for an ack.
    convenience init(state: herald_nats_consumer_state, ackWait: Duration, redeliveryDelay: Duration, maxDeliver: Int) {
        self.init(
            acknowledgedThrough: state.ackFloorStream, lastDelivery: state.delivered, deliveredThrough: state.deliveredStream,
            unacknowledged: Int(state.pending), ackWait: ackWait, redeliveryDelay: redeliveryDelay, maxDeliver: maxDeliver)
    }

    /// The consumer acknowledged through stream sequence `acknowledgedThrough` and last delivered consumer sequence
    /// `lastDelivery` (stream sequence `deliveredThrough`), with `unacknowledged` messages delivered and not acked.
    init(
        acknowledgedThrough: UInt64, lastDelivery: UInt64, deliveredThrough: UInt64, unacknowledged: Int, ackWait: Duration,
        redeliveryDelay: Duration, maxDeliver: Int, destroy: @escaping (OpaquePointer) -> Void = { herald_nats_message_free($0) }
    ) {
        self.ackWait = ackWait
        self.redeliveryDelay = redeliveryDelay
        self.maxDeliver = maxDeliver
        self.destroy = destroy
        self.acknowledgedThrough = acknowledgedThrough
        self.lastDelivery = lastDelivery
        if unacknowledged > 0 {
            barrier = (acknowledgedThrough, .now + ackWait * 2, deliveredThrough, unacknowledged, [])
        }
    }

    /// A delivery of stream sequence `sequence` (consumer sequence `delivery`) reached the instance. Answers
    /// whether it is tracked (false: it is at or below what was acknowledged, which it may be acked again with).
    func delivered(_ sequence: UInt64, delivery: UInt64) -> Bool {
        if let last = lastDelivery, delivery > last + 1 || delivery <= last {
            // Deliveries that never arrived: their messages are unknown, and pending. (A sequence that goes back is a
            // server that lost some of the consumer's state: as unknown.)
            barrier = (min(barrier?.through ?? .max, frontier(ignoringBarrier: true)), .now + ackWait * 2, 0, 0, [])
        }
        lastDelivery = delivery
        guard sequence > acknowledgedThrough else { return false }
        outstanding[sequence, default: (0, nil)].copies += 1
        outstanding[sequence]?.deadline = nil
        return true
    }

    /// `message` (stream sequence `sequence`) is committed, or given up for good: it may be covered.
    func settle(_ message: OpaquePointer, sequence: UInt64, terminated: Bool) {
        outstanding[sequence] = nil
        if var barrier, sequence <= barrier.below, sequence > acknowledgedThrough, barrier.seen.insert(sequence).inserted {
            barrier.remaining -= 1
            self.barrier = barrier
        }
        if sequence > acknowledgedThrough, settled[sequence] == nil {
            settled[sequence] = (message, terminated)
        } else {
            destroy(message)
        }
    }

    /// A copy of `sequence` handed back for a redelivery (its `deliveries` so far): it holds back the acks until
    /// that redelivery is settled — unless JetStream will not deliver it again (`maxDeliver` reached), or it does
    /// not come within the redelivery delay and twice the ack wait (the stream no longer has it). Answers whether
    /// to ask JetStream for that redelivery (false: the message was settled meanwhile, or will not come again).
    func handBack(_ sequence: UInt64, deliveries: UInt64) -> Bool {
        guard let entry = outstanding[sequence] else { return false }
        if maxDeliver > 0, deliveries >= UInt64(maxDeliver) {
            outstanding[sequence] = nil
            return false
        }
        outstanding[sequence] = (max(0, entry.copies - 1), .now + redeliveryDelay + ackWait * 2)
        return true
    }

    /// The connection came back: deliveries may have been lost with the old one, and those handed back wait longer.
    func reconnected() {
        barrier = (min(barrier?.through ?? .max, frontier(ignoringBarrier: true)), .now + ackWait * 2, 0, 0, [])
        let deadline = ContinuousClock.now + redeliveryDelay + ackWait * 2
        for (sequence, entry) in outstanding where entry.copies == 0 { outstanding[sequence]?.deadline = deadline }
    }

    /// The highest settled stream sequence that may be acknowledged now (0: none).
    private func frontier(ignoringBarrier: Bool = false) -> UInt64 {
        let now = ContinuousClock.now
        for (sequence, entry) in outstanding where entry.copies == 0 {
            if let deadline = entry.deadline, deadline <= now { outstanding[sequence] = nil }
        }
        var limit = (outstanding.keys.min() ?? .max) &- 1
        if !ignoringBarrier, let barrier {
            if barrier.deadline <= now || (barrier.below > 0 && barrier.remaining <= 0) {
                self.barrier = nil
            } else {
                limit = min(limit, barrier.through)
            }
        }
        var best = acknowledgedThrough
        for sequence in settled.keys where sequence <= limit && sequence > best { best = sequence }
        return best
    }

    /// Acknowledges the highest message that may be now (one ack for all below it). Answers how many committed
    /// messages that ack covered here (not counting those terminated).
    /// `send` answers JetStream for the message (natsMsg_Ack publishes `+ACK` on its reply subject, without
    /// waiting for an answer).
    func acknowledge(send: (OpaquePointer) -> Bool = { natsMsg_Ack($0, nil) == NATS_OK }) -> Int {
        isDue = false
        let through = frontier()
        guard through > acknowledgedThrough, let last = settled[through] else { return 0 }
        guard send(last.message) else { return 0 }
        acknowledgedThrough = through
        var covered = 0
        for (sequence, entry) in settled where sequence <= through {
            destroy(entry.message)
            settled[sequence] = nil
            if !entry.terminated { covered += 1 }
        }
        for sequence in outstanding.keys where sequence <= through { outstanding[sequence] = nil }
        return covered
    }

    /// Frees the messages kept (at stop; what they stood for is delivered again).
    func discard() {
        timer?.cancel()
        timer = nil
        for entry in settled.values { destroy(entry.message) }
        settled.removeAll()
        outstanding.removeAll()
    }
}
