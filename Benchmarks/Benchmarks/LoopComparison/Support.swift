// Pieces shared by the Herald and the SwiftNIO side, so that only the loop under test differs.
// This file imports neither Herald nor NIO (their `EventLoop`, `SocketAddress` and `RepeatedTask` clash).

import Dispatch
import Glibc
import Synchronization

/// Something a benchmark sets up once before its iterations and tears down after them.
protocol BenchmarkFixture: AnyObject, Sendable {
    static func make() async throws -> Self
    func tearDown() async throws
    /// The CPU-time clock of the loop's thread (see ``cpuClock(of:)``).
    var loopCPUClock: clockid_t { get }
}

/// Holds the fixture of one benchmark between its setup and teardown hooks (the teardown hook of
/// ordo-one/benchmark gets no setup state).
final class FixtureSlot<Fixture: BenchmarkFixture>: Sendable {
    private let current = Mutex<Fixture?>(nil)

    func setUp() async throws -> Fixture {
        let fixture = try await Fixture.make()
        current.withLock { $0 = fixture }
        return fixture
    }

    func tearDown() async throws {
        if let fixture = current.withLock({ $0.take() }) {
            try await fixture.tearDown()
        }
    }
}

/// Counts closures that run on one loop thread and wakes the benchmark thread once the last has run.
final class Countdown: @unchecked Sendable {
    // @unchecked Sendable: `remaining` is set by `arm` before the work that counts is handed to the loop
    // (the loop's queue lock orders the two), and afterwards only touched by that work, on the loop thread.
    private var remaining = 0
    private let done = DispatchSemaphore(value: 0)

    /// Expects `count` ticks. Call before submitting the work that ticks.
    func arm(_ count: Int) {
        precondition(count > 0)
        remaining = count
    }

    /// One unit of work has run (on the loop thread).
    @inline(__always)
    func tick() {
        remaining -= 1
        if remaining == 0 { done.signal() }
    }

    /// Blocks the benchmark thread until every expected tick has happened.
    func wait() {
        done.wait()
    }
}

struct BenchmarkSetupError: Error, CustomStringConvertible {
    var description: String

    init(_ operation: String, errno code: Int32 = errno) {
        description = "\(operation): \(String(cString: strerror(code)))"
    }
}

/// The CPU-time clock of `thread`. Unlike CLOCK_PROCESS_CPUTIME_ID, which brings other threads' time up to
/// date only at scheduler ticks, a thread's own clock is exact even while that thread runs on another core.
func cpuClock(of thread: pthread_t) throws -> clockid_t {
    var clock = clockid_t()
    let result = pthread_getcpuclockid(thread, &clock)
    guard result == 0 else { throw BenchmarkSetupError("pthread_getcpuclockid", errno: result) }
    return clock
}

/// CPU time used so far on `clock`, in nanoseconds.
@inline(__always)
func cpuNanoseconds(_ clock: clockid_t) -> Int {
    var time = timespec()
    clock_gettime(clock, &time)
    return time.tv_sec * 1_000_000_000 + time.tv_nsec
}

/// A Unix socket path under /tmp that no other run uses; any leftover file is removed.
func freshSocketPath(_ tag: String) -> String {
    let path = "/tmp/herald-bench-\(getpid())-\(tag).sock"
    unlink(path)
    return path
}

/// The client of the echo benchmarks, the same for both servers: a plain blocking POSIX Unix stream socket,
/// used from the benchmark thread. Each round trip sends `messageSize` bytes and reads until they are back.
final class BlockingEchoClient: @unchecked Sendable {
    // @unchecked Sendable: used by one benchmark thread at a time; the buffers are never shared.
    static let messageSize = 64

    private let fd: Int32
    private let message: UnsafeMutableRawBufferPointer
    private let reply: UnsafeMutableRawBufferPointer

    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchmarkSetupError("socket") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        let fits = withUnsafeMutableBytes(of: &address.sun_path) { sunPath -> Bool in
            guard pathBytes.count < sunPath.count else { return false }
            sunPath.copyBytes(from: pathBytes)
            return true
        }
        guard fits else {
            Glibc.close(fd)
            throw BenchmarkSetupError("socket path \(path) is too long", errno: ENAMETOOLONG)
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let code = errno
            Glibc.close(fd)
            throw BenchmarkSetupError("connect to \(path)", errno: code)
        }
        self.fd = fd
        message = .allocate(byteCount: Self.messageSize, alignment: 16)
        for index in message.indices { message[index] = UInt8(truncatingIfNeeded: index &* 7 &+ 1) }
        reply = .allocate(byteCount: Self.messageSize, alignment: 16)
    }

    deinit {
        message.deallocate()
        reply.deallocate()
    }

    /// Sends the message and blocks until all of it has come back.
    @inline(__always)
    func roundTrip() {
        var sent = 0
        while sent < message.count {
            let written = send(fd, message.baseAddress! + sent, message.count - sent, Int32(MSG_NOSIGNAL))
            if written < 0, errno == EINTR { continue }
            precondition(written > 0, "echo client: send failed: \(String(cString: strerror(errno)))")
            sent += written
        }
        var received = 0
        while received < reply.count {
            let read = recv(fd, reply.baseAddress! + received, reply.count - received, 0)
            if read < 0, errno == EINTR { continue }
            precondition(read > 0, "echo client: the server closed or failed: \(String(cString: strerror(errno)))")
            received += read
        }
    }

    /// One round trip whose reply is compared with the message: proves the server echoes.
    func checkedRoundTrip() throws {
        roundTrip()
        guard memcmp(message.baseAddress!, reply.baseAddress!, message.count) == 0 else {
            throw BenchmarkSetupError("echo reply differs from the message", errno: EPROTO)
        }
    }

    func close() {
        Glibc.close(fd)
    }
}
