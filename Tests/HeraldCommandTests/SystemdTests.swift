import Foundation
import Herald
import HeraldTesting
import Testing

/// A Unix datagram socket standing in for systemd's notification socket.
final class NotifySocket: Sendable {
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
        var count: Int
        // A receive timeout makes recv fail with EINTR at any signal with a handler, SA_RESTART or not (the test
        // process's child processes end all the time): that is not the end of the notifications.
        repeat { count = recv(fd, &buffer, buffer.count, 0) } while count < 0 && errno == EINTR
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count], as: UTF8.self)
    }

    /// Whether the socket's queue has no room left: a datagram of ours sent without waiting finds it full.
    func isFull() -> Bool {
        let probe = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(probe) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let sent = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(probe, "x", 1, Int32(MSG_DONTWAIT), $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return sent < 0 && errno == EAGAIN
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
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                environment: [
                    "NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000",
                ])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            let beforeReady = notify.until("READY=1")
            #expect(beforeReady.last?.contains("READY=1") == true, "\(beforeReady)")
            let pings = (0..<3).compactMap { _ in notify.next() }
            #expect(pings.filter { $0 == "WATCHDOG=1" }.count == 3, "\(pings)")
            // Counts in the STATUS= line systemctl status shows, sent when they changed.
            for index in 0..<2 {
                let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--data", "n=\(index)"])
                #expect(sent.status == 0, "\(sent.error)")
            }
            let status = notify.until("STATUS=receiving: 2 messages received, 0 dropped, 0 background fetches")
            #expect(status.last == "STATUS=receiving: 2 messages received, 0 dropped, 0 background fetches", "\(status)")
            kill(daemon.process.processIdentifier, SIGINT)
            let stopping = notify.until("STOPPING=1")
            #expect(stopping.last?.contains("STOPPING=1") == true, "\(stopping)")
            await waitUntilExitWithoutSpinning(daemon.process)
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
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", arguments: ["--config", file], environment: ["NOTIFY_SOCKET": notify.path])
            #expect(await daemon.event()?["event"] == "token")
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
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "a service manager that stops reading: pings and status lines it has no room for are dropped, the loop goes on; read again, they resume; unread, the stop does not wait"
    )
    func managerNotReading() async throws {
        try await withTemporaryDirectory { directory in
            let notify = try NotifySocket(directory: directory)
            // A ping every 10 ms: the socket's queue (10 datagrams by default) is full within a tenth of a second.
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "20000"])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            #expect(await eventually { notify.isFull() }, "the daemon's notifications never filled the socket")
            // With the loop held in sendmsg by a full queue, nothing would be answered now.
            let answered = (0..<3).map { _ in (try? httpRequest(port: daemon.httpPort, "GET", "/healthz").status) == 200 }
            #expect(answered == [true, true, true], "the loop is held: \(daemon.log)")
            guard answered == [true, true, true] else { return }
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--data", "n=1"])
            #expect(sent.status == 0, "\(sent.error)")
            #expect(notify.isFull())
            // Read again: pings come, and the status line that found no room is sent at a later tick.
            let status = notify.until("STATUS=receiving: 1 messages received")
            #expect(status.last == "STATUS=receiving: 1 messages received, 0 dropped, 0 background fetches", "\(status)")
            #expect(notify.next() == "WATCHDOG=1")
            // Not read again: the stop does not wait for room in the queue (STOPPING=1 is dropped, the daemon ends).
            #expect(await eventually { notify.isFull() })
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("a loop kept busy misses its watchdog pings: TLS handshakes with a 15,360-bit key hold it; the pings resume after")
    func busyLoopMissesPings() async throws {
        try await withTemporaryDirectory { directory in
            // The key is slow on purpose: each full handshake signs with it on the loop (Tests/Fixtures/slow-tls).
            let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Fixtures/slow-tls")
            let key = "\(directory)/slow.key"
            try FileManager.default.copyItem(atPath: fixtures.appendingPathComponent("rsa-15360.key").path, toPath: key)
            chmod(key, 0o600)
            let notify = try NotifySocket(directory: directory)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                arguments: ["--socket", "none", "--tls-cert", fixtures.appendingPathComponent("rsa-15360.crt").path, "--tls-key", key],
                environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"])
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            #expect(notify.until("READY=1").last?.contains("READY=1") == true, "\(daemon.log)")
            let pings = PingRecorder(notify)
            #expect(await eventually { pings.count >= 3 })
            // Eight clients at once: their handshakes' signatures take the loop one after another. Each handshake has
            // ten seconds from its connection (the TLS settings' default): on a loaded machine the last ones in line
            // may not get there and are closed, as they should be; each client ends either way.
            let clients = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/python3"),
                [
                    "-c",
                    """
                    import socket, ssl, sys, threading
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                    done, closed = [], []
                    def handshake():
                        try:
                            with context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=120)):
                                done.append(1)
                        except OSError as error:  # reset, or closed mid-handshake
                            closed.append(error)
                    threads = [threading.Thread(target=handshake) for _ in range(8)]
                    [thread.start() for thread in threads]
                    [thread.join() for thread in threads]
                    print(len(done), len(closed))
                    """,
                    "\(daemon.httpPort)",
                ])
            let counts = clients.output.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            #expect(counts.count == 2 && counts[0] >= 1 && counts[0] + counts[1] == 8, "\(clients.output) \(clients.error)")
            if counts.count == 2, counts[1] > 0 {
                #expect(daemon.log.contains("no complete handshake within"), "closed otherwise: \(daemon.log)")
            }
            let afterClients = pings.count
            #expect(await eventually { pings.count >= afterClients + 3 }, "the pings did not resume")
            let gaps = pings.gaps()
            // Half of WATCHDOG_USEC apart while the loop turns; the handshakes hold it for a second or more.
            #expect(gaps.max() ?? .zero > .milliseconds(600), "longest gap between pings: \(gaps.max() ?? .zero)")
            pings.stop()
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "a SIGHUP while the daemon starts does not end it: the configuration is reloaded once the daemon is up"
    )
    func hangupDuringStart() async throws {
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            try "log-level: debug\nmax-replays: 5\n".write(toFile: file, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: ["--config", file])
            // The service group's first line: the daemon has begun to start (stores, plugins and listeners come next).
            #expect(
                await eventuallyValue { daemon.log.contains("Starting service lifecycle") ? true : nil } == true, "\(daemon.log)")
            try "log-level: debug\nmax-replays: 7\n".write(toFile: file, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            #expect(
                await eventuallyValue { daemon.log.contains(#"applied=[] needsRestart=["max-replays"]"#) ? true : nil } == true,
                "\(daemon.log)")
            #expect(daemon.process.isRunning)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("without NOTIFY_SOCKET nothing is sent and nothing fails")
    func notUnderSystemd() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory, environment: ["NOTIFY_SOCKET": "", "WATCHDOG_USEC": ""])
            #expect(await daemon.event()?["event"] == "token")
            #expect(await daemon.terminate() == 0)
        }
    }
}

/// Reads `WATCHDOG=1` pings from a notification socket on a thread of its own and notes when each arrived.
private final class PingRecorder: @unchecked Sendable {
    // @unchecked Sendable: `arrivals` and `stopped` are only touched under `lock`.
    private let lock = NSLock()
    private var arrivals: [ContinuousClock.Instant] = []
    private var stopped = false

    init(_ notify: NotifySocket) {
        Thread { [self] in
            // Until stopped, through silences too: a loop held longer than the socket's 10 s receive timeout pings
            // again after.
            while !lock.withLock({ stopped }) {
                if let message = notify.next(), message == "WATCHDOG=1" { lock.withLock { arrivals.append(.now) } }
            }
        }.start()
    }

    var count: Int { lock.withLock { arrivals.count } }

    /// The time between each ping and the next.
    func gaps() -> [Duration] {
        lock.withLock { zip(arrivals, arrivals.dropFirst()).map { $1 - $0 } }
    }

    func stop() { lock.withLock { stopped = true } }
}
