import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// The SQLite store, with the size of every commit it is given recorded.
final class CommitCountingStore: HeraldStore, Sendable {
    struct Commit: Sendable {
        let accepted: Int
        let finished: Int
    }

    let inner: SQLiteStore
    let commits = Locked<[Commit]>([])

    init(directory: String) throws {
        inner = try SQLiteStore(directory: directory)
    }

    var isDurable: Bool { inner.isDurable }

    func close() { inner.close() }

    func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState {
        try inner.load(window: window, now: now)
    }

    func save(identity: StoredIdentity) throws(StoreError) {
        try inner.save(identity: identity)
    }

    func setTopic(_ name: String, subscribed: Bool) throws(StoreError) {
        try inner.setTopic(name, subscribed: subscribed)
    }

    func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        try inner.commit(batch, window: window, now: now)
        commits.withLock { $0.append(Commit(accepted: batch.accepted.count, finished: batch.finished.count)) }
    }

    func deleteAll() throws(StoreError) {
        try inner.deleteAll()
    }
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
