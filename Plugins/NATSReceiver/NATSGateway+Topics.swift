public import Herald

/// Topic management through a gateway: each token's change is made by the instance that holds the token, as that
/// instance's own HTTP topic routes would make it.
extension NATSGateway: TopicForwarder {
    /// Finds each token's instance in the registrations bucket (the watched copy, or the bucket while the watch
    /// catches up), and sends each instance one core NATS request with its tokens on
    /// ``NATSSubjects/topicRequests(project:instance:)`` (one JSON request, one result per token), all at once, each
    /// waiting at most ``NATSReceiver/Options/requestTimeout``. A token the bucket does not hold (or holds another token for) is
    /// `TopicChangeResult/notFound`, as FCM answers it. An instance that does not answer in time, or does not listen
    /// (stopped), gets `TopicChangeResult/failed(_:message:)` (`UNAVAILABLE`) for its tokens, and a warning in the
    /// log; so does every token while NATS is unreachable. The NATS calls block, on the loop's blocking pool.
    public func changeTopic(_ topic: String, add: Bool, tokens: [String]) async -> [TopicChangeResult] {
        guard case (let publisher?, let context?) = shared.withLock({ $0 }) else {
            return tokens.map { _ in .failed(.unavailable, message: "The gateway is shutting down; retry.") }
        }
        guard publisher.isConnected else {
            return tokens.map { _ in .failed(.unavailable, message: "The gateway is not connected to NATS; retry.") }
        }
        let project = context.projectID
        var results = [TopicChangeResult?](repeating: nil, count: tokens.count)
        // The positions of each instance's tokens, by installation ID.
        var byInstance: [String: [Int]] = [:]
        for (index, token) in tokens.enumerated() {
            do {
                guard let instance = try await instance(holding: token, publisher: publisher, context: context) else {
                    results[index] = .notFound
                    continue
                }
                byInstance[instance, default: []].append(index)
            } catch {
                results[index] = .failed(.unavailable, message: "The registrations could not be read: \(error); retry.")
            }
        }
        let timeout = options.requestTimeout
        let logger = context.logger
        let loop = context.loop
        let answers = await withTaskGroup(of: (indices: [Int], results: [TopicChangeResult]).self) { group in
            for (instance, indices) in byInstance {
                let request = NATSTopicRequest(topic: topic, add: add, tokens: indices.map { tokens[$0] })
                let subject = NATSSubjects.topicRequests(project: project, instance: instance)
                group.addTask {
                    let failure: String
                    do {
                        if let reply = try await loop.offload({ try publisher.request(subject, body: request.body) }) {
                            if let results = NATSTopicRequest.results(ofReply: reply, count: indices.count) { return (indices, results) }
                            failure = "answered what is not a topic change's reply: \(String(decoding: reply.prefix(200), as: UTF8.self))"
                        } else {
                            failure = "does not listen on \(subject) (stopped, or not connected to NATS)"
                        }
                    } catch {
                        failure = "did not answer within \(timeout) (\(error))"
                    }
                    logger.warning(
                        "an instance did not make a topic change",
                        metadata: ["instance": "\(instance)", "topic": "\(topic)", "add": "\(add)", "error": "\(failure)"])
                    let message = "The instance \(instance) \(failure); retry."
                    return (indices, indices.map { _ in TopicChangeResult.failed(.unavailable, message: message) })
                }
            }
            var answers: [(indices: [Int], results: [TopicChangeResult])] = []
            for await answer in group { answers.append(answer) }
            return answers
        }
        for answer in answers {
            for (index, result) in zip(answer.indices, answer.results) { results[index] = result }
        }
        return results.map { $0 ?? .notFound }
    }

    /// Asks the instance that holds `token` for its topics, as ``changeTopic(_:add:tokens:)`` asks for a change: `nil`
    /// when the registrations bucket does not hold the token; `UNAVAILABLE` (and a warning in the log) when its
    /// instance does not answer in time or does not listen, or NATS is unreachable.
    public func subscribedTopics(token: String) async -> Result<Set<String>?, MessageError> {
        guard case (let publisher?, let context?) = shared.withLock({ $0 }) else { return .failure(MessageError(.shuttingDown)) }
        guard publisher.isConnected else { return .failure(MessageError(.storeUnavailable("NATS: not connected"))) }
        let instance: String
        do {
            guard let found = try await self.instance(holding: token, publisher: publisher, context: context) else { return .success(nil) }
            instance = found
        } catch {
            return .failure(MessageError(.storeUnavailable("NATS: \(error)")))
        }
        let subject = NATSSubjects.topicRequests(project: context.projectID, instance: instance)
        let request = NATSTopicRequest(infoFor: token)
        let failure: String
        do {
            if let reply = try await context.loop.offload({ try publisher.request(subject, body: request.body) }) {
                if let result = NATSTopicRequest.topics(ofInfoReply: reply) { return result }
                failure = "answered what is not an info reply: \(String(decoding: reply.prefix(200), as: UTF8.self))"
            } else {
                failure = "does not listen on \(subject) (stopped, or not connected to NATS)"
            }
        } catch {
            failure = "did not answer within \(options.requestTimeout) (\(error))"
        }
        context.logger.warning(
            "an instance did not answer for its topics", metadata: ["instance": "\(instance)", "error": "\(failure)"])
        return .failure(MessageError(.storeUnavailable("the instance \(instance) \(failure); retry")))
    }

    /// The installation ID under which the registrations bucket (the watched copy, else the bucket) holds `token`;
    /// `nil` when it holds another token there, or none. Throws when the bucket cannot be read.
    private func instance(holding token: String, publisher: NATSPublisher, context: PluginContext) async throws -> String? {
        let key = NATSSubjects.registrationKey(token: token)
        let project = context.projectID
        let bucket = options.registrationBucket
        let registered: String?
        if let cached = publisher.cachedRegistration(key: key) {
            registered = cached
        } else {
            registered = try await context.loop.offload { try publisher.registeredToken(key: key, project: project, bucket: bucket) }
        }
        return registered == token && NATSSubjects.isSubjectToken(token) ? key : nil
    }
}
