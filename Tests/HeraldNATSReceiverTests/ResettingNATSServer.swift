import Foundation
import HeraldEventLoop
import HeraldTesting

/// A minimal NATS server on a loopback port: enough protocol for a core-NATS client (INFO, a PONG for every PING,
/// everything else read and ignored), and one thing nats-server cannot be made to do on cue: end the connection
/// with buffered data in the client's socket *and* a reset behind it (``reset()``), which epoll reports as an error
/// with data still to read. Accepts connections one after another, so the client's reconnect is served too.
final class ResettingNATSServer: Sendable {
    let port: Int
    private let listener: Int32
    private struct State {
        var resetRequested = false
        var stopped = false
        var connections = 0
    }
    private let state = Locked(State())

    init() throws {
        (listener, port) = try listenOnLoopback()
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    var url: String { "nats://127.0.0.1:\(port)" }

    /// Connections accepted so far.
    var connections: Int { state.withLock { $0.connections } }

    /// Ends the current connection: 64 KB of `+OK` (which the client reads without answering) and then a reset
    /// (SO_LINGER 0), so the client's socket holds data followed by ECONNRESET.
    func reset() { state.withLock { $0.resetRequested = true } }

    func stop() { state.withLock { $0.stopped = true } }

    deinit { close(listener) }

    private func serve() {
        while !state.withLock({ $0.stopped }) {
            guard readable(listener, within: 50) else { continue }
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { continue }
            state.withLock {
                $0.connections += 1
                $0.resetRequested = false
            }
            talk(connection)
        }
    }

    private func talk(_ connection: Int32) {
        send(connection, #"INFO {"server_id":"resetting","version":"2.9.10","proto":1,"headers":true,"max_payload":1048576}"# + "\r\n")
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let (reset, stopped) = state.withLock { ($0.resetRequested, $0.stopped) }
            if stopped {
                close(connection)
                return
            }
            if reset {
                send(connection, String(repeating: "+OK\r\n", count: 65536 / 5))
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(connection, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                close(connection)
                return
            }
            guard readable(connection, within: 50) else { continue }
            let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
            if count <= 0 {
                close(connection)
                return
            }
            pending += buffer[..<count]
            while let end = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = pending[..<end]
                if line.starts(with: Array("PING".utf8)) { send(connection, "PONG\r\n") }
                pending.removeSubrange(...end)
            }
        }
    }

    private func send(_ connection: Int32, _ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            bytes = bytes.dropFirst(written)
        }
    }
}

/// A TCP socket listening on 127.0.0.1 at `port` (0: one the kernel picks), and the port.
func listenOnLoopback(port: Int = 0) throws -> (fd: Int32, port: Int) {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var yes: Int32 = 1
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let listening = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(listener, $0, length) == 0 && listen(listener, 8) == 0 && getsockname(listener, $0, &length) == 0
        }
    }
    guard listening else {
        let code = errno
        close(listener)
        throw NATSTestError.client("cannot listen on 127.0.0.1:\(port): errno \(code)")
    }
    return (listener, Int(UInt16(bigEndian: address.sin_port)))
}

/// Whether `fd` becomes readable within `milliseconds`.
func readable(_ fd: Int32, within milliseconds: Int32) -> Bool {
    var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    return poll(&entry, 1, milliseconds) > 0
}
