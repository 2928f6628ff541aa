import Foundation
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// A plugin that writes `start <name>` and `stop <name>` to a shared list; with `gate`, its start waits there first, and
/// with `failing`, it throws from its start.
private final class StepPlugin: HeraldPlugin, Sendable {
    struct StartFailure: Error {}

    let name: String
    let steps: Locked<[String]>
    let gate: Gate?
    let failing: Bool

    init(_ name: String, steps: Locked<[String]>, gate: Gate? = nil, failing: Bool = false) {
        self.name = name
        self.steps = steps
        self.gate = gate
        self.failing = failing
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: name) }

    func start(_ context: PluginContext) async throws {
        await gate?.wait()
        if failing { throw StartFailure() }
        steps.withLock { $0.append("start \(name)") }
    }

    func stop() async {
        steps.withLock { $0.append("stop \(name)") }
    }
}

@Suite("A start that fails or is stopped by a shutdown stops what it started and lets go of the store")
struct StartAndShutdownTests {
    /// The instances' configuration: a short grace period (no test has a message in flight at its stop).
    static var configuration: Herald.Configuration {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.shutdownGracePeriod = .milliseconds(50)
        return configuration
    }

    /// Whether no store in this process holds the inbox's log in `directory`: none of the process's descriptors is
    /// open on it. Asking for the log's lock instead is not exact while other tests start processes: a child holds a
    /// copy of every descriptor, and so of the lock, from its fork until it executes its program.
    static func inboxLogIsFree(in directory: String) -> Bool {
        guard let resolved = realpath(directory, nil) else { return false }
        defer { free(resolved) }
        let log = String(cString: resolved) + "/inbox.log"
        guard let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return false }
        return !descriptors.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == log }
    }

    @Test(
        "a shutdown while a plugin starts waits for it, stops the plugins started, starts no more, replays nothing and closes the store; start throws notRunning"
    )
    func shutdownWhileAPluginStarts() async throws {
        try await withDataDirectory { directory in
            let configuration = Self.configuration
            let (store, _) = try await InboxIDTests.store(in: directory, configuration: configuration, pending: "old", payload: "old")
            let steps = Locked<[String]>([])
            let first = StepPlugin("first", steps: steps)
            let gate = Gate()
            let slow = StepPlugin("slow", steps: steps, gate: gate)
            let last = StepPlugin("last", steps: steps)
            let handler = HoldingHandler()
            let herald = Herald(configuration: patientShutdown(configuration), store: store)
            for plugin in [first, slow, last] as [any HeraldPlugin] { try herald.register(plugin) }
            try herald.register(handler)
            let starting = Task { try await herald.start() }
            #expect(await eventually { gate.arrived == 1 })
            let stopping = Task { await herald.shutdown() }
            // The shutdown has taken the instance (no bus for anyone any more) and waits for the start.
            #expect(await eventually { herald.isStopping() })
            #expect((try? herald.bus) == nil)
            #expect(steps.withLock { $0 } == ["start first"])
            gate.open()
            await #expect(throws: HeraldError.notRunning) { try await starting.value }
            await stopping.value
            #expect(steps.withLock { $0 } == ["start first", "start slow", "stop slow", "stop first"])
            #expect(Self.inboxLogIsFree(in: directory), "the store was closed")
            // Nothing was replayed and this start was not counted: the message waits for the next start.
            #expect(handler.payloads.isEmpty)
            let state = try store.loadLeavingTheStartUncounted(window: configuration.deduplication, now: 0)
            #expect(state?.pending.map(\.messageID) == ["old"])
            #expect(state?.replays == ["old": 0])
            store.close()
        }
    }

    @Test("a start whose plugin fails stops the plugins started before it and closes the store")
    func failedStartClosesTheStore() async throws {
        try await withDataDirectory { directory in
            let configuration = Self.configuration
            let store = try SQLiteStore(directory: directory)
            let steps = Locked<[String]>([])
            let herald = Herald(configuration: patientShutdown(configuration), store: store)
            try herald.register(StepPlugin("first", steps: steps))
            try herald.register(StepPlugin("failing", steps: steps, failing: true))
            try herald.register(StepPlugin("last", steps: steps))
            await #expect(throws: HeraldError.pluginFailedToStart(plugin: "failing", error: "StartFailure()")) {
                try await herald.start()
            }
            #expect(steps.withLock { $0 } == ["start first", "stop first"])
            #expect(Self.inboxLogIsFree(in: directory), "the store was closed")
            // The instance is stopped: a shutdown after it does nothing more.
            await herald.shutdown()
            #expect(steps.withLock { $0 } == ["start first", "stop first"])
        }
    }

    @Test("a second shutdown while the first waits for the start returns only once the instance has stopped")
    func secondShutdownWaits() async throws {
        try await withDataDirectory { directory in
            let configuration = Self.configuration
            let store = try SQLiteStore(directory: directory)
            let steps = Locked<[String]>([])
            let gate = Gate()
            let herald = Herald(configuration: patientShutdown(configuration), store: store)
            try herald.register(StepPlugin("first", steps: steps))
            try herald.register(StepPlugin("slow", steps: steps, gate: gate))
            let starting = Task { try await herald.start() }
            #expect(await eventually { gate.arrived == 1 })
            let first = Task { await herald.shutdown() }
            #expect(await eventually { herald.isStopping() })
            let second = Task { await herald.shutdown() }
            #expect(await eventually { herald.waitingUntilStopped == 1 })
            gate.open()
            await second.value
            // The second returned after the first's stop: the plugins stopped, the store closed.
            #expect(steps.withLock { $0 } == ["start first", "start slow", "stop slow", "stop first"])
            #expect(Self.inboxLogIsFree(in: directory), "the store was closed")
            await first.value
            await #expect(throws: HeraldError.notRunning) { try await starting.value }
        }
    }

    @Test("run() returns, without an error, when a shutdown comes while it starts")
    func runStoppedDuringItsStart() async throws {
        try await withDataDirectory { directory in
            let configuration = Self.configuration
            let steps = Locked<[String]>([])
            let gate = Gate()
            let herald = Herald(configuration: patientShutdown(configuration), store: try SQLiteStore(directory: directory))
            try herald.register(StepPlugin("slow", steps: steps, gate: gate))
            let running = Task { try await herald.run() }
            #expect(await eventually { gate.arrived == 1 })
            let stopping = Task { await herald.shutdown() }
            #expect(await eventually { herald.isStopping() })
            gate.open()
            try await running.value
            await stopping.value
            #expect(steps.withLock { $0 } == ["start slow", "stop slow"])
        }
    }

    @Test("a shutdown while the store is being read waits for it, then closes the store; no plugin starts")
    func shutdownWhileTheStoreOpens() async throws {
        try await withDataDirectory { directory in
            let configuration = Self.configuration
            // A store with a log (the first start made it), read again slowly.
            _ = try await InboxIDTests.store(in: directory, configuration: configuration, pending: "old", payload: "old")
            let slow = try CommitCountingStore(directory: directory, holdingLoad: true)
            let steps = Locked<[String]>([])
            let herald = Herald(configuration: patientShutdown(configuration), store: slow)
            try herald.register(StepPlugin("plugin", steps: steps))
            let starting = Task { try await herald.start() }
            #expect(await eventually { slow.load.hasBegun })
            let stopping = Task { await herald.shutdown() }
            // The shutdown waits for the load.
            #expect(await eventually { herald.isStopping() })
            slow.load.letGo()
            await stopping.value
            #expect(Self.inboxLogIsFree(in: directory), "the store was closed before the shutdown returned")
            await #expect(throws: HeraldError.notRunning) { try await starting.value }
            #expect(steps.withLock { $0 }.isEmpty)
            let state = try slow.inner.loadLeavingTheStartUncounted(window: configuration.deduplication, now: 0)
            #expect(state?.replays == ["old": 0])
            slow.inner.close()
        }
    }

    @Test("a shutdown before start(): start() throws notRunning, run() returns, no plugin starts")
    func shutdownBeforeStart() async throws {
        try await withDataDirectory { directory in
            let steps = Locked<[String]>([])
            let herald = Herald(configuration: Self.configuration, store: try SQLiteStore(directory: directory))
            try herald.register(StepPlugin("plugin", steps: steps))
            await herald.shutdown()
            await #expect(throws: HeraldError.notRunning) { try await herald.start() }
            try await herald.run()
            await herald.waitUntilStopped()
            #expect(steps.withLock { $0 }.isEmpty)
            #expect(Self.inboxLogIsFree(in: directory))
        }
    }

    @Test("a shutdown while deleteData() deletes waits for it, then closes the store; the store is not opened again")
    func shutdownDuringDeletion() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory, holdingDeletion: true)
            let herald = Herald(configuration: Self.configuration, store: store)
            try await herald.start()
            let deleting = Task { try await herald.deleteData() }
            #expect(await eventually { store.deletion.hasBegun })
            let stopping = Task { await herald.shutdown() }
            #expect(await eventually { herald.isClosingAfterDeletion })
            store.deletion.letGo()
            try await deleting.value
            await stopping.value
            #expect(Self.inboxLogIsFree(in: directory), "the store was closed after the deletion")
            await #expect(throws: HeraldError.notRunning) { try await herald.deleteData() }
            #expect(Self.inboxLogIsFree(in: directory))
        }
    }
}
