// The work every peer server does per message, written once so that the peers differ only in their network
// stack: decode with Herald's FCMSendRequest.decode, check the target, call a no-op handler, write Herald's answer.

import Herald
import Synchronization

/// Message IDs as Herald makes them: a random 16-digit start, one atomic increment per message.
public final class MessageIDs: Sendable {
    private let next = Atomic<UInt64>(UInt64.random(in: 1_000_000_000_000_000...9_000_000_000_000_000))
    public init() {}
    public func make() -> String { String(next.add(1, ordering: .relaxed).newValue) }
}

/// The no-op handler: counts messages (the scripts ask for the count with SIGUSR1 and check it).
public final class CountingHandler: Sendable {
    public let handled = Atomic<Int>(0)
    public init() {}
    public func handle(_ message: RemoteMessage) { handled.add(1, ordering: .relaxed) }
}

/// One server's settings and handler, shared by every connection.
public struct PeerService: Sendable {
    public let project: String
    /// Messages for another token are answered UNREGISTERED, as Herald's bus does; nil accepts every token.
    public let token: String?
    public let decoding: DecodingContext
    public let handler: CountingHandler

    public init(project: String, token: String?, ids: MessageIDs = MessageIDs(), handler: CountingHandler = CountingHandler()) {
        self.project = project
        self.token = token
        self.decoding = DecodingContext(senderID: "1234567890", makeMessageID: { ids.make() })
        self.handler = handler
    }

    /// Decode, target check, dispatch: the HTTP status and the JSON answer, `{"name": ...}` or Google's error shape.
    public func answer(body: [UInt8]) -> (status: Int, body: [UInt8]) {
        do {
            let request = try FCMSendRequest.decode(body, context: decoding)
            let message = request.message
            if let token, case .token(let target) = message.target, target != token {
                let error = MessageError(.unregistered(.token(target)))
                return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
            }
            if !request.validateOnly { handler.handle(message) }
            return (200, fcmSendResponse(project: project, messageID: message.messageID ?? "").jsonBytes())
        } catch {
            return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
        }
    }

    /// The answer for a request to project `project` of the path: SENDER_ID_MISMATCH for another project.
    public func answer(project: String, body: [UInt8]) -> (status: Int, body: [UInt8]) {
        guard project == self.project else {
            let error = MessageError(.senderMismatch(expected: self.project, got: project))
            return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
        }
        return answer(body: body)
    }
}
