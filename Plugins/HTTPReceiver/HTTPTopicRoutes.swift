import Herald
import HeraldHTTP

// Topic management on a sender's behalf: FCM v1's `registrations/{token}/topicSubscriptions` and the Instance ID
// API's batch calls, with the query and percent-decoding they need.

extension HTTPAPI {
    /// How a topic change is made: on this instance (`TopicControl/change(_:add:tokens:)`, which throws what its
    /// store throws), or by the fleet's instances through a gateway's `TopicForwarder` (which answers failures per
    /// token).
    typealias TopicChanger = @Sendable (_ topic: String, _ add: Bool, _ tokens: [String]) async throws -> [TopicChangeResult]

    /// This instance's topic changes, or the forwarder's in gateway mode.
    var topicChanger: TopicChanger {
        if let forwarder = options.forwarder as? any TopicForwarder {
            return { topic, add, tokens in await forwarder.changeTopic(topic, add: add, tokens: tokens) }
        }
        let control = context.topics
        return { topic, add, tokens in try await control.change(topic, add: add, tokens: tokens) }
    }

    /// FCM topic management: `POST .../registrations/{token}/topicSubscriptions?topic_name=T` subscribes,
    /// `DELETE .../registrations/{token}/topicSubscriptions/{T}?allow_missing=true` unsubscribes. A token no instance
    /// holds is `404 UNREGISTERED`; an instance a gateway could not reach, `503 UNAVAILABLE` (or `500 INTERNAL`).
    func routeTopics(_ request: HTTPRequest, parts: [String], responder: HTTPResponder) {
        if let refusal = refusal(needing: .manageTopics) { return responder.respond(refusal) }
        let method = request.method.rawValue
        let project = parts[2]
        guard project == context.projectID else {
            let error = MessageError(.senderMismatch(expected: context.projectID, got: project))
            respond(responder, status: error.status.httpStatus, body: error.fcmErrorBody)
            return
        }
        let token = HTTPAPI.percentDecoded(parts[4])
        let query = HTTPAPI.queryItems(request.target)
        let topic: String?
        switch (method, parts.count) {
        case ("POST", 6): topic = query["topic_name"]
        case ("DELETE", 7): topic = HTTPAPI.percentDecoded(parts[6])
        default:
            respond(
                responder, status: 405,
                body: googleError(405, "METHOD_NOT_ALLOWED", "Use POST to subscribe and DELETE to unsubscribe."))
            return
        }
        guard let given = topic else {
            respond(responder, status: 400, body: MessageError(.missingField("topic_name")).fcmErrorBody)
            return
        }
        let name: String
        do {
            name = try TopicName.validate(given)
        } catch {
            respond(responder, status: 400, body: error.fcmErrorBody)
            return
        }
        let change = topicChanger
        let add = method == "POST"
        let allowMissing = query["allow_missing"] == "true"
        let resource = "projects/\(project)/registrations/\(token)/topicSubscriptions/\(given)"
        Task(executorPreference: context.loop) { [weak self] in
            let answer: (Int, JSONValue)
            do {
                switch try await change(name, add, [token]).first ?? .notFound {
                case .notFound:
                    let error = MessageError(.unregistered(.token(token)))
                    answer = (error.status.httpStatus, error.fcmErrorBody)
                case .failed(let status, let message):
                    answer = (
                        status.httpStatus,
                        [
                            "error": [
                                "code": .int(Int64(status.httpStatus)), "message": .string(message), "status": .string(status.rawValue),
                            ]
                        ]
                    )
                case .applied where add: answer = (200, ["name": .string(resource)])
                case .applied(let wasSubscribed) where wasSubscribed || allowMissing: answer = (200, [:])
                case .applied:
                    answer = (404, ["error": ["code": 404, "message": .string("Not subscribed to \(name)."), "status": "NOT_FOUND"]])
                }
            } catch let error as MessageError {
                answer = (error.status.httpStatus, error.fcmErrorBody)
            } catch {
                answer = (500, MessageError(.handlerFailed("\(error)")).fcmErrorBody)
            }
            self?.respond(responder, status: answer.0, body: answer.1)
        }
    }

    /// Topic management as the Instance ID API does it, which the Admin SDKs' `subscribeToTopic` calls (and
    /// firebase-admin Python's `*_legacy` ones) use: `POST /iid/v1:batchAdd` or `:batchRemove` with
    /// `{"to": "/topics/T", "registration_tokens": [...]}`. Answers one result per token, in order
    /// (`TopicChangeResult/instanceIDResult`): `{}` for a token changed, `{"error": "NOT_FOUND"}` for a token no
    /// instance holds (on an instance: any but its own), and through a gateway `{"error": "INTERNAL", "message": ...}`
    /// for a token whose instance did not answer. A bad request gets 400 and `{"error": "INVALID_ARGUMENT", "message":
    /// ...}` (IID's `{"error": code}` shape, with the reason beside it).
    func routeInstanceID(_ request: HTTPRequest, add: Bool, responder: HTTPResponder) {
        if let refusal = refusal(needing: .manageTopics) { return responder.respond(refusal) }
        guard request.method == .post else {
            respond(responder, status: 405, body: ["error": "METHOD_NOT_ALLOWED", "message": "Use POST."])
            return
        }
        let topic: String
        let tokens: [String]
        do {
            (topic, tokens) = try HTTPAPI.decodeInstanceIDRequest(request.body)
        } catch {
            respond(responder, status: 400, body: ["error": "INVALID_ARGUMENT", "message": .string(error.message)])
            return
        }
        let change = topicChanger
        Task(executorPreference: context.loop) { [weak self] in
            let results: [TopicChangeResult]
            do {
                results = try await change(topic, add, tokens)
            } catch {
                let status = (error as? MessageError)?.status ?? .internal
                self?.respond(
                    responder, status: status.httpStatus, body: ["error": .string(status.rawValue), "message": .string("\(error)")])
                return
            }
            self?.respond(responder, status: 200, body: ["results": .array(results.map(\.instanceIDResult))])
        }
    }

