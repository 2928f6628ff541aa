import HeraldTesting
import Testing

@testable import Herald

/// A gateway's forwarder that keeps what it is given and answers with a fixed ID.
final class KeepingForwarder: SendForwarder {
    private let forwarded = Locked<[(request: FCMSendRequest, body: [UInt8])]>([])

    func forward(_ request: FCMSendRequest, body: [UInt8]) async -> Result<String, MessageError> {
        forwarded.withLock { $0.append((request, body)) }
        return .success("forwarded-1")
    }

    var requests: [(request: FCMSendRequest, body: [UInt8])] { forwarded.withLock { $0 } }
}

@Suite("MessageBus.submit: receivers' one way in, from bytes to the outcome to answer with")
struct SubmitTests {
    @Test("an invalid body is .invalid and recorded; a valid one .accepted and delivered; one for another token .refused")
    func outcomes() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, _, sink in
            let bus = try herald.bus
            let token = try await herald.token()
            let invalid = await bus.submit(Array(#"{"message": {"token": 7}}"#.utf8), SendContext())
            #expect(invalid == .invalid(MessageError(.wrongType(field: "message.token", expected: "a string"))))
            let accepted = await bus.submit(Array(fcmBody(token: token, data: ["a": "b"]).utf8), SendContext())
            guard case .accepted(let id) = accepted else {
                Issue.record("not accepted: \(accepted)")
                return
            }
            let refused = await bus.submit(Array(fcmBody(token: "someone-else", data: ["a": "b"]).utf8), SendContext())
            #expect(refused.error?.status == .unregistered)
            if case .refused = refused {} else { Issue.record("not refused: \(refused)") }
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.map(\.messageID) == [id])
            await herald.shutdown()
            let drops = sink.events(named: .messageDropped).map { $0.parameters["reason"] }
            #expect(drops == ["invalid", "not_targeted"])
        }
    }

    @Test("APNs: the payload with its headers for the device token; the context's message ID stands in for a new one")
    func apnsAndMessageID() async throws {
        let delegate = RecordingDelegate()
        try await withHerald(plugins: [delegate]) { herald, _, _ in
            let bus = try herald.bus
            let token = try await herald.token()
            let apns = SendContext(format: .apns(headers: ["APNS-Priority": "5"], deviceToken: token), messageID: "stable-1")
            #expect(await bus.submit(Array(#"{"kind": "x"}"#.utf8), apns) == .accepted(messageID: "stable-1"))
            // A redelivery under the same ID is a duplicate: accepted again, delivered once.
            let fcm = SendContext(messageID: "stable-1")
            #expect(await bus.submit(Array(fcmBody(token: token, data: ["a": "b"]).utf8), fcm) == .accepted(messageID: "stable-1"))
            let empty = await bus.submit([], SendContext(format: .apns(headers: [:], deviceToken: token)))
            #expect(empty == .invalid(MessageError(.emptyPayload)))
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.count == 1)
            #expect(delegate.recorded.messages.first?.priority == .normal)
        }
    }

    @Test("answer when handled: the outcome waits until the message's handlers have finished")
    func answerWhenHandled() async throws {
        let gated = GatedHandler()
        try await withHerald(plugins: [gated]) { herald, _, _ in
            let bus = try herald.bus
            let token = try await herald.token()
            let answered = Locked(false)
            let submitted = Task {
                let outcome = await bus.submit(Array(fcmBody(token: token, data: ["a": "b"]).utf8), SendContext(answerWhenHandled: true))
                answered.withLock { $0 = true }
                return outcome
            }
            #expect(await eventually { gated.waiting == 1 })
            #expect(answered.withLock { $0 } == false)
            gated.open()
            guard case .accepted = await submitted.value else {
                Issue.record("not accepted")
                return
            }
            #expect(gated.handled == 1)
        }
    }

    @Test("a gateway's forwarder gets the valid send and answers it; nothing reaches this instance's handlers")
    func forwarding() async throws {
        let delegate = RecordingDelegate()
        let forwarder = KeepingForwarder()
        try await withHerald(plugins: [delegate]) { herald, _, _ in
            let bus = try herald.bus
            let body = Array(fcmBody(token: "any-instance", data: ["a": "b"]).utf8)
            #expect(await bus.submit(body, SendContext(forwarder: forwarder)) == .accepted(messageID: "forwarded-1"))
            #expect(await bus.submit(Array("{".utf8), SendContext(forwarder: forwarder)).error?.status == .invalidArgument)
            try await herald.waitUntilIdle()
            #expect(forwarder.requests.map(\.body) == [body])
            #expect(forwarder.requests.first?.request.message.target == .token("any-instance"))
            #expect(delegate.recorded.messages.isEmpty)
        }
    }

    @Test("a session answering its senders itself: each outcome (accepted, duplicate, invalid, refused, forwarded) with its tag")
    func answeringSession() async throws {
        let delegate = RecordingDelegate()
        let forwarder = KeepingForwarder()
        try await withHerald(plugins: [delegate]) { herald, _, _ in
            let bus = try herald.bus
            let token = try await herald.token()
            let session = AnsweringSession(loop: herald.loop)
            let good = Array(fcmBody(token: token, data: ["a": "b"]).utf8)
            try await herald.loop.submit {
                bus.submit(good, SendContext(), answering: session, tag: 7)
                bus.submit(good, SendContext(messageID: "given"), answering: session, tag: 8)
                bus.submit(good, SendContext(messageID: "given"), answering: session, tag: 9)
                bus.submit(Array("{".utf8), SendContext(), answering: session, tag: 10)
                bus.submit(Array(fcmBody(token: "someone-else", data: ["a": "b"]).utf8), SendContext(), answering: session, tag: 11)
                bus.submit(good, SendContext(forwarder: forwarder), answering: session, tag: 12)
            }
            #expect(await eventually { session.outcomes.count == 6 })
            let outcomes = session.outcomes
            #expect(outcomes.map(\.tag) == [7, 8, 9, 10, 11, 12])
            guard case .accepted(let id) = outcomes[0].outcome else {
                Issue.record("not accepted: \(outcomes[0])")
                return
            }
            #expect(outcomes[1].outcome == .accepted(messageID: "given") && outcomes[2].outcome == .accepted(messageID: "given"))
            // The same outcomes as the closure's.
            let invalid = await bus.submit(Array("{".utf8), SendContext())
            guard case .invalid = invalid else {
                Issue.record("not invalid: \(invalid)")
                return
            }
            #expect(outcomes[3].outcome == invalid)
            #expect(outcomes[4].outcome.error?.status == .unregistered)
            #expect(outcomes[5].outcome == .accepted(messageID: "forwarded-1"))
            #expect(outcomes.allSatisfy { $0.onLoop })
            try await herald.waitUntilIdle()
            #expect(delegate.recorded.messages.map(\.messageID) == [id, "given"])
        }
    }
}

/// Records what the bus tells it, and whether it was told on the loop thread.
final class AnsweringSession: SubmissionAnswering, Sendable {
    private let loop: EventLoop
    private let told = Locked<[(outcome: SendOutcome, tag: Int, onLoop: Bool)]>([])

    init(loop: EventLoop) {
        self.loop = loop
    }

    func answer(_ outcome: SendOutcome, tag: Int) {
        let onLoop = loop.inEventLoop
        told.withLock { $0.append((outcome, tag, onLoop)) }
    }

    var outcomes: [(outcome: SendOutcome, tag: Int, onLoop: Bool)] { told.withLock { $0 } }
}
