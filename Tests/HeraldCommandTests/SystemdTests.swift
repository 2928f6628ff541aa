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
            let (token, _) = try #require(echoedToken(daemon), "\(daemon.log)")
            let beforeReady = notify.until("READY=1")
            #expect(beforeReady.last?.contains("READY=1") == true, "\(beforeReady)")
            let pings = (0..<3).compactMap { _ in notify.next() }
            #expect(pings.filter { $0 == "WATCHDOG=1" }.count == 3, "\(pings)")
            // Counts in the STATUS= line systemctl status shows, sent when they changed.
            for index in 0..<2 {
                let sent = try runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--data", "n=\(index)"])
                #expect(sent.status == 0, "\(sent.error)")
            }
            let status = notify.until("STATUS=receiving: 2 messages received, 0 dropped, 0 background fetches")
            #expect(status.last == "STATUS=receiving: 2 messages received, 0 dropped, 0 background fetches", "\(status)")
            kill(daemon.process.processIdentifier, SIGINT)
            let stopping = notify.until("STOPPING=1")
            #expect(stopping.last?.contains("STOPPING=1") == true, "\(stopping)")
            daemon.process.waitUntilExit()
            #expect(daemon.process.terminationStatus == 0, "\(daemon.log)")
        }
    }

    @Test(
        "SIGHUP: RELOADING=1 then READY=1; the config file's new log level applies at once, other changes are named for a restart, a broken file changes nothing"
    )
    func reload() async throws {
        try await withTemporaryDirectory { directory in
            let notify = try NotifySocket(directory: directory)
            let file = "\(directory)/herald.yaml"
            try "log-level: error\nmax-replays: 5\n".write(toFile: file, atomically: true, encoding: .utf8)
            let daemon = try DaemonProcess(
                directory: "\(directory)/data", arguments: ["--config", file], environment: ["NOTIFY_SOCKET": notify.path])
            #expect(daemon.event()?["event"] == "token")
            #expect(notify.until("READY=1").last?.contains("READY=1") == true)
            #expect(!daemon.log.contains("herald started"), "info lines under log-level error: \(daemon.log)")

            try "log-level: info\nmax-replays: 7\n".write(toFile: file, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            let reloading = notify.until("READY=1")
            #expect(reloading.first?.contains("RELOADING=1") == true, "\(reloading)")
            #expect(reloading.first?.contains("MONOTONIC_USEC=") == true, "\(reloading)")
            #expect(reloading.last?.contains("READY=1") == true, "\(reloading)")
            // Written at notice, so seen only because the level is info now.
            #expect(daemon.log.contains(#"applied=["log-level"] needsRestart=["max-replays"]"#), "\(daemon.log)")

            try "log-level: loud\n".write(toFile: file, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(notify.until("READY=1").last?.contains("READY=1") == true)
            #expect(daemon.log.contains("configuration reload failed"), "\(daemon.log)")
            #expect(daemon.log.contains("key log-level: 'loud' is not valid"), "\(daemon.log)")
            #expect(daemon.terminate() == 0, "\(daemon.log)")
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
