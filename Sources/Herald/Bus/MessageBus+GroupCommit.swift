// The durable inbox: accepted messages are committed in groups (one store commit for every message of a loop turn;
// `SQLiteStore`'s is one frame appended to its log and one `fdatasync`) off the loop, their senders answered after;
// what the inbox held at start is replayed. Finished entries leave the inbox with the next group of accepted messages
// (or on their own a moment later when none comes): nobody waits for their removal, so it never costs a commit of its
// own on the senders' path.

extension MessageBus {
    /// Commits the current batch at the end of this loop turn, so that every message accepted in the turn (and
    /// while a commit is running) shares one store commit: one flush for many messages (group commit).
    func scheduleCommit() {
        guard !commitScheduled, !commitRunning else { return }
        if let expected = expectedGroup {
            // Receivers paused (too many messages in flight) bring nothing more: no wait then.
            if batch.accepted.count < expected.size, !paused, loop.now < expected.until {
                if groupWait == nil {
                    groupWait = loop.scheduleTask(deadline: expected.until) { [self] in
                        groupWait = nil
                        expectedGroup = nil
                        if !batch.isEmpty { scheduleCommit() }
                    }
                }
                return
            }
            expectedGroup = nil
            if let wait = groupWait {
                groupWait = nil
                _ = wait.cancel()
            }
        }
        commitScheduled = true
        loop.execute { [self] in
            commitScheduled = false
            runCommit()
        }
    }

    /// Finished entries (and nothing else) wait: the next commit of accepted messages takes them along, and when
    /// none comes within the configuration's `finishedEntriesCommitDelay` they are committed on their own. Their removal answers nobody,
    /// so a commit of its own would only delay the next group of accepted messages by one fsync. A crash in the
    /// meantime replays them at the next start, as it would a removal whose commit had not ended yet.
    func scheduleFinishedCommit() {
        guard !finishedCommitScheduled else { return }
        finishedCommitScheduled = true
        loop.scheduleTask(in: configuration.finishedEntriesCommitDelay) { [self] in
            finishedCommitScheduled = false
            if !batch.isEmpty { scheduleCommit() }
        }
    }

    /// After a commit that answered `answered` senders: the next commit waits for a group as large as those senders
    /// and the messages already waiting (senders that send again once answered come back within a moment), but never
    /// longer than the last commit took (at most a millisecond). Under a steady load of concurrent senders the
    /// commits then take everyone instead of alternating between two halves of them: half the flushes for the same
    /// messages. A lone sender's group is its next message, committed as it comes; senders whose next message does not
    /// come cost the messages waiting at most that wait. No group is waited for past ``groupWaitLimit`` messages.
    private func expectGroup(answered: Int) {
        let size = min(answered + batch.accepted.count, Self.groupWaitLimit, configuration.maxInFlight)
        guard size > batch.accepted.count else { return }
        let wait = configuration.groupCommitWait ?? min(lastCommitDuration, .milliseconds(1))
        expectedGroup = (size, loop.now + wait)
    }

    /// A group this large is committed without waiting for more: its flush's share per message is already small next
    /// to the rest of a message's cost, and a pipelining sender (hundreds of messages a commit, up to `maxInFlight`)
    /// would only be slowed by a wait for as many again.
    static let groupWaitLimit = 64

    /// The room a new batch's array is given ahead of its messages when the last batch's held `count`.
    private static func batchRoom(after count: Int) -> Int { min(max(2 * count, 8), 1024) }

    /// Whether the batch holds more than finished entries: accepted messages (whose senders wait) or quarantined ones.
    private var batchNeedsCommit: Bool { !batch.accepted.isEmpty || !batch.quarantined.isEmpty }

