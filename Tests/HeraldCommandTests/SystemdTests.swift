import Foundation
import Herald
import HeraldTesting
import Testing

/// A Unix datagram socket standing in for systemd's notification socket.
final class NotifySocket {
    let path: String
    let fd: Int32

    init(directory: String) throws {
        path = "\(directory)/notify.sock"
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    /// The next notification, or `nil` after 10 s.
    func next() -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, 0)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// Notifications until one contains `text` (or none comes for 10 s); all of them.
    func until(_ text: String) -> [String] {
        var seen: [String] = []
        while let message = next() {
            seen.append(message)
            if message.contains(text) { break }
        }
        return seen
    }
}

@Suite("herald serve under systemd: sd_notify READY, WATCHDOG and STOPPING", .serialized)
struct SystemdTests {
    @Test("READY=1 once receiving, WATCHDOG=1 at half WATCHDOG_USEC from the loop, STOPPING=1 on SIGINT, exit 0")
    func notifications() async throws {
        try await withTemporaryDirectory { directory in
            let notify = try NotifySocket(directory: directory)
            let daemon = try DaemonProcess(
                directory: "\(directory)/data",
                environment: [
                    "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000",
                ])
            #expect(daemon.event()?["event"] == "token")
            let beforeReady = notify.until("READY=1")
            #expect(beforeReady.last?.contains("READY=1") == true, "\(beforeReady)")
            let pings = (0..<3).compactMap { _ in notify.next() }
            #expect(pings.filter { $0 == "WATCHDOG=1" }.count == 3, "\(pings)")
            kill(daemon.process.processIdentifier, SIGINT)
            let stopping = notify.until("STOPPING=1")
            #expect(stopping.last?.contains("STOPPING=1") == true, "\(stopping)")
            daemon.process.waitUntilExit()
            #expect(daemon.process.terminationStatus == 0, "\(daemon.log)")
        }
    }

    @Test("without NOTIFY_SOCKET nothing is sent and nothing fails")
    func notUnderSystemd() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try DaemonProcess(directory: directory, environment: ["NOTIFY_SOCKET": "", "WATCHDOG_USEC": ""])
            #expect(daemon.event()?["event"] == "token")
            #expect(daemon.terminate() == 0)
        }
    }
}
