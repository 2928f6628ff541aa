import Dispatch
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// The SQLite store, with every commit it is given recorded (its size, and the IDs it accepts, when it starts); a commit
/// of the message `held` waits until the test opens the gate; with `holdingLoad`, so does the load at start, and with
/// `holdingDeletion`, `deleteAll()` (each until its ``HeldCall/letGo()``).
final class CommitCountingStore: HeraldStore, Sendable {
    struct Commit: Sendable {
        let accepted: Int
        let finished: Int
    }

    /// A call the test can hold: it tells when it has begun and, when held, waits there until ``letGo()``.
    struct HeldCall: Sendable {
        let holding: Bool
        private let begun = Locked(false)
        private let gate = DispatchSemaphore(value: 0)

        init(holding: Bool) { self.holding = holding }

        /// Whether the call has begun (and, when held, waits).
        var hasBegun: Bool { begun.withLock { $0 } }

        /// Called where the call begins: waits there when held.
        func enter() {
            begun.withLock { $0 = true }
            if holding { gate.wait() }
        }

        /// Lets a held call go on.
        func letGo() { gate.signal() }
    }

    let inner: SQLiteStore
    let held: String?
    let commits = Locked<[Commit]>([])
    /// The IDs each commit accepted, in the order the commits started.
    let started = Locked<[[String]]>([])
    private let gate = DispatchSemaphore(value: 0)
    /// The load at start.
    let load: HeldCall
    /// `deleteAll()`.
    let deletion: HeldCall

    init(directory: String, held: String? = nil, holdingLoad: Bool = false, holdingDeletion: Bool = false) throws {
        inner = try SQLiteStore(directory: directory)
        self.held = held
        load = HeldCall(holding: holdingLoad)
        deletion = HeldCall(holding: holdingDeletion)
    }

    var isDurable: Bool { inner.isDurable }

    func close() { inner.close() }

    func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState {
        try inner.load(window: window, now: now)
    }

    func loadLeavingTheStartUncounted(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState? {
        load.enter()
        return try inner.loadLeavingTheStartUncounted(window: window, now: now)
    }

    func countStart(of messageIDs: [String]) throws(StoreError) {
        try inner.countStart(of: messageIDs)
    }

    func save(identity: StoredIdentity) throws(StoreError) {
        try inner.save(identity: identity)
    }

    func setTopic(_ name: String, subscribed: Bool) throws(StoreError) {
        try inner.setTopic(name, subscribed: subscribed)
    }

    func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        let ids = batch.accepted.map(\.messageID)
        if !ids.isEmpty { started.withLock { $0.append(ids) } }
        if let held, ids.contains(held) { gate.wait() }
        try inner.commit(batch, window: window, now: now)
        commits.withLock { $0.append(Commit(accepted: batch.accepted.count, finished: batch.finished.count)) }
    }

    func deleteAll() throws(StoreError) {
        deletion.enter()
        try inner.deleteAll()
    }

    /// Lets the commit of `held` go on.
    func open() { gate.signal() }

    /// Whether a commit has started with `id`.
    func hasStarted(_ id: String) -> Bool { started.withLock { $0.contains { $0.contains(id) } } }
}

@Suite("Group commit: finished entries never cost the senders a commit of their own", .serialized)
struct GroupCommitTests {
    @Test("messages sent one at a time: each commit of a message takes the previous one's removal along")
    func finishedEntriesRideAlong() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory)
            let recorder = DurableRecorder()
            let count = 40
            // Removals wait up to ten minutes for the next message here, so that a slow machine (a sanitizer's run
            // beside a build took 233 s for these 40 messages, and one gap passed a minute) cannot make the next
            // message come after them. The stop commits what is left.
            var configuration = Herald.Configuration(senderID: "1234567890")
            configuration.finishedEntriesCommitDelay = .seconds(600)
            try await withStarted(Herald(configuration: patientShutdown(configuration), store: store), plugins: [recorder]) {
                herald async throws in
                let token = try await herald.token()
                for index in 0..<count {
                    _ = try await herald.deliver(dataMessage(id: "m\(index)", token: token)).get()
                }
                let commits = store.commits.withLock { $0 }
                // Each message was handled (and its entry finished) before the next was sent. One commit per message
                // for the removals as well would make `count` commits of finished entries alone.
                let finishedOnly = commits.filter { $0.accepted == 0 && $0.finished > 0 }.count
                let tookAlong = commits.filter { $0.accepted > 0 && $0.finished > 0 }.count
                #expect(finishedOnly == 0)
                #expect(tookAlong > 0)
                #expect(commits.reduce(0) { $0 + $1.accepted } == count)
            }
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            #expect(state.pending.isEmpty)
            #expect(recorder.messages.count == count)
        }
    }

    @Test("with no message following, the finished entries leave the inbox on their own a moment later")
    func finishedEntriesCommittedWhenIdle() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory)
            try await withStarted(
                Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store), plugins: [DurableRecorder()]
            ) {
                herald async throws in
                let token = try await herald.token()
                _ = try await herald.deliver(dataMessage(id: "alone", token: token)).get()
                // While Herald runs (not the flush at shutdown): a commit of the finished entry alone.
                #expect(await eventually { store.commits.withLock { $0.contains { $0.accepted == 0 && $0.finished == 1 } } })
            }
        }
    }
}

