/// A store that keeps everything in memory: for tests, and for hosts that want no disk. Nothing survives the
/// process, so the durable inbox is off with it (`isDurable == false`).
public final class InMemoryStore: HeraldStore, Sendable {
    private let state = Locked(Contents())

    private struct Contents {
        var identity: StoredIdentity?
        var topics: Set<String> = []
        var seen: [(id: String, at: Int64)] = []
        var pending: [InboxRecord] = []
        var replays: [String: Int] = [:]
    }

    public init() {}

    public var isDurable: Bool { false }

    public func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState {
        state.withLock { contents in
            for record in contents.pending { contents.replays[record.messageID, default: 0] += 1 }
            return StoredState(
                identity: contents.identity, topics: contents.topics, seenMessageIDs: contents.seen.map(\.id), pending: contents.pending,
                replays: contents.replays)
        }
    }

    public func save(identity: StoredIdentity) throws(StoreError) {
        state.withLock { $0.identity = identity }
    }

    public func setTopic(_ name: String, subscribed: Bool) throws(StoreError) {
        state.withLock { contents in
            if subscribed { contents.topics.insert(name) } else { contents.topics.remove(name) }
        }
    }

    public func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        state.withLock { contents in
            contents.pending.append(contentsOf: batch.accepted)
            contents.seen.append(contentsOf: batch.accepted.lazy.filter(\.deduplicates).map { ($0.messageID, now) })
            if !batch.finished.isEmpty || !batch.quarantined.isEmpty {
                let finished = Set(batch.finished + batch.quarantined)  // no quarantine here: they just leave
                contents.pending.removeAll { finished.contains($0.messageID) }
                for id in finished { contents.replays[id] = nil }
            }
            let oldest = window.oldestKept(now: now)
            contents.seen.removeAll { $0.at < oldest }
            if contents.seen.count > window.maximumCount { contents.seen.removeFirst(contents.seen.count - window.maximumCount) }
        }
    }

    public func deleteAll() throws(StoreError) {
        state.withLock { $0 = Contents() }
    }
}
