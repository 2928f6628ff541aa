/// A stored publish as the receiver remembers it: 128 bits of a keyed hash of its stream's name and its publisher's
/// `Nats-Msg-Id`, instead of a string made of both.
///
/// Two SipHash values (Swift's `Hasher`, seeded at random per process) of the same bytes under two different
/// prefixes: a publisher cannot choose IDs that collide, and among the at most 65,536 publishes remembered at once
/// the chance that two different ones share a fingerprint is about 2⁻⁹⁷. Made without an allocation; compared and
/// hashed as two integers.
struct PublishFingerprint: Hashable {
    let first: UInt64
    let second: UInt64

    init(stream: UnsafeRawBufferPointer, publisherID: UnsafeRawBufferPointer) {
        first = Self.hash(0, stream, publisherID)
        second = Self.hash(1, stream, publisherID)
    }

    private static func hash(_ prefix: UInt8, _ stream: UnsafeRawBufferPointer, _ publisherID: UnsafeRawBufferPointer) -> UInt64 {
        var hasher = Hasher()
        hasher.combine(prefix)
        // The stream's length first: ("AB", "C") and ("A", "BC") are two publishes.
        hasher.combine(stream.count)
        hasher.combine(bytes: stream)
        hasher.combine(bytes: publisherID)
        return UInt64(UInt(bitPattern: hasher.finalize()))
    }

    /// Already evenly spread: one of the two halves is enough for the dictionary.
    func hash(into hasher: inout Hasher) {
        hasher.combine(first)
    }
}