@Suite("Group commit: senders a commit answered are waited for, so that they go in one group")
struct GroupCommitWaitTests {
    /// Starts Herald on `store` with the given wait for groups, and gives `body` a function that delivers messages
    /// (by ID, on the loop, in one turn) and the answers so far.
    func withGatedHerald(
        _ store: CommitCountingStore, wait: Duration,
        _ body: (_ send: @escaping @Sendable ([String]) async throws -> Void, _ answers: Locked<[String]>) async throws -> Void
    ) async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.groupCommitWait = wait
        // Finished entries never commit on their own here: only the wait for a group ends it.
        configuration.finishedEntriesCommitDelay = .seconds(3600)
        try await withStarted(Herald(configuration: patientShutdown(configuration), store: store), plugins: [DurableRecorder()]) {
            herald async throws in
            let token = try await herald.token()
            let bus = try herald.bus
            let answers = Locked<[String]>([])
            try await body(
                { ids in
                    try await herald.loop.submit {
                        for id in ids {
                            bus.deliver(dataMessage(id: id, token: token)) { outcome in
                                answers.withLock { $0.append((try? outcome.get()) ?? "refused") }
                            }
                        }
                    }
                }, answers)
        }
    }

    @Test("the senders of a commit and those waiting meanwhile go in the next commit together", .timeLimit(.minutes(2)))
    func answeredSendersWaitedFor() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory, held: "a0")
            // An hour: whether the next commit waits cannot depend on how fast this machine sends the next messages.
            try await withGatedHerald(store, wait: .seconds(3600)) { send, answers in
                try await send(["a0", "a1", "a2", "a3"])
                #expect(await eventually { store.hasStarted("a0") })
                // Accepted while the first commit waits at the gate.
                try await send(["b0", "b1", "b2", "b3"])
                store.open()
                #expect(await eventually { answers.withLock { $0.count } == 4 })
                // The four answered and the four waiting make a group of eight: the four waiting are not committed yet
                // (checked on the loop, after every message sent so far was accepted there).
                try await send(["c0", "c1", "c2"])
                #expect(!store.hasStarted("b0"))
                try await send(["c3"])
                #expect(await eventually { answers.withLock { $0.count } == 12 })
                #expect(store.started.withLock { $0 } == [["a0", "a1", "a2", "a3"], ["b0", "b1", "b2", "b3", "c0", "c1", "c2", "c3"]])
            }
            let state = try SQLiteStore(directory: directory).load(window: DeduplicationWindow(), now: WallClock.nowMilliseconds())
            #expect(state.pending.isEmpty)
        }
    }

    @Test("a group that does not fill is committed when the wait ends", .timeLimit(.minutes(2)))
    func groupNotFilled() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory, held: "a0")
            try await withGatedHerald(store, wait: .milliseconds(50)) { send, answers in
                try await send(["a0", "a1", "a2", "a3"])
                #expect(await eventually { store.hasStarted("a0") })
                try await send(["b0", "b1"])
                store.open()
                // Nobody sends again: the two waiting are committed at the end of the wait, as a group of two.
                #expect(await eventually { answers.withLock { $0.count } == 6 })
                #expect(store.started.withLock { $0 } == [["a0", "a1", "a2", "a3"], ["b0", "b1"]])
            }
        }
    }

    @Test("a group of 64 waiting is committed at once, however many senders the commit before answered", .timeLimit(.minutes(2)))
    func largeGroupNotWaitedFor() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory, held: "a0")
            let first = (0..<100).map { "a\($0)" }
            let second = (0..<64).map { "b\($0)" }
            try await withGatedHerald(store, wait: .seconds(3600)) { send, answers in
                try await send(first)
                #expect(await eventually { store.hasStarted("a0") })
                try await send(second)
                store.open()
                // Without the limit the 64 would wait (an hour here) for the 100 answered to send again.
                #expect(await eventually { answers.withLock { $0.count } == 164 })
                #expect(store.started.withLock { $0 } == [first, second])
            }
        }
    }

    @Test("a lone sender is never waited for: each message is committed as it comes", .timeLimit(.minutes(2)))
    func loneSenderNotWaitedFor() async throws {
        try await withDataDirectory { directory in
            let store = try CommitCountingStore(directory: directory, held: "none")
            // With an hour's wait, a wait for a lone sender would hold its second message past the time limit.
            try await withGatedHerald(store, wait: .seconds(3600)) { send, answers in
                for index in 0..<20 {
                    try await send(["m\(index)"])
                    #expect(await eventually { answers.withLock { $0.count } == index + 1 })
                }
                #expect(store.started.withLock { $0 } == (0..<20).map { ["m\($0)"] })
            }
        }
    }
}
