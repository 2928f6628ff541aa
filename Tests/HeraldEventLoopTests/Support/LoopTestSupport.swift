import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop

/// Collects bytes from any thread and lets a test wait until enough have arrived.
final class ByteCollector: Sendable {
    private struct State {
        var bytes: [UInt8] = []
        var ended = false
        var closeError: UVError?
        var closed = false
        var waiters: [(predicate: @Sendable (State) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = Locked(State())

    var bytes: [UInt8] { state.withLock { $0.bytes } }
    var ended: Bool { state.withLock { $0.ended } }
    var closed: Bool { state.withLock { $0.closed } }
    var closeError: UVError? { state.withLock { $0.closeError } }

    func append(_ buffer: UnsafeRawBufferPointer) {
        update { $0.bytes.append(contentsOf: buffer) }
    }

    func markEnded() { update { $0.ended = true } }

    func markClosed(_ error: UVError?) {
        update {
            $0.closed = true
            $0.closeError = error
        }
    }

    /// Wires `connection` to this collector: reads, end of file and close. Call on the loop thread.
    func attach(to connection: StreamConnection) {
        connection.onRead = { self.append($0) }
        connection.onEnd = { self.markEnded() }
        connection.onClose = { self.markClosed($0) }
        connection.startReading()
    }

    private func update(_ change: (inout State) -> Void) {
        let ready: [CheckedContinuation<Void, Never>] = state.withLock { state in
            change(&state)
            var ready: [CheckedContinuation<Void, Never>] = []
            let snapshot = state
            state.waiters.removeAll { waiter in
                guard waiter.predicate(snapshot) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    private func wait(until predicate: @escaping @Sendable (State) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now: Bool = state.withLock { state in
                if predicate(state) { return true }
                state.waiters.append((predicate, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    func waitForBytes(_ count: Int) async { await wait { $0.bytes.count >= count } }
    func waitForEnd() async { await wait { $0.ended } }
    func waitForClose() async { await wait { $0.closed } }
}

/// Open file descriptors of this process, from /proc/self/fd.
func openFileDescriptorCount() -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
}

/// A fresh path for a Unix socket under the temporary directory (short enough for sun_path).
func temporarySocketPath(_ name: String = "sock") -> String {
    "/tmp/herald-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))-\(name)"
}

/// Fills an array with a repeating, position-dependent pattern so that reordering or loss is detectable.
func patternBytes(count: Int) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 8) }
}
