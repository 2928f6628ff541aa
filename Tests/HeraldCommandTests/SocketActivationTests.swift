import Foundation
import Herald
import HeraldTesting
import Testing

/// `herald serve` started the way a systemd `.socket` unit starts it, by systemd's own `systemd-socket-activate`:
/// the listening sockets are bound before the daemon runs, the daemon is started by the first connection and
/// handed the sockets through `LISTEN_FDS`.
@Suite("herald serve takes its listening sockets from the service manager (socket activation)")
struct SocketActivationTests {
    /// systemd-socket-activate listening on `addresses`, run so that the test can wait for it: it closes every
    /// descriptor it did not open, among them the one through which Foundation's `Process` learns that a child
    /// ended, so a shell that keeps that descriptor runs it, passes SIGTERM on, and exits with its status; the
    /// daemon dies with the shell (`setpriv --pdeathsig`), so a failed test leaves nothing running.
    static func activator(_ addresses: [String]) -> [String] {
        let script = """
            "$@" & child=$!
            trap 'kill -TERM $child' TERM
            while kill -0 $child 2>/dev/null; do wait $child; status=$?; done
            exit $status
            """
        // systemd-socket-activate hands the daemon a few variables only; the sanitizers' options must get through.
        let passed = ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"].filter { ProcessInfo.processInfo.environment[$0] != nil }
        return ["sh", "-c", script, "sh", "setpriv", "--pdeathsig", "KILL", "systemd-socket-activate"] + passed.map { "--setenv=\($0)" }
            + addresses.map { "--listen=\($0)" }
    }

    /// Whether systemd-socket-activate, which says so on standard error, has bound all its sockets.
    static func bound(_ daemon: DaemonProcess, sockets: Int) async -> Bool {
        let log = daemon.directory + "/stderr.log"
        return await eventually {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "Listening on ").count > sockets
        }
    }

    @Test(
        "the connection that starts the daemon is answered; HTTP and the Unix socket are the inherited ones; the socket file stays at stop")
    func inheritsItsListeners() async throws {
        try await withTemporaryDirectory { directory in
            let port = try freeLoopbackPort()
            let socket = "\(directory)/activated.sock"
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", httpPort: port,
                arguments: [
                    "serve", "--http", "127.0.0.1:\(port)", "--socket", socket, "--data-dir", "\(directory)/data", "--project-id", "demo",
                    "--echo",
                ],
                launcher: Self.activator(["127.0.0.1:\(port)", socket]))

            #expect(await Self.bound(daemon, sockets: 2), "\(daemon.log)")
            // Nothing runs `herald` yet: this connection is queued on the socket systemd-socket-activate bound, which
            // then starts the daemon, which answers it.
            let health = try await onOwnThread { try httpRequest(port: port, "GET", "/healthz") }
            #expect(health.status == 200, "\(daemon.log)")
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            #expect(daemon.log.contains("listening sockets from the service manager"), "\(daemon.log)")
            #expect(!daemon.log.contains("matches no listener"), "\(daemon.log)")

            let posted = try httpRequest(
                port: port, "POST", "/v1/projects/demo/messages:send", body: fcmBody(token: token, data: ["via": "http"]))
            #expect(posted.status == 200, "\(posted.body)")
            #expect(await daemon.event()?["userInfo"]?["via"] == "http")
            let sent = try await runHerald(["send", "--socket", socket, "--token", token, "--data", "via=socket"])
            #expect(sent.status == 0, "\(sent.error)")
            #expect(await daemon.event()?["userInfo"]?["via"] == "socket")

            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            // The service manager made the socket file and keeps it for the next start.
            #expect(FileManager.default.fileExists(atPath: socket))
        }
    }

    @Test("a socket no listener asks for is closed with a warning naming its address; the daemon runs on")
    func closesASocketItDoesNotUse() async throws {
        try await withTemporaryDirectory { directory in
            let port = try freeLoopbackPort()
            let stray = try freeLoopbackPort()
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data", httpPort: port,
                arguments: [
                    "serve", "--http", "127.0.0.1:\(port)", "--socket", "none", "--data-dir", "\(directory)/data", "--project-id", "demo",
                    "--echo",
                ],
                launcher: Self.activator(["127.0.0.1:\(port)", "127.0.0.1:\(stray)"]))
            #expect(await Self.bound(daemon, sockets: 2), "\(daemon.log)")
            let health = try await onOwnThread { try httpRequest(port: port, "GET", "/healthz") }
            #expect(health.status == 200, "\(daemon.log)")
            #expect(await echoedToken(daemon) != nil, "\(daemon.log)")
            // Written once the start is over, which may be after the token's line.
            let log = daemon.directory + "/stderr.log"
            #expect(
                await eventually {
                    ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("matches no listener of the configuration")
                }, "\(daemon.log)")
            #expect(daemon.log.contains("127.0.0.1:\(stray)"), "\(daemon.log)")
            // Closed: nothing listens there any more.
            #expect(throws: (any Error).self) { _ = try httpRequest(port: stray, "GET", "/healthz") }
            #expect(try httpRequest(port: port, "GET", "/healthz").status == 200)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }
}
