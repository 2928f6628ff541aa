import Glibc
public import Herald
import HeraldDBus
public import HeraldHTTPReceiver
public import HeraldSQLite
import Logging

/// Herald as a UnifiedPush distributor and push provider for the Linux desktop: apps that want push without Google
/// (KUnifiedPush users such as NeoChat and Tokodon, Flutter apps with `unifiedpush_linux`) register with it on the
/// session bus, and their app servers POST pushes to the endpoint it hands them.
///
/// On the bus it owns ``Options/serviceName`` (`org.unifiedpush.Distributor.herald`) and serves, at
/// `/org/unifiedpush/Distributor`, both `org.unifiedpush.Distributor1` (`Register(serviceName, token, description)`
/// answering `(result, reason)`, and `Unregister(token)`) and `org.unifiedpush.Distributor2` (the same as `a{sv}`
/// dictionaries, with the app's VAPID public key kept). A registration is refused unless the caller owns the service
/// name it registers. For each registration it mints an endpoint token, keeps the registration in the store and
/// calls the app's `NewEndpoint` (`org.unifiedpush.Connector1` or `2`, at `/org/unifiedpush/Connector` on the app's
/// service) with ``Options/endpointURL`` followed by the token.
///
/// As the HTTP receiver's `HTTPReceiver.Options.webPush`, it takes `POST /up/{token}`: the push is committed to the
/// store before `201 Created` is answered, then handed to the app with `Message`, and forgotten once the app took it
/// (the call answered). An app that is not running gets it when its name appears on the bus (or the bus starts it,
/// when it is activatable); a push waits at most its `TTL` (0: now or never), a newer push with the same `Topic`
/// replaces a waiting one, and pushes still waiting at a stop are handed over after the next start, with the same
/// message ID. Unknown or unregistered tokens are answered 404, so that the app server forgets them. A Distributor2
/// registration with a VAPID key restricts its endpoint to pushes with a valid RFC 8292 token of that key (401
/// without one, 403 for an invalid one; the audience is the origin of ``Options/endpointURL``).
///
/// Everything runs on the Herald loop: sd-bus polled by the loop, the store's writes on its blocking pool.
public final class UnifiedPushDistributor: HeraldPlugin, WebPushDirectory, @unchecked Sendable {
    // @unchecked Sendable: `options` and `store` are immutable; the state is touched on the loop thread only.

    public struct Options: Sendable {
        /// The bus to serve on; `nil` or empty: the session bus (`DBUS_SESSION_BUS_ADDRESS`, else
        /// `$XDG_RUNTIME_DIR/bus`).
        public var busAddress: String?
        /// The well-known name the distributor owns; apps find distributors by the `org.unifiedpush.Distributor.`
        /// prefix.
        public var serviceName = "org.unifiedpush.Distributor.herald"
        /// What an endpoint is: this URL followed by the endpoint token (the HTTP receiver's `/up/` route as the app
        /// servers reach it, e.g. `https://push.example.org/up/`).
        public var endpointURL = "http://127.0.0.1:8080/up/"
        /// How long a call to an app may take before it counts as not answered.
        public var callTimeout: Duration = .seconds(5)
        /// The most pushes that may wait for one endpoint's app; more are answered 429 until it takes some.
        public var maximumWaitingPerEndpoint = 1000
        /// The most `Message` calls in flight to one Connector2 app at once; the next goes as one is answered, so
        /// that a burst (pushes that waited for an app that was away) reaches it in order without flooding its
        /// connection or the bus's pending replies (an app given hundreds of calls at once may have more replies to write
        /// than its socket holds). Connector1 apps are sent their pushes as calls asking for no answer, not bounded.
        public var maximumCallsInFlight = 16
        /// How often pushes an app did not take are offered again (besides when its name appears on the bus); also the
        /// longest wait before a push whose `Message` call failed while the app is on the bus is offered again (the
        /// first such wait is a second, doubling while calls keep failing).
        public var retryInterval: Duration = .seconds(30)
        /// The first wait before reconnecting to a lost bus; doubled after each failed attempt.
        public var reconnectDelay: Duration = .milliseconds(250)
        /// The longest wait between reconnection attempts.
        public var maxReconnectDelay: Duration = .seconds(30)

        public init(endpointURL: String = "http://127.0.0.1:8080/up/", busAddress: String? = nil) {
            self.endpointURL = endpointURL
            self.busAddress = busAddress
        }
    }

    public let options: Options
    private let store: SQLiteStore
    private var engine: DistributorEngine?
    /// Observers added before the start, handed to the engine when it starts.
    private var observers: [@Sendable ([WebPushRegistration]) -> Void] = []

    /// A distributor keeping its registrations and waiting pushes in `store` (the instance's store: `herald serve`
    /// passes its own).
    public init(options: Options = Options(), store: SQLiteStore) {
        self.options = options
        self.store = store
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "unifiedpush", summary: "UnifiedPush distributor on the session bus and Web Push endpoints")
    }

    public func start(_ context: PluginContext) async throws {
        let store = self.store
        let registrations = try await context.loop.offload { try store.unifiedPushRegistrations() }
        let messages = try await context.loop.offload { try store.unifiedPushMessages() }
        try await context.loop.submit {
            let engine = DistributorEngine(options: self.options, store: store, context: context)
            engine.load(registrations: registrations, messages: messages)
            for observer in self.observers { engine.observeEndpoints(observer) }
            self.observers = []
            self.engine = engine
            engine.connect()
        }
    }

    /// Stops offering pushes and returns once what was under way is over: the `Message` calls in flight answered (or
    /// failed, or timed out: at most ``Options/callTimeout``) and written down in the store, so that a push the app
    /// took is not handed over again at the next start.
    public func stop() async {
        guard let engine else { return }
        let (stopped, continuation) = AsyncStream<Void>.makeStream()
        do {
            try await engine.loop.submit { engine.stop { continuation.finish() } }
        } catch {
            return
        }
        for await _ in stopped {}
    }

    public func receive(_ push: WebPush, answer: @escaping (WebPushAnswer) -> Void) {
        guard let engine else { return answer(.refused(status: 503, reason: "The UnifiedPush distributor is not running.")) }
        engine.receive(push, answer: answer)
    }

    /// Calls `changed` with the registered endpoints once the distributor runs, and after every change (an instance
    /// of a fleet tells its gateway). Loop thread, or before the start.
    public func observeEndpoints(_ changed: @escaping @Sendable ([WebPushRegistration]) -> Void) {
        if let engine { engine.observeEndpoints(changed) } else { observers.append(changed) }
    }

    /// Whether the distributor owns its name on the bus now. Loop thread.
    public var ownsName: Bool { engine?.ownsName ?? false }
}