    private func runCommit() {
        guard !commitRunning else { return }
        guard !batch.isEmpty else {
            resumeCommitWaiters()
            return
        }
        commitRunning = true
        commitStartedAt = loop.now
        let committing = batch
        committingAcks = batchAcks
        batch = StoreBatch()
        batchAcks = []
        // The next batch's arrays start with room for twice as many as this one took, at least eight (up to 1,024):
        // grown from empty, each array of a batch of eight messages was allocated and copied four times, and with room
        // for only as many as the last batch, a batch larger than the one before it still grew its arrays (under load
        // the sizes of successive batches vary by a few messages).
        let expected = Self.batchRoom(after: committing.accepted.count)
        batch.accepted.reserveCapacity(expected)
        batchAcks.reserveCapacity(expected)
        batch.finished.reserveCapacity(Self.batchRoom(after: committing.finished.count))
        let store = self.store
        let window = configuration.deduplication
        // What the loop gathered to write goes out before the commit that may remove the messages it was about (a log
        // line per notification): a crash never leaves a message gone from the inbox with its line unwritten.
        loop.writeGatheredOutput()
        loop.offload(
            { () throws -> Void in
                try store.commit(committing, window: window, now: WallClock.nowMilliseconds())
            },
            then: { [self] result in
                commitRunning = false
                lastCommitDuration = loop.now - commitStartedAt
                let acks = committingAcks
                committingAcks = []
                let answered = acks.count
                switch result {
                case .success:
                    committed(consume acks, batch: committing)
                    expectGroup(answered: answered)
                case .failure(let error): commitFailed(acks, batch: committing, error: error)
                }
                // Whoever waits for a flush is answered after every attempt, so a failing store cannot hang shutdown.
                resumeCommitWaiters()
                if !batch.isEmpty {
                    if commitRetryDelay > .zero {
                        loop.scheduleTask(in: commitRetryDelay) { [self] in scheduleCommit() }
                    } else if batchNeedsCommit {
                        scheduleCommit()
                    } else {
                        scheduleFinishedCommit()
                    }
                }
            })
    }

    /// The commit of `committing`, with the messages of `acks`, succeeded: their senders (and those following them)
    /// are answered, the messages go on to their handlers, and the finished ones it removed leave ``inboxIDs``.
    private func committed(_ acks: consuming [PendingAck], batch committing: StoreBatch) {
        commitRetryDelay = .zero
        // What is held by ID is settled before any sender is answered: an answer may send again at once. Only
        // messages whose ID a sender gave are held by ID: with none, no hash of each ID.
        if !inboxIDs.isEmpty {
            for id in committing.finished { inboxIDs.removeValue(forKey: id) }
            for id in committing.quarantined { inboxIDs.removeValue(forKey: id) }
            for index in acks.indices {
                if let place = inboxIDs.index(forKey: acks[index].id) { inboxIDs.values[place] = .held }
                // A message this one replaced is not in the inbox: from now on the window alone decides whether its
                // ID is a duplicate's. Followers are rare (a second send of a message whose commit is under way).
                guard !followers.isEmpty else { continue }
                for follower in followers[acks[index].id] ?? [] where follower.id != acks[index].id {
                    inboxIDs.removeValue(forKey: follower.id)
                }
            }
        }
        // By index, each message taken out of its ack: it goes on to the handlers without a copy.
        for index in acks.indices {
            let id = acks[index].id
            acks[index].completion(.success(id))
            // No hash of the ID without followers.
            if !followers.isEmpty {
                for follower in followers.removeValue(forKey: id) ?? [] { follower.completion(.success(follower.id)) }
            }
            if draining {
                // Committed after shutdown began: the inbox replays it at the next start.
                inFlight -= 1
            } else {
                // Each ack's message is taken once, here.
                admitted(acks[index].message.take()!, id: id)
            }
        }
        if inFlight == 0 { notifyIdle() }
    }

    /// The commit of `acks` failed: their senders are refused, and the finished entries of `committing` wait for
    /// a later commit, tried with backoff.
    private func commitFailed(_ acks: [PendingAck], batch committing: StoreBatch, error: any Error) {
        logger.error(
            "could not commit to the store; the senders of this batch are refused",
            metadata: [
                "error": "\(error)", "messages": "\(acks.count)",
            ])
        let refusal = MessageError(.storeUnavailable("\(error)"))
        // Every refused ID is forgotten before any sender is answered: an answer may send again at once, and that
        // send is a new message.
        var refused: [(ack: PendingAck, followers: [(id: String, completion: Answer)])] = []
        refused.reserveCapacity(acks.count)
        for ack in acks {
            let following = followers.removeValue(forKey: ack.id) ?? []
            for id in CollectionOfOne(ack.id) + following.map(\.id) {
                seenIDs.remove(id)
                inboxIDs.removeValue(forKey: id)
            }
            inFlight -= 1
            refused.append((ack, following))
        }
        for (ack, following) in refused {
            ack.completion(.failure(refusal))
            for follower in following { follower.completion(.failure(refusal)) }
            if let message = ack.message { dropped(message, reason: .storeFailure, detail: "\(error)") }
        }
        // Entries that finished stay in the inbox until a later commit removes them; retry with backoff.
        batch.finished.append(contentsOf: committing.finished)
        batch.quarantined.append(contentsOf: committing.quarantined)
        commitRetryDelay = min(max(commitRetryDelay * 2, .milliseconds(50)), .seconds(5))
        if inFlight == 0 { notifyIdle() }
        if paused, inFlight <= configuration.maxInFlight / 2 { resumeReceivers() }
    }

