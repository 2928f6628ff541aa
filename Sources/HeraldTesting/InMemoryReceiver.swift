public import Herald

/// A receiver that takes messages from the test (or host) in memory: an FCM v1 body or an APNs payload goes
/// through the bus's `MessageBus/submit(_:_:completion:)`, as a network receiver's does.
///
/// It records `pause()` / `resume()` calls so that backpressure can be observed.
public final class InMemoryReceiver: Receiver, @unchecked Sendable {
    // @unchecked Sendable: `context` is written once in start() before any use; counters are behind a lock.
    private let state = Locked<(context: PluginContext?, pauses: Int, resumes: Int, paused: Bool)>((nil, 0, 0, false))

    public init() {}

    public var descriptor: PluginDescriptor { PluginDescriptor(name: "in-memory", summary: "messages handed over in process") }

    public func start(_ context: PluginContext) async throws {
        state.withLock { $0.context = context }
    }

    public func pause() {
        state.withLock {
            $0.pauses += 1
            $0.paused = true
        }
    }
    public func resume() {
        state.withLock {
            $0.resumes += 1
            $0.paused = false
        }
    }

    /// How often the bus paused and resumed this receiver, and whether it is paused now.
    public var backpressure: (pauses: Int, resumes: Int, paused: Bool) {
        state.withLock { ($0.pauses, $0.resumes, $0.paused) }
    }

    private func bus() throws -> MessageBus {
        guard let context = state.withLock({ $0.context }) else { throw HeraldError.notRunning }
        return context.bus
    }

    /// Offers a decoded message to the bus.
    public func send(_ message: RemoteMessage, validateOnly: Bool = false) async throws -> DeliveryOutcome {
        try await bus().deliver(message, validateOnly: validateOnly)
    }

    /// Submits an FCM v1 send body to the bus, as a network receiver does; a decoding error is the outcome.
    /// `herald` is the instance this receiver is registered with.
    public func sendFCM(_ body: String, to herald: Herald) async throws -> DeliveryOutcome {
        try await submit(Array(body.utf8), SendContext())
    }

    /// Submits an APNs provider payload (with headers) for `deviceToken` to the bus; a decoding error is the
    /// outcome. `herald` is the instance this receiver is registered with.
    public func sendAPNs(_ payload: String, headers: [String: String] = [:], deviceToken: String, to herald: Herald) async throws
        -> DeliveryOutcome
    {
        try await submit(Array(payload.utf8), SendContext(format: .apns(headers: headers, deviceToken: deviceToken)))
    }

    private func submit(_ body: [UInt8], _ context: SendContext) async throws -> DeliveryOutcome {
        switch try await bus().submit(body, context) {
        case .accepted(let id): .success(id)
        case .invalid(let error), .refused(let error): .failure(error)
        }
    }
}

/// An analytics sink that keeps every event it is given, for tests.
public final class RecordingSink: AnalyticsSink, Sendable {
    private let events = Locked<[AnalyticsEvent]>([])
    public init() {}

    public var descriptor: PluginDescriptor { PluginDescriptor(name: "recording-sink") }

    public func record(_ batch: [AnalyticsEvent]) async throws {
        events.withLock { $0.append(contentsOf: batch) }
    }

    /// Every event recorded so far.
    public var recorded: [AnalyticsEvent] { events.withLock { $0 } }

    /// The recorded events named `name`.
    public func events(named name: AnalyticsEvent.Name) -> [AnalyticsEvent] { recorded.filter { $0.name == name } }
}
