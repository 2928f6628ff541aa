/// Bytes composed in memory of the writer's own: a buffer it is given (the caller's stack, typically from
/// `withUnsafeTemporaryAllocation`), then the heap once that is full. Each piece costs a bounds check and a copy, where an
/// array's append costs a uniqueness check, a capacity check and a generic copy: for text made of many small pieces
/// (a message's JSON, a log line) the pieces' bytes are the lesser part of that.
///
/// The bytes are valid while the writer lives and the buffer it was given does; read them with ``withBytes(_:)``.
package struct ByteWriter: ~Copyable {
    private var base: UnsafeMutablePointer<UInt8>
    private var capacity: Int
    private var count = 0
    private var onHeap = false

    /// A writer that fills `buffer` first (it need not be initialized).
    package init(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        if let start = buffer.baseAddress, buffer.count > 0 {
            base = start
            capacity = buffer.count
        } else {
            base = UnsafeMutablePointer<UInt8>.allocate(capacity: 64)
            capacity = 64
            onHeap = true
        }
    }

    deinit {
        if onHeap { base.deallocate() }
    }

    /// The number of bytes written.
    package var byteCount: Int { count }

    /// Calls `body` with the bytes written.
    package func withBytes<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        try body(UnsafeBufferPointer(start: base, count: count))
    }

    @inline(__always)
    package mutating func append(_ byte: UInt8) {
        if count == capacity { grow(toHold: 1) }
        base[count] = byte
        count += 1
    }

    @inline(__always)
    package mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        if capacity - count < bytes.count { grow(toHold: bytes.count) }
        (base + count).update(from: source, count: bytes.count)
        count += bytes.count
    }

    /// Makes room for `size` bytes and calls `body` with where they go; `body` writes up to `size` bytes and answers
    /// how many, which are then kept, or answers `nil` to keep none. Answers whether it kept them.
    @inline(__always)
    package mutating func write(upTo size: Int, _ body: (UnsafeMutablePointer<UInt8>) -> Int?) -> Bool {
        if capacity - count < size { grow(toHold: size) }
        guard let written = body(base + count) else { return false }
        precondition(written <= size, "wrote past the room asked for")
        count += written
        return true
    }

    @inline(__always)
    package mutating func append(_ literal: StaticString) {
        literal.withUTF8Buffer { append($0) }
    }

    /// Appends `text`'s UTF-8 bytes: a native string's where they are, a copy (made contiguous) of one that has none.
    package mutating func append(_ text: String) {
        if text.utf8.withContiguousStorageIfAvailable({ append($0) }) == nil {
            var text = text
            text.withUTF8 { append($0) }
        }
    }

    @inline(never)
    private mutating func grow(toHold needed: Int) {
        let newCapacity = max(capacity * 2, count + needed)
        let new = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        new.initialize(from: base, count: count)
        if onHeap { base.deallocate() }
        base = new
        capacity = newCapacity
        onHeap = true
    }
}
