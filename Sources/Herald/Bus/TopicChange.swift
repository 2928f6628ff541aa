/// One registration token's outcome of a topic change on a sender's behalf (the Instance ID API's `batchAdd` and
/// `batchRemove`, FCM v1's `topicSubscriptions`): what an instance answers for its own token and any other, and what
/// a gateway answers for a token of its fleet.
public enum TopicChangeResult: Sendable, Hashable {
    /// The token is the instance's current one and the change is applied (persisted); for a removal, whether the topic
    /// was subscribed before (a subscription is always applied: `true`).
    case applied(wasSubscribed: Bool)
    /// No instance holds the token (IID's `NOT_FOUND`, FCM v1's `UNREGISTERED`).
    case notFound
    /// The change could not be made now (the instance's store failed, or a gateway's instance did not answer): the
    /// status a sender would get for a whole request (`UNAVAILABLE`, `INTERNAL`) and why; the sender may retry.
    case failed(MessageError.Status, message: String)

    /// The result as the Instance ID API writes one: `{}`, `{"error": "NOT_FOUND"}`, or `{"error": "INTERNAL",
    /// "message": ...}` (IID's code for a backend that failed, which the Admin SDKs report as `internal-error`; the
    /// reason beside it).
    public var instanceIDResult: JSONValue {
        switch self {
        case .applied: [:]
        case .notFound: ["error": "NOT_FOUND"]
        case .failed(_, let message): ["error": "INTERNAL", "message": .string(message)]
        }
    }
}

extension TopicControl {
    /// The topics this instance is subscribed to when `token` is its current token; `nil` for any other token. What
    /// the HTTP receiver's `GET /iid/info/{token}` and the NATS receiver's info requests (a gateway's) both answer.
    public func subscribedTopics(ifTokenIs given: String) async throws -> Set<String>? {
        guard try await token() == given else { return nil }
        return try await subscribed()
    }

    /// Subscribes (`add`) or unsubscribes this instance to `topic` for the tokens of `tokens` that are its current
    /// token (applied once, however often the token is named), and answers one result per token, in order: every
    /// other token is ``TopicChangeResult/notFound``. What the HTTP receiver's topic routes and the NATS receiver's
    /// topic requests (a gateway's) both do. Throws what the store throws.
    public func change(_ topic: String, add: Bool, tokens: [String]) async throws -> [TopicChangeResult] {
        let mine = try await token()
        var outcome: TopicChangeResult?
        var results: [TopicChangeResult] = []
        results.reserveCapacity(tokens.count)
        for given in tokens {
            guard let mine, given == mine else {
                results.append(.notFound)
                continue
            }
            if outcome == nil {
                if add {
                    try await subscribe(topic)
                    outcome = .applied(wasSubscribed: true)
                } else {
                    outcome = .applied(wasSubscribed: try await unsubscribe(topic))
                }
            }
            results.append(outcome ?? .notFound)
        }
        return results
    }
}
