import Foundation
import Glibc
import HeraldEventLoop
import HeraldTesting

/// A relay between one client and a private bus that can hold back what the bus sends the client: the test
/// decides when the client reads answers and signals the bus has already sent, and so sets up an order of events
/// (a service taking its name between two of the client's calls) that timing alone gives only now and then.
///
/// It relays bytes (no file descriptors: the presenter sends none); the bus sees the relay's credentials, which are
/// the test's, as the client's would be.
final class BusRelay: @unchecked Sendable {
    // @unchecked Sendable: the relay's thread and the test share `state`, behind `lock`; the sockets are the thread's.

    /// The address the client connects to.
    let address: String
    private let path: String
    private let busPath: String
    private let listener: Int32
    // An NSLock, not `Synchronization.Mutex`: Thread Sanitizer sees a pthread mutex, not the futex-based `Mutex`.
    private let lock = NSLock()
    private var state = State()
    private let finished = DispatchSemaphore(value: 0)

    private struct State {
        /// Once the client has sent these bytes, what the bus sends is held.
        var trigger: [UInt8]?
        var fromClient: [UInt8] = []
        var holding = false
        var held: [UInt8] = []
        var release = false
        var stop = false
    }

    private func withState<R>(_ body: (inout State) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&state)
    }

    /// Listens in `directory` for a client of the bus at `busAddress` (`unix:path=...`).
    init(busAddress: String, directory: String) throws {
        guard busAddress.hasPrefix("unix:path=") else { throw RelayError("not a unix:path= address: \(busAddress)") }
        busPath = String(busAddress.dropFirst("unix:path=".count))
        path = "\(directory)/relay"
        address = "unix:path=\(path)"
        listener = try Self.listen(path)
        let thread = Thread { [self] in
            relay()
            finished.signal()
        }
        thread.start()
    }

    /// From the moment the client has sent `text` (a method's name, say), what the bus sends it is held until
    /// ``release()``.
    func hold(afterTheClientSends text: String) {
        withState { $0.trigger = Array(text.utf8) }
    }

    /// Whether what is held contains `text` (an error's name, a signal's member).
    func holds(_ text: String) -> Bool {
        withState { Self.find(Array(text.utf8), in: $0.held) }
    }

    /// Sends the client what was held, and everything after as it comes.
    func release() {
        withState { $0.release = true }
    }

    func stop() {
        let first = withState { state in
            defer { state.stop = true }
            return !state.stop
        }
        guard first else { return }
        finished.wait()
        close(listener)
        unlink(path)
    }

    private func relay() {
        guard let client = accept(until: { withState { $0.stop } }) else { return }
        defer { close(client) }
        // Closed when the relay returns (the client's deinit).
        guard let busSide = try? TestSocketClient(.unix(path: busPath)) else { return }
        let bus = busSide.fd
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: bus, events: Int16(POLLIN), revents: 0)]
            // A bounded wait, so that a release or a stop is seen while neither side sends.
            _ = poll(&fds, 2, 10)
            let (stop, flush) = withState { state -> (Bool, [UInt8]) in
                guard state.release, state.holding else { return (state.stop, []) }
                state.holding = false
                state.trigger = nil
                defer { state.held = [] }
                return (state.stop, state.held)
            }
            if stop || !Self.write(flush, to: client) { return }
            if fds[0].revents != 0 {
                let count = read(client, &buffer, buffer.count)
                if count <= 0 { return }
                let bytes = Array(buffer[..<count])
                withState { state in
                    guard let trigger = state.trigger, !state.holding, !state.release else { return }
                    state.fromClient += bytes
                    if Self.find(trigger, in: state.fromClient) { state.holding = true }
                }
                if !Self.write(bytes, to: bus) { return }
            }
            if fds[1].revents != 0 {
                let count = read(bus, &buffer, buffer.count)
                if count <= 0 { return }
                let bytes = Array(buffer[..<count])
                let held = withState { state -> Bool in
                    if state.holding { state.held += bytes }
                    return state.holding
                }
                if !held, !Self.write(bytes, to: client) { return }
            }
        }
    }

    /// The first client, or `nil` when `stopped` says so before one comes.
    private func accept(until stopped: () -> Bool) -> Int32? {
        while !stopped() {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0)]
            if poll(&fds, 1, 10) > 0 {
                let client = Glibc.accept(listener, nil, nil)
                if client >= 0 { return client }
            }
        }
        return nil
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
    }

    private static func write(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            if written <= 0 { return false }
            offset += written
        }
        return true
    }

    private static func address(_ path: String) -> sockaddr_un {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(path.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        return address
    }

    private static func listen(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw RelayError("socket: errno \(errno)") }
        var address = address(path)
        unlink(path)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, Glibc.listen(fd, 1) == 0 else {
            close(fd)
            throw RelayError("cannot listen on \(path): errno \(errno)")
        }
        return fd
    }

    struct RelayError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
