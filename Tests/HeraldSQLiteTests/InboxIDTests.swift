import Foundation
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// A message handler that holds each message until the test lets that one go, by its payload.
final class HoldingHandler: MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: state behind a lock.
    private struct State {
        var payloads: [String] = []
        var held: [String: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Locked(State())

    var payloads: [String] { state.withLock { $0.payloads } }
    func isHolding(_ payload: String) -> Bool { state.withLock { $0.held[payload] != nil } }

    func didReceive(_ message: RemoteMessage) async throws {
        guard case .string(let payload)? = message.userInfo["payload"] else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLock { state in
                state.payloads.append(payload)
                state.held[payload] = continuation
            }
        }
    }

    /// Lets the message with `payload` finish.
    func release(_ payload: String) {
        state.withLock { $0.held.removeValue(forKey: payload) }?.resume()
    }

    /// Lets every held message finish.
    func releaseAll() {
        let held = state.withLock { state in
            defer { state.held.removeAll() }
            return Array(state.held.values)
        }
        for continuation in held { continuation.resume() }
    }
}

/// Delivers `message` from its start, and keeps the answer.
private final class SendingPlugin: HeraldPlugin, Sendable {
    let message: RemoteMessage
    let outcome = Locked<DeliveryOutcome?>(nil)
    init(message: RemoteMessage) { self.message = message }
    func start(_ context: PluginContext) async throws {
        let answer = await context.bus.deliver(message)
        outcome.withLock { $0 = answer }
    }
}

@Suite("The durable inbox holds one message per ID: a second under an ID still in it is a duplicate, whatever the window")
struct InboxIDTests {
    /// A store in `directory` with an identity and one pending message, `pending`, of the given payload; closed.
    static func store(
        in directory: String, configuration: Herald.Configuration, pending id: String, payload: String
    ) async throws -> (SQLiteStore, token: String) {
        let store = try SQLiteStore(directory: directory)
        var token = ""
        try await withStarted(Herald(configuration: patientShutdown(configuration), store: store)) { herald in
            token = try await herald.token()
        }
        try store.commit(
            StoreBatch(accepted: [InboxRecord(dataMessage(id: id, token: token, payload: payload), messageID: id)]),
            window: configuration.deduplication, now: WallClock.nowMilliseconds())
        store.close()
        return (store, token)
    }

    /// An instance on `store` with `plugins`, started.
    static func started(on store: SQLiteStore, configuration: Herald.Configuration, plugins: [any HeraldPlugin]) async throws -> Herald {
        let herald = Herald(configuration: patientShutdown(configuration), store: store)
        for plugin in plugins { try herald.register(plugin) }
        try await herald.start()
        return herald
    }

