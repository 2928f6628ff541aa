import Herald

/// A gateway's topic change for the tokens of one instance, as it travels over NATS (a core request on
/// ``NATSSubjects/topicRequests(project:instance:)``, answered on its reply subject):
///
/// - request: `{"operation": "add" | "remove", "topic": "T", "registration_tokens": ["...", ...]}` (the topic without
///   `/topics/`, valid; the tokens the gateway found registered under the instance's installation ID), or
///   `{"operation": "info", "registration_tokens": ["..."]}` for the topics of one token (`GET /iid/info`), answered
///   `{"topics": ["T", ...]}` or `{"error": "NOT_FOUND"}`;
/// - reply: `{"results": [...]}`, one per token in order: `{"subscribed_before": true | false}` when applied (for a
///   removal, whether the topic was subscribed), `{"error": "NOT_FOUND"}` for a token that is not the instance's
///   current one (rotated meanwhile), `{"error": "UNAVAILABLE" | "INTERNAL", "message": ...}` when its store failed; a
///   request it cannot read gets `{"error": "INVALID_ARGUMENT", "message": ...}`.
struct NATSTopicRequest: Sendable, Hashable {
    enum Operation: String, Sendable { case add, remove, info }
    var operation: Operation
    /// The topic changed; empty for ``Operation/info``.
    var topic: String
    var tokens: [String]

    var add: Bool { operation == .add }

    var body: [UInt8] {
        var value: JSONObject = ["operation": .string(operation.rawValue), "registration_tokens": .array(tokens.map(JSONValue.string))]
        if operation != .info { value["topic"] = .string(topic) }
        return JSONValue.object(value).jsonBytes()
    }

    init(topic: String, add: Bool, tokens: [String]) {
        self.operation = add ? .add : .remove
        self.topic = topic
        self.tokens = tokens
    }

    /// A request for the topics of `token`.
    init(infoFor token: String) {
        self.operation = .info
        self.topic = ""
        self.tokens = [token]
    }

    /// Reads a request; throws a `MessageError` saying what is wrong with it.
    init(_ body: [UInt8]) throws(MessageError) {
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        guard let operation = root["operation"]?.stringValue.flatMap(Operation.init(rawValue:)) else {
            throw MessageError(.wrongType(field: "operation", expected: "\"add\", \"remove\" or \"info\""))
        }
        guard let values = root["registration_tokens"]?.arrayValue, !values.isEmpty else {
            throw MessageError(.wrongType(field: "registration_tokens", expected: "a non-empty array of tokens"))
        }
        let tokens = values.compactMap(\.stringValue)
        guard tokens.count == values.count else {
            throw MessageError(.wrongType(field: "registration_tokens", expected: "strings"))
        }
        if operation == .info {
            self.init(infoFor: tokens[0])
            return
        }
        guard let topic = root["topic"]?.stringValue else { throw MessageError(.missingField("topic")) }
        self.init(topic: try TopicName.validate(topic), add: operation == .add, tokens: tokens)
    }

    /// The reply to an info request: the topics of its token, `nil` when the token is not the instance's.
    static func infoReply(_ topics: Set<String>?) -> JSONValue {
        guard let topics else { return ["error": "NOT_FOUND"] }
        return ["topics": .array(topics.sorted().map(JSONValue.string))]
    }

    /// The topics an info reply names (`.some(nil)`: not the instance's token), or the failure it reports; `nil` when it
    /// is not an info reply.
    static func topics(ofInfoReply reply: [UInt8]) -> Result<Set<String>?, MessageError>? {
        guard let root = try? JSONParser.parse(reply) else { return nil }
        if let topics = root["topics"]?.arrayValue {
            return .success(Set(topics.compactMap(\.stringValue)))
        }
        switch root["error"]?.stringValue {
        case "NOT_FOUND"?: return .success(nil)
        case let code?:
            return .failure(MessageError(.storeUnavailable("the instance answered \(code): \(root["message"]?.stringValue ?? "")")))
        case nil: return nil
        }
    }

    /// The reply with `results`, one per token.
    static func reply(_ results: [TopicChangeResult]) -> JSONValue {
        let values: [JSONValue] = results.map { result in
            switch result {
            case .applied(let wasSubscribed): ["subscribed_before": .bool(wasSubscribed)]
            case .notFound: ["error": "NOT_FOUND"]
            case .failed(let status, let message): ["error": .string(status.rawValue), "message": .string(message)]
            }
        }
        return ["results": .array(values)]
    }

    /// The results of a reply for `count` tokens; `nil` when it is not one (another count, an error answer).
    static func results(ofReply reply: [UInt8], count: Int) -> [TopicChangeResult]? {
        guard let values = (try? JSONParser.parse(reply))?["results"]?.arrayValue, values.count == count else { return nil }
        var results: [TopicChangeResult] = []
        for value in values {
            guard value.objectValue != nil else { return nil }
            switch value["error"]?.stringValue {
            case nil: results.append(.applied(wasSubscribed: value["subscribed_before"]?.boolValue ?? true))
            case "NOT_FOUND"?: results.append(.notFound)
            case let code?:
                let status = MessageError.Status(rawValue: code) ?? .internal
                results.append(.failed(status, message: value["message"]?.stringValue ?? code))
            }
        }
        return results
    }
}