    private func resumeCommitWaiters() {
        let waiters = commitWaiters
        commitWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    /// Commits what is waiting (finished entries included): returns once the store has it, or after three
    /// attempts failed (what could not be written is replayed at the next start).
    func flushStore() async {
        guard store.isDurable else { return }
        for _ in 0..<3 {
            let pending: Bool = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let queued = loop.enqueue(
                    .closure { [self] in
                        guard commitRunning || !batch.isEmpty else {
                            continuation.resume(returning: false)
                            return
                        }
                        commitWaiters.append(CommitWaiter(continuation: continuation))
                        if !commitRunning { runCommit() }
                    })
                if !queued { continuation.resume(returning: false) }
            }
            if !pending { return }
        }
    }

    /// Delivers messages the inbox held at start (accepted, never finished): flagged as replays; expired ones
    /// are dropped; of several with one collapse key only the newest is delivered. Loop thread only.
    func replay(_ records: [InboxRecord], replays: [String: Int] = [:], path: String) {
        loop.preconditionInEventLoop()
        var messages: [RemoteMessage] = []
        for record in records {
            do {
                messages.append(try record.message(path: path))
            } catch {
                logger.error("an inbox entry could not be read; it is dropped", metadata: ["error": "\(error)"])
                batch.finished.append(record.messageID)
            }
        }
        var newestByCollapseKey: [String: Int] = [:]
        for (index, message) in messages.enumerated() {
            if let key = message.collapseKey { newestByCollapseKey[key + "\u{0}" + message.target.description] = index }
        }
        let now = WallClock.nowSeconds()
        var toDeliver: [(message: RemoteMessage, id: String)] = []
        for (index, message) in messages.enumerated() {
            let id = message.messageID ?? ""
            seenIDs.insert(id)
            if let replays = replays[id], replays > configuration.maxReplays {
                logger.error(
                    "a message was still pending after several starts (its handling may crash the process): quarantined, not replayed again",
                    metadata: [
                        "message_id": "\(id)", "starts": "\(replays)", "max_replays": "\(configuration.maxReplays)",
                    ])
                dropped(message, reason: .quarantined, detail: "pending at \(replays) starts")
                batch.quarantined.append(id)
            } else if let key = message.collapseKey, newestByCollapseKey[key + "\u{0}" + message.target.description] != index {
                dropped(message, reason: .collapsed, detail: "replaced by a newer message at replay")
                batch.finished.append(id)
            } else if message.isExpired(atSeconds: now) {
                dropped(message, reason: .expired, detail: "expired in the inbox before replay")
                batch.finished.append(id)
            } else {
                replayedIDs.insert(id)
                toDeliver.append((message, id))
            }
        }
        // All of them are in flight before the first one's handlers start (they start at once and may finish at
        // once): the bus is idle only when the whole replay is handled, never between two of its messages.
        inFlight += toDeliver.count
        for entry in toDeliver { admitted(entry.message, id: entry.id) }
        if inFlight >= configuration.maxInFlight { pauseReceivers() }
        if !batch.isEmpty { scheduleCommit() }
        logger.info("replayed the inbox", metadata: ["entries": "\(records.count)", "delivered": "\(toDeliver.count)"])
    }
}

/// A flush waiting for a commit attempt; resumed with whether anything was left to commit.
struct CommitWaiter {
    let continuation: CheckedContinuation<Bool, Never>
    func resume() { continuation.resume(returning: true) }
}