    @Test(
        "a message sent again while the first is still being handled, its ID gone from the window, is answered as a duplicate, not delivered, and not lost when the first finishes"
    )
    func secondUnderALiveID() async throws {
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1234567890")
            configuration.deduplication = DeduplicationWindow(maximumCount: 1, maximumAge: .seconds(60))
            configuration.shutdownGracePeriod = .milliseconds(50)
            let store = try SQLiteStore(directory: directory)
            let handler = HoldingHandler()
            let sink = RecordingSink()
            let herald = try await Self.started(on: store, configuration: configuration, plugins: [handler, sink])
            let token = try await herald.token()
            #expect(try await herald.deliver(dataMessage(id: "x", token: token, payload: "first")).get() == "x")
            #expect(await eventually { handler.isHolding("first") })
            // Another message takes the window's one place.
            #expect(try await herald.deliver(dataMessage(id: "y", token: token, payload: "other")).get() == "y")
            #expect(await eventually { handler.isHolding("other") })
            handler.release("other")
            // The first is committed and its handler runs: the same ID again is the same message.
            #expect(try await herald.deliver(dataMessage(id: "x", token: token, payload: "second")).get() == "x")
            #expect(await eventually { sink.events(named: .messageDropped).map { $0.parameters["reason"] } == ["duplicate"] })
            handler.release("first")
            // Once the first's removal is committed the ID is free again: out of the window, a message under it is new.
            // Until then a send under it is answered as the first's duplicate; the sender sends again, as one would.
            #expect(await eventually { (try? store.isPending("x")) == false })
            let sent = try await eventually {
                let answer = try await herald.deliver(dataMessage(id: "x", token: token, payload: "third")).get()
                return answer == "x" && handler.isHolding("third")
            }
            #expect(sent)
            // Only the first, the other and the third reached the handler: the second was the first's duplicate.
            #expect(handler.payloads == ["first", "other", "third"])
            await herald.shutdown()
            handler.releaseAll()
            // The third was still being handled at the stop: it is in the inbox for the next start.
            let state = try SQLiteStore(directory: directory).load(window: configuration.deduplication, now: WallClock.nowMilliseconds())
            #expect(state.pending.map(\.messageID) == ["x"])
            #expect(state.pending.first.map { String(decoding: $0.userInfo, as: UTF8.self).contains("third") } == true)
        }
    }

    @Test("a message pending at start is held by its ID before the replay: a resend while the plugins start is a duplicate")
    func pendingHeldBeforeReplay() async throws {
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1234567890")
            configuration.deduplication = DeduplicationWindow(maximumCount: 0)
            let (store, token) = try await Self.store(in: directory, configuration: configuration, pending: "pending", payload: "first")
            let handler = HoldingHandler()
            // Sends the pending message's ID again from its start, before the instance replays.
            let resending = SendingPlugin(message: dataMessage(id: "pending", token: token, payload: "resent"))
            let herald = try await Self.started(on: store, configuration: configuration, plugins: [handler, resending])
            #expect(resending.outcome.withLock { $0.flatMap { try? $0.get() } } == "pending")
            #expect(await eventually { handler.isHolding("first") })
            handler.releaseAll()
            try await herald.waitUntilIdle()
            #expect(handler.payloads == ["first"])
            await herald.shutdown()
        }
    }

    @Test(
        "a start counts toward a pending message's quarantine once the plugins have started: failed starts do not, nor do messages accepted while the plugins start"
    )
    func startsCountedAfterThePlugins() async throws {
        struct StartFailure: Error {}
        final class FailingPlugin: HeraldPlugin, Sendable {
            func start(_ context: PluginContext) async throws { throw StartFailure() }
        }
        try await withDataDirectory { directory in
            var configuration = Herald.Configuration(senderID: "1234567890")
            configuration.maxReplays = 1
            configuration.shutdownGracePeriod = .milliseconds(50)
            let (store, token) = try await Self.store(in: directory, configuration: configuration, pending: "old", payload: "old")
            // More failed starts than the one replay allowed, each after the store was loaded.
            for _ in 0..<3 {
                let herald = Herald(configuration: patientShutdown(configuration), store: store)
                try herald.register(FailingPlugin())
                await #expect(throws: HeraldError.self) { try await herald.start() }
                store.close()
            }
            #expect(try store.loadLeavingTheStartUncounted(window: configuration.deduplication, now: 0)?.replays == ["old": 0])
            store.close()
            // The first start that gets through replays it (its one replay), and a message sent while it started is
            // not counted; both are still being handled at the stop.
            let handler = HoldingHandler()
            // Sends a new message from its start, before the instance counts the start and replays.
            let sending = SendingPlugin(message: dataMessage(id: "new", token: token, payload: "new"))
            let herald = try await Self.started(on: store, configuration: configuration, plugins: [handler, sending])
            #expect(sending.outcome.withLock { $0.flatMap { try? $0.get() } } == "new")
            #expect(await eventually { handler.isHolding("old") && handler.isHolding("new") }, "old is replayed, not quarantined")
            await herald.shutdown()
            handler.releaseAll()
            let state = try store.loadLeavingTheStartUncounted(window: configuration.deduplication, now: 0)
            #expect(state?.replays == ["old": 1, "new": 0])
            #expect(try store.quarantine().isEmpty)
            store.close()
            // The next start is old's second replay, past the one allowed: quarantined; new gets its first.
            let next = HoldingHandler()
            let again = try await Self.started(on: store, configuration: configuration, plugins: [next])
            #expect(await eventually { next.isHolding("new") })
            #expect(await eventually { (try? store.quarantine().map(\.record.messageID)) == ["old"] })
            next.releaseAll()
            await again.shutdown()
        }
    }
}
