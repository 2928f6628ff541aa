import Herald
import HeraldDaemon
import HeraldEventLoop
import HeraldTesting
import Testing

/// A handler of the test's own, as an embedder writes one: records each data message with the label its setting
/// gave it.
final class RecordingHandler: MessageHandler {
    /// Its one setting, in a section the daemon reads like its own.
    static let label = ConfigurationSetting(
        "recorder-label", .string, default: .string("none"), "none", allowed: "a non-empty label", help: "The label recorded.")
    static let section = ConfigurationSection(name: "recorder", summary: "Records data messages.", settings: [label])

    let labelValue: String
    let received = Locked<[String]>([])

    init(label: String) { labelValue = label }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "recorder", summary: "records data messages") }

    func didReceive(_ message: RemoteMessage) async throws {
        let line = "\(labelValue): \(message.data["greeting"] ?? "")"
        received.withLock { $0.append(line) }
    }
}

/// A presenter of the embedder's, which shows nothing.
final class QuietPresenter: SynchronousPresenter {
    var descriptor: PluginDescriptor { PluginDescriptor(name: "quiet", summary: "shows nothing") }
}

/// What the daemon hands over: the recorder it made, and the daemon once ready (on `readiness`, which ends when the
/// daemon's run does).
final class Handover: Sendable {
    let recorder = Locked<RecordingHandler?>(nil)
    let readiness: AsyncStream<Daemon.Running>
    let ready: AsyncStream<Daemon.Running>.Continuation

    init() {
        (readiness, ready) = AsyncStream.makeStream(of: Daemon.Running.self)
    }
}

@Suite("HeraldDaemon in the test process")
struct DaemonTests {
    /// A daemon with the recorder added, whose settings section it reads.
    static func daemon(_ handover: Handover) -> Daemon {
        var daemon = Daemon()
        // SIGTERM and SIGINT stay the test process's: the daemon is stopped with Running.stop().
        daemon.stopsOnSignals = false
        daemon.addSettings(RecordingHandler.section)
        daemon.addPlugin { setup in
            let recorder = RecordingHandler(label: setup.configuration.string(RecordingHandler.label) ?? "")
            handover.recorder.withLock { $0 = recorder }
            return recorder
        }
        daemon.onReady { running in handover.ready.yield(running) }
        return daemon
    }

    // Readiness is awaited as an event, bounded by the time limit: in the parallel run the test process's threads can
    // be held for a minute and more by tests waiting on children, and the daemon in this process waits with them.
    @Test(
        "a daemon with a plugin of its embedder's: an FCM v1 send over HTTP reaches it; stop() ends run()", .timeLimit(.minutes(5)))
    func embeddedPluginReceives() async throws {
        try await withTemporaryDirectory { directory in
            let handover = Handover()
            try await Self.whileRunning(Self.daemon(handover), handover, directory: directory) { running in
                let port = try #require(running.httpAddress?.port)
                #expect(running.dataDirectory == directory)
                let token = try await running.herald.token()
                let answer = try await curlRequest(
                    port: port, "POST", "/v1/projects/herald/messages:send", body: fcmBody(token: token, data: ["greeting": "hello"]))
                #expect(answer.status == 200, "\(answer.body)")
                let recorder = try #require(handover.recorder.withLock { $0 })
                #expect(await eventually { recorder.received.withLock { $0 } == ["embedded: hello"] })
            }
        }
    }

    @Test("--presenter log (the default) registers the log presenter, unless a plugin of the embedder's presents", .timeLimit(.minutes(5)))
    func logPresenterUnlessEmbedderPresents() async throws {
        for embedderPresents in [false, true] {
            try await withTemporaryDirectory { directory in
                let handover = Handover()
                var daemon = Self.daemon(handover)
                if embedderPresents { daemon.addPlugin { _ in QuietPresenter() } }
                try await Self.whileRunning(daemon, handover, directory: directory) { running in
                    let presenters = running.herald.registeredPlugins.filter { $0.roles.contains(.presenter) }.map(\.descriptor.name)
                    #expect(presenters == (embedderPresents ? ["quiet"] : ["log"]))
                }
            }
        }
    }

    /// Runs `daemon` on loopback HTTP in `directory` until `body` returns, then stops it.
    private static func whileRunning(
        _ daemon: Daemon, _ handover: Handover, directory: String, _ body: (Daemon.Running) async throws -> Void
    ) async throws {
        let run = Task {
            defer { handover.ready.finish() }
            try await daemon.run(
                arguments: [
                    "--http", "127.0.0.1:0", "--socket", "none", "--data-dir", directory, "--log-level", "error",
                    "--recorder-label", "embedded",
                ],
                environment: [:])
        }
        var readiness = handover.readiness.makeAsyncIterator()
        guard let running = await readiness.next() else {
            let result = await run.result
            Issue.record("the daemon stopped before it was ready: \(result)")
            return
        }
        do {
            try await body(running)
        } catch {
            await running.stop()
            throw error
        }
        await running.stop()
        try await run.value
    }

    @Test("a bad setting, the daemon's or the embedder's, is a DaemonError with exit status 64 naming where it came from")
    func badConfiguration() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = Self.daemon(Handover())
            await #expect(throws: DaemonError.self) {
                try await daemon.run(arguments: ["--data-dir", directory, "--log-level", "loud"], environment: [:])
            }
            do {
                try await daemon.run(
                    arguments: ["--data-dir", directory], environment: ["HERALD_RECORDER_LABEL": "x", "HERALD_SHUTDOWN_GRACE": "-1"])
                Issue.record("a negative shutdown grace was taken")
            } catch let error as DaemonError {
                #expect(error.exitStatus == 64)
                #expect(error.message.contains("environment HERALD_SHUTDOWN_GRACE"), "\(error.message)")
            }
            do {
                try await daemon.run(arguments: ["--data-dir", directory, "--recorder-lable", "x"], environment: [:])
                Issue.record("an unknown flag was taken")
            } catch let error as DaemonError {
                #expect(error.exitStatus == 64)
                #expect(error.message.contains("--recorder-lable"), "\(error.message)")
            }
        }
    }

    @Test("the daemon's schema has the embedder's section after the daemon's own and the bundled plugins'")
    func schemaHasEmbedderSection() {
        let schema = Self.daemon(Handover()).schema
        #expect(schema.setting(forKey: "recorder-label") != nil)
        #expect(schema.setting(forKey: "data-dir") != nil)
        #expect(schema.sections.last?.name == "recorder")
    }
}
