/// How a receiver's send body is to be read and where it goes: its wire format, an ID the transport keeps for
/// the message, whether the answer waits for the handlers, and (in a gateway) where valid sends are forwarded.
public struct SendContext: Sendable {
    /// The wire format of a send body.
    public enum Format: Sendable {
        /// An FCM HTTP v1 send body: `{"message": {...}, "validate_only": false}`.
        case fcm
        /// An APNs provider payload with its `apns-*` headers (matched case-insensitively), for `deviceToken`.
        case apns(headers: [String: String], deviceToken: String)
    }

    /// How the body is written.
    public var format: Format
    /// The message's ID when the transport has one that stays the same across redeliveries (a JetStream
    /// stream sequence), so the de-duplication window and the inbox know a redelivery for what it is. `nil`: a
    /// new ID (for APNs, `apns-id` when the sender gives one).
    public var messageID: String?
    /// Answer only once the message's handlers have finished; see
    /// ``MessageBus/deliver(_:validateOnly:answerWhenHandled:completion:)``.
    public var answerWhenHandled: Bool
    /// Gateway mode: a valid send goes to this forwarder instead of this instance's bus, and the forwarder's
    /// answer is the outcome.
    public var forwarder: (any SendForwarder)?
    /// The latest the message may be delivered, in seconds since 1970, when the transport knows more than the body
    /// (a message stored since it was sent, whose time to live counts from then): the message expires at the
    /// earlier of this and its own expiration, and is dropped (`message_dropped`, reason `expired`) after it.
    public var expiresAt: Int64?

    public init(
        format: Format = .fcm, messageID: String? = nil, answerWhenHandled: Bool = false, forwarder: (any SendForwarder)? = nil,
        expiresAt: Int64? = nil
    ) {
        self.format = format
        self.messageID = messageID
        self.answerWhenHandled = answerWhenHandled
        self.forwarder = forwarder
        self.expiresAt = expiresAt
    }
}

/// A receiver's session (a connection) that answers its senders itself, told each outcome by
/// ``MessageBus/submit(_:_:answering:tag:)`` with the tag it gave: one object for all its messages where
/// ``MessageBus/submit(_:_:completion:)`` takes a closure per message.
public protocol SubmissionAnswering: AnyObject {
    /// The outcome of the submission given `tag`. Called once per submission, on the loop thread.
    func answer(_ outcome: SendOutcome, tag: Int)
}

/// What a receiver answers its sender with, from ``MessageBus/submit(_:_:completion:)``.
public enum SendOutcome: Sendable, Equatable {
    /// The message was accepted (with `validate_only`: it is valid), under this ID.
    case accepted(messageID: String)
    /// The body is not a valid send request; it was recorded as a `message_dropped` event (reason `invalid`).
    case invalid(MessageError)
    /// The body was valid, and the message was refused: not registered here, the bus is full or shutting down,
    /// the store failed (or the forwarder refused it).
    case refused(MessageError)

    /// The error to answer with, when the message was not accepted.
    public var error: MessageError? {
        switch self {
        case .accepted: nil
        case .invalid(let error), .refused(let error): error
        }
    }
}

extension MessageBus {
    /// The way in for receivers: decodes `body` as `context` says, records it when it is not a valid send
    /// request, and delivers the message (or forwards it, in a gateway). `completion` gets the outcome to answer
    /// the sender with: at once for an invalid body, otherwise as
    /// ``deliver(_:validateOnly:answerWhenHandled:completion:)`` answers. Loop thread only; `completion` runs on
    /// the loop thread. The receiver keeps only its transport: framing, and writing the answer in its wire shape.
    public func submit(_ body: [UInt8], _ context: SendContext, completion: @escaping (SendOutcome) -> Void) {
        submit(body, context, answer: .submission(completion))
    }

    /// ``submit(_:_:completion:)`` for a receiver's session that answers its senders itself: the outcome goes to
    /// `session`'s ``SubmissionAnswering/answer(_:tag:)`` with `tag` (say, the answer's place in the session's order),
    /// so that no closure is made per message. The bus keeps `session` until it has answered.
    public func submit(_ body: [UInt8], _ context: SendContext, answering session: any SubmissionAnswering, tag: Int) {
        submit(body, context, answer: .answering(session, tag: tag))
    }

    private func submit(_ body: [UInt8], _ context: SendContext, answer completion: Answer) {
        loop.preconditionInEventLoop()
        var request: FCMSendRequest
        do {
            request = try decode(body, context)
        } catch {
            recordInvalid(error)
            completion.send(.invalid(error))
            return
        }
        if let forwarder = context.forwarder {
            let answer = LoopBound(completion, loop: loop)
            // On the loop's task executor: the forwarder's nonisolated async calls continue on the loop thread at
            // once, instead of each going through the loop's queue (as with the loop itself, a serial executor).
            Task(executorPreference: loop.taskExecutor) {
                switch await forwarder.forward(request, body: body) {
                case .success(let id): answer.value.send(.accepted(messageID: id))
                case .failure(let error): answer.value.send(.refused(error))
                }
            }
            return
        }
        if let limit = context.expiresAt { request.message.expiration = min(request.message.expiration ?? limit, limit) }
        let validateOnly = request.validateOnly
        // An FCM v1 body has no message ID: without one from the transport, the decoder made it.
        let newID: Bool
        switch context.format {
        case .fcm: newID = context.messageID == nil
        case .apns: newID = false
        }
        // The message is moved out of the request, not copied field by field.
        deliver(
            (consume request).message, validateOnly: validateOnly, answerWhenHandled: context.answerWhenHandled,
            newID: newID, answer: completion
        )
    }

    /// ``submit(_:_:completion:)`` from any context: returns the outcome to answer the sender with.
    public func submit(_ body: [UInt8], _ context: SendContext) async -> SendOutcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<SendOutcome, Never>) in
            let queued = loop.enqueue(
                .closure { [self] in
                    submit(body, context) { continuation.resume(returning: $0) }
                })
            if !queued { continuation.resume(returning: .refused(MessageError(.shuttingDown))) }
        }
    }

    private func decode(_ body: [UInt8], _ context: SendContext) throws(MessageError) -> FCMSendRequest {
        guard let id = context.messageID else { return try decode(body, context.format, decoding) }
        var decoding = self.decoding
        decoding.makeMessageID = { id }
        return try decode(body, context.format, decoding)
    }

    private func decode(_ body: [UInt8], _ format: SendContext.Format, _ decoding: borrowing DecodingContext) throws(MessageError)
        -> FCMSendRequest
    {
        switch format {
        case .fcm:
            return try FCMSendRequest.decode(body, context: decoding)
        case .apns(let headers, let deviceToken):
            let message = try APNsRequest.decode(payload: body, headers: headers, deviceToken: deviceToken, context: decoding)
            return FCMSendRequest(message: message, validateOnly: false)
        }
    }
}
