// Admission: whether a message is for this instance and may come in (validate-only, expiry, de-duplication, the
// in-flight bound), and, with the durable inbox, its place in the next commit.

extension MessageBus {
    // MARK: Admission: targeting, validate-only, expiry, de-duplication, the in-flight bound, the inbox

    /// Offers `message` to the bus and answers the sender through `completion` once the message is accepted
    /// (with the durable inbox: once it is committed to the store) or refused. With `validateOnly`, the message is
    /// checked and targeted but not delivered. Loop thread only; `completion` runs on the loop thread.
    ///
    /// `answerWhenHandled` is for receivers whose sender keeps the message until it is acknowledged (a JetStream
    /// consumer): without the durable inbox, the success answer then waits until the message's handlers have
    /// finished, so a crash before that leaves the message with the sender. With the durable inbox it changes
    /// nothing (the commit already keeps the message). A retry of a message already accepted is answered at once.
    public func deliver(
        _ message: RemoteMessage, validateOnly: Bool = false, answerWhenHandled: Bool = false,
        completion: @escaping (DeliveryOutcome) -> Void
    ) {
        deliver(message, validateOnly: validateOnly, answerWhenHandled: answerWhenHandled, answer: .delivery(completion))
    }

    /// ``deliver(_:validateOnly:answerWhenHandled:completion:)`` for either kind of caller. `newID`: the message's ID
    /// was made for it on receipt (an FCM v1 send, whose body cannot carry one), so no earlier message can have it.
    func deliver(
        _ message: consuming RemoteMessage, validateOnly: Bool, answerWhenHandled: Bool, newID: Bool = false,
        answer completion: Answer
    ) {
        loop.preconditionInEventLoop()
        guard !draining else {
            completion(.failure(MessageError(.shuttingDown)))
            return
        }
        let messageID: String
        // Whether the de-duplication window is asked and told: an ID made here or on receipt is nobody's retry, and
        // keeping it would only push out of the window IDs that senders and transports give (`apns-id`, a JetStream
        // sequence), which are the ones a retry repeats.
        var windowed = !newID
        if let id = message.messageID {
            messageID = id
        } else {
            // Every accepted message has an ID: the inbox and the de-duplication window are keyed by it.
            messageID = messageIDs.make()
            message.userInfo[UserInfoKey.messageID] = .string(messageID)
            windowed = false
        }
        guard let targeted = isTargeted(message, refusing: completion) else { return }
        if validateOnly {
            completion(.success(messageID))
            return
        }
        if !targeted {
            // FCM accepts topic sends that reach no subscriber; so does Herald, and records the drop.
            completion(.success(messageID))
            dropped(message, reason: .notTargeted, detail: "not subscribed")
            return
        }
        // One clock reading per message: the expiry check and, when it goes straight on, its receipt's timestamp.
        let now = WallClock.nowMilliseconds()
        if message.isExpired(atSeconds: now / 1000) {
            completion(.success(messageID))
            dropped(message, reason: .expired, detail: "expired before delivery")
            return
        }
        // Hashed once for the window's look-up, its insertion and, for a notification, `presented` (which hashes it
        // itself when the window was not asked).
        let messageIDHash: Int? = windowed ? messageID.hashValue : nil
        if let messageIDHash {
            // With the durable inbox an ID still held there is a duplicate's even when the window no longer has it.
            let place = durable && !inboxIDs.isEmpty ? inboxIDs[messageID] : nil
            if place != nil || seenIDs.contains(messageID, hash: messageIDHash) {
                // The sender retried a message already accepted: acknowledge again (once it is committed), deliver once.
                dropped(message, reason: .duplicate, detail: "already accepted")
                switch place {
                case .committing: followers[messageID, default: []].append((messageID, completion))
                case .replaced(let newer): followers[newer, default: []].append((messageID, completion))
                case .held, nil: completion(.success(messageID))
                }
                return
            }
        }
        guard inFlight < configuration.maxInFlight else {
            pauseReceivers()
            dropped(message, reason: .rejectedBackpressure, detail: "\(inFlight) in flight")
            completion(.failure(MessageError(.busy(limit: configuration.maxInFlight))))
            return
        }
        if let messageIDHash { seenIDs.insert(messageID, hash: messageIDHash) }
        inFlight += 1
        if inFlight >= configuration.maxInFlight { pauseReceivers() }
        guard durable else {
            if answerWhenHandled {
                admitted(
                    message, id: messageID, idHash: messageIDHash, at: now,
                    then: LoopBound({ completion(.success(messageID)) }, loop: loop))
            } else {
                completion(.success(messageID))
                admitted(message, id: messageID, idHash: messageIDHash, at: now)
            }
            return
        }
        admitToInbox(message, id: messageID, deduplicates: messageIDHash != nil, completion: completion)
    }