    /// The Instance ID API's `GET /iid/info/{token}`: `{"platform": "LINUX"}` for a token an instance holds (this
    /// instance's own; through a gateway, any of the fleet's, asked of its instance), with `?details=true` also
    /// `"rel": {"topics": {"T": {}, ...}}` (the subscribed topics; Herald keeps no date of subscription, which Google's
    /// answer has as `addDate`); 404 with IID's `{"error": ...}` for any other token; through a gateway, 503
    /// `{"error": "UNAVAILABLE", "message": ...}` when the token's instance did not answer.
    func routeInstanceIDInfo(_ request: HTTPRequest, token: String, responder: HTTPResponder) {
        if let refusal = refusal(needing: .manageTopics) { return responder.respond(refusal) }
        guard request.method == .get else {
            respond(responder, status: 405, body: ["error": "METHOD_NOT_ALLOWED", "message": "Use GET."])
            return
        }
        let details = HTTPAPI.queryItems(request.target)["details"] == "true"
        let lookUp: @Sendable () async throws -> Set<String>?
        if let forwarder = options.forwarder as? any TopicForwarder {
            lookUp = { try await forwarder.subscribedTopics(token: token).get() }
        } else {
            let control = context.topics
            lookUp = { try await control.subscribedTopics(ifTokenIs: token) }
        }
        Task(executorPreference: context.loop) { [weak self] in
            do {
                guard let topics = try await lookUp() else {
                    self?.respond(responder, status: 404, body: ["error": "No information found about this instance id."])
                    return
                }
                var body: JSONObject = ["platform": "LINUX"]
                if details {
                    var listed = JSONObject()
                    for topic in topics.sorted() { listed[topic] = .object([:]) }
                    body["rel"] = ["topics": .object(listed)]
                }
                self?.respond(responder, status: 200, body: .object(body))
            } catch {
                let status = (error as? MessageError)?.status ?? .internal
                self?.respond(
                    responder, status: status.httpStatus, body: ["error": .string(status.rawValue), "message": .string("\(error)")])
            }
        }
    }

    /// The topic (without `/topics/`) and the tokens of an Instance ID batch request; at most 1000 tokens, as IID.
    static func decodeInstanceIDRequest(_ body: [UInt8]) throws(MessageError) -> (topic: String, tokens: [String]) {
        guard !body.isEmpty else { throw MessageError(.emptyPayload) }
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        guard let object = root.objectValue else { throw MessageError(.wrongType(field: "(root)", expected: "an object")) }
        for key in object.keys where key != "to" && key != "registration_tokens" {
            throw MessageError(.unknownField(key))
        }
        guard let to = object["to"] else { throw MessageError(.missingField("to")) }
        guard let toString = to.stringValue else { throw MessageError(.wrongType(field: "to", expected: "a string")) }
        let topic = try TopicName.validate(toString)
        guard let list = object["registration_tokens"] else { throw MessageError(.missingField("registration_tokens")) }
        guard let values = list.arrayValue, !values.isEmpty, values.count <= 1000 else {
            throw MessageError(.wrongType(field: "registration_tokens", expected: "an array of 1 to 1000 tokens"))
        }
        var tokens: [String] = []
        for value in values {
            guard let token = value.stringValue, !token.isEmpty else {
                throw MessageError(.wrongType(field: "registration_tokens", expected: "non-empty strings"))
            }
            tokens.append(token)
        }
        return (topic, tokens)
    }

    static func queryItems(_ path: String) -> [String: String] {
        guard let query = path.split(separator: "?", maxSplits: 1).dropFirst().first else { return [:] }
        var items: [String: String] = [:]
        for pair in query.split(separator: "&") {
            // Empty sides kept: `=` alone is an empty name, `=v` a value for it (omitting them left no parts for
            // `=`, and indexing that trapped: a crash of the daemon found by fuzzing).
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { percentDecoded(String($0)) }
            items[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return items
    }

    /// `%XX` and `+` decoded; malformed escapes are kept as written.
    static func percentDecoded(_ text: String) -> String {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8)[...]
        while let byte = iterator.popFirst() {
            if byte == UInt8(ascii: "%"), iterator.count >= 2,
                let value = UInt8(String(decoding: iterator.prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(value)
                iterator = iterator.dropFirst(2)
            } else {
                bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
