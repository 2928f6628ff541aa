/// Answers that complete out of order but must be written in the order their requests came (pipelining,
/// one answer line per message). Loop thread only.
///
/// Inlinable, so that a session's calls (one or two per message) are specialised for its answer type in the
/// session's module rather than run generically, which costs a metadata look-up per call.
public struct OrderedAnswers<Answer> {
    @usableFromInline var waiting: [Int: Answer] = [:]
    @usableFromInline var nextSequence = 0
    @usableFromInline var nextToWrite = 0

    @inlinable public init() {}

    /// A place in the order for the next request.
    @inlinable public mutating func reserve() -> Int {
        defer { nextSequence += 1 }
        return nextSequence
    }

    /// Fills place `sequence`; returns the answers now ready to write, in order.
    @inlinable public mutating func fill(_ sequence: Int, with answer: Answer) -> [Answer] {
        if sequence == nextToWrite, waiting.isEmpty {
            nextToWrite += 1
            return [answer]
        }
        waiting[sequence] = answer
        var ready: [Answer] = []
        while let next = waiting.removeValue(forKey: nextToWrite) {
            ready.append(next)
            nextToWrite += 1
        }
        return ready
    }

    /// Whether place `sequence` is the next to write: its answer can be written at once (then call
    /// ``written(_:then:)``), with no copy kept here.
    @inlinable public func isNextToWrite(_ sequence: Int) -> Bool { sequence == nextToWrite }

    /// Place `sequence`, the next in order, has been written by the caller; `write` gets the answers that were
    /// waiting for it, in order.
    @inlinable public mutating func written(_ sequence: Int, then write: (Answer) -> Void) {
        precondition(sequence == nextToWrite, "answer \(sequence) written out of order (next is \(nextToWrite))")
        nextToWrite += 1
        while !waiting.isEmpty, let next = waiting.removeValue(forKey: nextToWrite) {
            write(next)
            nextToWrite += 1
        }
    }

    /// Whether every reserved place has been written.
    @inlinable public var allWritten: Bool { nextToWrite == nextSequence }

    /// Forgets answers not yet written (the connection is closing).
    @inlinable public mutating func discardWaiting() { waiting.removeAll() }
}
