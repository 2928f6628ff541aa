import Foundation
import Glibc
import HeraldTesting
import Testing

/// `herald serve --unifiedpush` and `herald up` as child processes, with the Python app on a private bus.
@Suite("herald serve --unifiedpush and herald up")
struct ServeUnifiedPushTests {
    @Test("a push accepted while the app is away survives SIGKILL and is handed over once after restart; up list and up unregister")
    func serveKillRestartUnregister() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let data = world.dataDirectory
        let environment = ["DBUS_SESSION_BUS_ADDRESS": world.bus.address]
        // One port for every start: the endpoint the app got stays valid across restarts.
        let port = try freeLoopbackPort()
        func serve() async throws -> DaemonProcess {
            let daemon = try await DaemonProcess.start(
                directory: data, httpPort: port,
                arguments: ["serve", "--http", "127.0.0.1:\(port)", "--data-dir", data, "--unifiedpush", "--socket", "none"],
                environment: environment)
            let owned = try await eventually { try await world.distributorOwnsName() }
            try #require(owned, "the daemon did not own the distributor's name: \(daemon.log)")
            return daemon
        }

        var daemon = try await serve()
        let app = try world.app("org.example.Served", version: 1, register: "served")
        let endpoint = try #require(try await app.next("endpoint")["endpoint"])
        #expect(endpoint.hasPrefix("http://127.0.0.1:\(daemon.httpPort)/up/"))
        #expect(try await post(endpoint, Array("first".utf8), in: world.directory).status == 201)
        #expect(try await app.next("message")["body"] == Array("first".utf8).hex)

        try await app.stopped()
        #expect(try await post(endpoint, Array("while away".utf8), in: world.directory).status == 201)
        kill(daemon.process.processIdentifier, SIGKILL)
        let killed = Sendably(daemon)
        try await onOwnThread { waitForExit(killed.value.process) }

        daemon = try await serve()
        let back = try world.app("org.example.Served", version: 1)
        #expect(try await back.next("message")["body"] == Array("while away".utf8).hex, "\(daemon.log)")
        #expect(try await post(endpoint, Array("marker".utf8), in: world.directory).status == 201)
        #expect(try await back.next("message")["body"] == Array("marker".utf8).hex)
        #expect(back.messages.count == 2, "handed over more than once")

        let list = try await runExecutable(heraldExecutable, ["up", "list", "--data-dir", data])
        #expect(list.status == 0, "\(list.error)")
        let token = try endpointToken(endpoint)
        #expect(list.output.contains(#""endpointToken":"\#(token)""#), "\(list.output)")
        #expect(list.output.contains(#""service":"org.example.Served""#), "\(list.output)")

        let refused = try await runExecutable(heraldExecutable, ["up", "unregister", "--data-dir", data, token])
        #expect(refused.status != 0 && refused.error.contains("stop it first"), "\(refused.error)")
        let running = Sendably(daemon)
        #expect(try await onOwnThread { running.value.terminate() } == 0)
        let unknown = try await runExecutable(heraldExecutable, ["up", "unregister", "--data-dir", data, "nope"])
        #expect(unknown.status != 0 && unknown.error.contains("no such registration"), "\(unknown.error)")
        let dropped = try await runExecutable(heraldExecutable, ["up", "unregister", "--data-dir", data, token])
        #expect(dropped.status == 0, "\(dropped.error)")

        // The next start tells the app, and the endpoint is gone.
        daemon = try await serve()
        #expect(try await back.next("unregistered")["token"] == "served", "\(daemon.log)")
        #expect(try await post(endpoint, Array("late".utf8), in: world.directory).status == 404)
        let last = Sendably(daemon)
        #expect(try await onOwnThread { last.value.terminate() } == 0)