    /// Whether `message` is for this instance: its token or installation ID, a subscribed topic, or a condition
    /// that holds. `nil` when it names a token or an installation that is not this instance's: then it is
    /// refused (and recorded) here.
    private func isTargeted(_ message: RemoteMessage, refusing completion: Answer) -> Bool? {
        switch message.target {
        case .token(let token):
            guard token == identity.token else {
                dropped(message, reason: .notTargeted, detail: "unregistered token")
                // A token of this installation's that is no longer its own (tokens begin with the installation ID):
                // retired, and when, as APNs' 410 says it.
                if let retired = identity.tokenRetiredAt, token.utf8.count > identity.installationID.utf8.count,
                    token.hasPrefix(identity.installationID + ":")
                {
                    completion(.failure(MessageError(.tokenRetired(token, at: retired))))
                } else {
                    completion(.failure(MessageError(.unregistered(message.target))))
                }
                return nil
            }
            return true
        case .installation(let fid):
            guard fid == identity.installationID, identity.token != nil else {
                dropped(message, reason: .notTargeted, detail: "unregistered installation")
                completion(.failure(MessageError(.unregistered(message.target))))
                return nil
            }
            return true
        case .topic(let name):
            return topics.contains(name)
        case .condition(let text):
            return (try? TopicCondition.parse(text).evaluate(subscribedTo: topics)) ?? false
        }
    }

    /// With the durable inbox: the admitted message joins the next commit's batch; its sender is answered when
    /// that commit is done.
    private func admitToInbox(_ message: consuming RemoteMessage, id messageID: String, deduplicates: Bool, completion: Answer) {
        if let collapseKey = message.collapseKey,
            case let target = message.target,
            let index = batchAcks.firstIndex(where: { $0.message?.collapseKey == collapseKey && $0.message?.target == target })
        {
            // A newer message with the same collapse key replaces the one still waiting for its commit.
            // Its sender (and any retries of it) are answered with the newer message's commit outcome.
            let replaced = batchAcks.remove(at: index)
            batch.accepted.removeAll { $0.messageID == replaced.id }
            let moved = followers.removeValue(forKey: replaced.id) ?? []
            // A retry of the replaced message (or of one it had replaced) waits for the newer one's commit too.
            if !inboxIDs.isEmpty {
                if let place = inboxIDs.index(forKey: replaced.id) { inboxIDs.values[place] = .replaced(by: messageID) }
                for follower in moved {
                    if let place = inboxIDs.index(forKey: follower.id) { inboxIDs.values[place] = .replaced(by: messageID) }
                }
            }
            followers[messageID, default: []].append((replaced.id, replaced.completion))
            followers[messageID, default: []].append(contentsOf: moved)
            inFlight -= 1
            if inFlight == 0 { notifyIdle() }
            if let message = replaced.message { dropped(message, reason: .collapsed, detail: "replaced by \(messageID)") }
        }
        batch.accepted.append(InboxRecord(borrowing: message, messageID: messageID, deduplicates: deduplicates))
        // Moved into the ack, not copied (field by field) and destroyed at the end.
        batchAcks.append(PendingAck(message: consume message, id: messageID, completion: completion))
        if deduplicates { inboxIDs[messageID] = .committing }
        scheduleCommit()
    }

    /// Offers `message` to the bus from any context and returns the sender's answer (with the durable inbox,
    /// once the message is committed).
    public func deliver(_ message: RemoteMessage, validateOnly: Bool = false) async -> DeliveryOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<DeliveryOutcome, Never>) in
            let queued = loop.enqueue(
                .closure { [self] in
                    deliver(message, validateOnly: validateOnly) { continuation.resume(returning: $0) }
                })
            if !queued { continuation.resume(returning: .failure(MessageError(.shuttingDown))) }
        }
    }
}

/// Whoever waits for a message's answer: a caller of ``MessageBus/deliver(_:validateOnly:answerWhenHandled:completion:)``
/// (a ``DeliveryOutcome``) or a receiver that submitted a body (a ``SendOutcome``). An enum rather than a closure
/// wrapping the other: the answer to a receiver costs no allocation of its own.
enum Answer {
    case delivery((DeliveryOutcome) -> Void)
    case submission((SendOutcome) -> Void)
    /// A receiver's session answering its senders itself, with the tag it gave the submission.
    case answering(any SubmissionAnswering, tag: Int)

    func callAsFunction(_ outcome: DeliveryOutcome) {
        switch self {
        case .delivery(let completion):
            completion(outcome)
        case .submission, .answering:
            switch outcome {
            case .success(let id): send(.accepted(messageID: id))
            case .failure(let error): send(.refused(error))
            }
        }
    }

    /// The outcome of a submission (`.invalid` for a body that is not a send request): as it is to a submission's
    /// waiter, as the delivery's outcome to a caller of `deliver`.
    func send(_ outcome: SendOutcome) {
        switch self {
        case .delivery(let completion):
            switch outcome {
            case .accepted(let id): completion(.success(id))
            case .invalid(let error), .refused(let error): completion(.failure(error))
            }
        case .submission(let completion): completion(outcome)
        case .answering(let session, let tag): session.answer(outcome, tag: tag)
        }
    }
}