        // The daemon's analytics store counts the pushes apart (what the first, SIGKILLed run had not flushed may
        // be missing; "marker" and "while away" were delivered by the second, "late" refused by the third).
        let report = try await runExecutable(heraldExecutable, ["report", "--data-dir", data])
        #expect(report.status == 0, "\(report.error)")
        #expect(report.output.contains("UnifiedPush pushes"), "\(report.output)")
        let total = try #require(
            report.output.split(separator: "\n").last { $0.contains("total") && $0.contains("unregistered") }, "\(report.output)")
        let cells = total.split(separator: " ").map(String.init)
        #expect(cells.count >= 5 && Int(cells[2]).map { $0 >= 2 } == true, "delivered: \(total)")
        #expect(total.hasSuffix("unregistered 1"), "\(total)")
    }

    @Test(
        "Connector2: SIGKILL with the app away, then while its Message call is in flight: handed over once after each restart, with the same ID; SIGTERM waits for the call in flight and writes the handover down"
    )
    func killWhileMessageInFlight() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let port = try freeLoopbackPort()
        // The app holds calls while the test acts: a minute before a held call counts as not answered (and is offered
        // again), and before a stop gives up waiting for it, so that a loaded machine does not change what is seen.
        let patient = 60
        var daemon = try await Self.serve(world, port: port, callTimeout: patient)
        let service = "org.example.Holds"
        let app = try world.app(service, version: 2, register: "holds")
        let endpoint = try #require(try await app.next("endpoint")["endpoint"])
        try await app.stopped()

        // Accepted while the app is away, then SIGKILL before any handover: kept, and handed over after the restart.
        #expect(try await post(endpoint, Array("in flight".utf8), in: world.directory).status == 201)
        try await Self.sigkill(daemon)
        daemon = try await Self.serve(world, port: port, callTimeout: patient)
        // The app is back, holding its Message calls unanswered: killed now, the daemon has the push in flight.
        let back = try world.app(service, version: 2, options: ["--hold"])
        let first = try await back.next("held")
        #expect(first["body"] == Array("in flight".utf8).hex, "\(daemon.log)")
        let id = try #require(first["id"])
        try await Self.sigkill(daemon)

        // Not answered, so not handed over: offered again after the restart, with the same ID, by which an app that
        // already acted on the first call knows it. The answer to the first call goes to a daemon that is gone.
        daemon = try await Self.serve(world, port: port, callTimeout: patient)
        let second = try await back.next("held")
        #expect(second["id"] == id, "\(daemon.log)")
        back.send("release")
        #expect(try await back.next("message")["id"] == id)
        #expect(try await back.next("message")["id"] == id)

        // SIGTERM while the next push's call is in flight: the daemon waits for the app's answer before it closes
        // its connection, and writes the handover down before it exits.
        back.send("hold")
        _ = try await back.next("holding")
        #expect(try await post(endpoint, Array("marker".utf8), in: world.directory).status == 201)
        let marker = try #require(try await back.next("held")["id"])
        kill(daemon.process.processIdentifier, SIGTERM)
        let stopping = Sendably(daemon)
        let waits = await eventually { stopping.value.log.contains("stopping once the Message calls in flight end") }
        #expect(waits, "\(daemon.log)")
        back.send("release")
        #expect(try await back.next("message")["id"] == marker)
        try await onOwnThread { waitUntilExitWithoutSpinning(stopping.value.process) }
        #expect(daemon.process.terminationStatus == 0, "\(daemon.log)")

        // Nothing the app answered is handed over again: the next push is the next thing it gets.
        daemon = try await Self.serve(world, port: port, callTimeout: patient)
        #expect(try await post(endpoint, Array("last".utf8), in: world.directory).status == 201)
        let last = try await back.next("message")
        #expect(last["body"] == Array("last".utf8).hex, "\(daemon.log)")
        let held = back.seen.withLock { $0.filter { $0["event"] == "held" }.map { $0["id"] ?? "" } }
        #expect(held == [id, id, marker])
        #expect(back.messages.map { $0["id"] ?? "" } == [id, id, marker, last["id"] ?? "?"])
        let running = Sendably(daemon)
        #expect(try await onOwnThread { running.value.terminate() } == 0)
    }

    /// `herald serve --unifiedpush` on `world`'s bus and data directory, HTTP on `port`; returns once it owns the
    /// distributor's name. `callTimeout`: seconds an app may take to answer.
    static func serve(_ world: UnifiedPushWorld, port: Int, callTimeout: Int = 5) async throws -> DaemonProcess {
        let data = world.dataDirectory
        let daemon = try await DaemonProcess.start(
            directory: data, httpPort: port,
            arguments: [
                "serve", "--http", "127.0.0.1:\(port)", "--data-dir", data, "--unifiedpush", "--socket", "none",
                "--unifiedpush-call-timeout", "\(callTimeout)",
            ],
            environment: ["DBUS_SESSION_BUS_ADDRESS": world.bus.address])
        let owned = try await eventually { try await world.distributorOwnsName() }
        try #require(owned, "the daemon did not own the distributor's name: \(daemon.log)")
        return daemon
    }

    /// Kills `daemon` with SIGKILL and waits for it to be gone.
    static func sigkill(_ daemon: DaemonProcess) async throws {
        Glibc.kill(daemon.process.processIdentifier, SIGKILL)
        let killed = Sendably(daemon)
        try await onOwnThread { waitForExit(killed.value.process) }
    }

    @Test("--unifiedpush without this instance's HTTP endpoint stops the start with exit status 64")
    func needsHTTP() async throws {
        try await withTemporaryDirectory(prefix: "herald-up-config") { directory in
            for extra in [["--http", "none"], ["--gateway", "--nats-server", "nats://127.0.0.1:4222"]] {
                let result = try await onOwnThread {
                    try runExecutable(heraldExecutable, ["serve", "--unifiedpush", "--data-dir", directory, "--socket", "none"] + extra)
                }
                #expect(result.status == 64, "\(extra): \(result.error)")
                #expect(result.error.contains("unifiedpush needs"), "\(extra): \(result.error)")
            }
        }
    }
}

/// A daemon handed to a thread of its own (``onOwnThread``) while the test waits for it: used by one side at a time.
struct Sendably<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
