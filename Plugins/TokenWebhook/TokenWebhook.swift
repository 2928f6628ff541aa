import Glibc
public import Herald
public import HeraldHTTPClient

/// Sends the registration token to the app server, as the reference SDK's "send the token to your application
/// server": at every start and whenever the token changes, one HTTP `POST` of a JSON object to ``Options/url``:
///
///     POST /hooks/token HTTP/1.1
///     Content-Type: application/json
///     Authorization: Bearer <secret>
///
///     {"token":"…","installationID":"…","deviceToken":null,"reason":"start"}
///
/// `reason` is `start` (the first token after the instance started; `token` may be `null` when auto-init is off),
/// `refresh` (a new token: `Herald/deleteToken()`, `Herald/deleteData()`, or `Herald/token()` minting one),
/// or `deleted` (the token was deleted and none replaces it: `token` is `null`). `installationID` and
/// `deviceToken` come from closures given at init (`init(options:herald:)` reads them from the instance) and are
/// read before each attempt; a device token set on its own, with no token change, is not sent by itself.
///
/// **Retries.** A 2xx answer is success. Connection errors, timeouts (``Options/timeout`` for the whole exchange),
/// broken responses, `429` and `5xx` are retried after a delay that starts at ``Options/initialBackoff`` and
/// doubles with each attempt up to ``Options/maximumBackoff``, each delay drawn between half and all of that
/// (jitter, so a fleet restarted at once does not retry in step). A `Retry-After` (seconds or an HTTP date) on a
/// `429` or `5xx` is honoured when it asks for longer, up to one hour. After ``Options/maximumAttempts`` attempts
/// (by default there is no limit) the token is given up with an error in the log. Any other status (`3xx`, `4xx`)
/// is not retried: it is logged as an error with the start of the answer's body, for a person to fix.
///
/// **Only the latest token.** A new token supersedes the one being sent: its pending retry (or request in flight)
/// is cancelled and the new token is sent at once. Sends run in a task of their own, never on the bus: the token
/// handler returns at once. ``stop()`` cancels what is pending (retry waits and requests in flight) and returns
/// promptly; the token is sent again at the next start anyway.
///
/// **Transport.** `HeraldHTTPClient`'s client on the instance's loop: `http://` or `https://` (the app server's
/// certificate verified against the system's CAs or ``Options/caFile``), HTTP/2 when the server offers it, the
/// connection kept for the next attempt or token. A certificate that is not trusted is logged as an error and
/// retried like any other failure: fixing it on the server side lets the next attempt through.
///
/// ```swift
/// let webhook = try TokenWebhook(options: .init(url: "http://127.0.0.1:8000/hooks/token", secret: secret), herald: herald)
/// try herald.register(webhook)
/// ```
public final class TokenWebhook: TokenHandler, Sendable {
    public struct Options: Sendable {
        /// Where the token is POSTed: `http://` or `https://HOST[:PORT]/PATH`.
        public var url: String
        /// Sent as `Authorization: Bearer <secret>` when set.
        public var secret: String?
        /// How long one attempt may take, from connecting to the end of the answer.
        public var timeout: Duration = .seconds(10)
        /// Attempts per token, the first included, before it is given up; `nil` (the default) for no limit.
        public var maximumAttempts: Int? = nil
        /// The delay before the first retry; it doubles with each further attempt.
        public var initialBackoff: Duration = .seconds(1)
        /// The longest delay between attempts (before `Retry-After`).
        public var maximumBackoff: Duration = .seconds(60)
        /// A PEM file of the CAs that sign the app server's certificate, instead of the system's.
        public var caFile: String? = nil

        public init(
            url: String,
            secret: String? = nil,
            timeout: Duration = .seconds(10),
            maximumAttempts: Int? = nil,
            initialBackoff: Duration = .seconds(1),
            maximumBackoff: Duration = .seconds(60),
            caFile: String? = nil
        ) {
            self.url = url
            self.secret = secret
            self.timeout = timeout
            self.maximumAttempts = maximumAttempts
            self.initialBackoff = initialBackoff
            self.maximumBackoff = maximumBackoff
            self.caFile = caFile
        }
    }

    /// What the webhook has done so far.
    public struct Statistics: Sendable, Equatable {
        /// Requests begun (each attempt of each token).
        public var attempts = 0
        /// Tokens the app server accepted (a 2xx answer).
        public var delivered = 0
        /// Tokens the app server refused with a status that is not retried (`3xx`, `4xx` other than `429`).
        public var rejected = 0
        /// Tokens given up after ``Options/maximumAttempts`` attempts.
        public var abandoned = 0
        /// Tokens whose sending a newer token cancelled.
        public var superseded = 0
        /// The status of the last answer, if any came.
        public var lastStatus: Int?
    }

    /// The longest wait a `Retry-After` answer is honoured for.
    public static let maximumRetryAfter: Duration = .seconds(3600)

    public let options: Options
    /// The parsed ``Options/url``.
    public let endpoint: HTTPURL
    private let installationID: @Sendable () async -> String?
    private let deviceToken: @Sendable () async -> String?
    /// What the waits between attempts are measured on.
    private let clock: any Clock<Duration>
    private let state = Locked(State())

    private struct State {
        var context: PluginContext?
        /// The client of this run: its connection to the app server is kept from one token to the next.
        var client: HTTPClient?
        var stopped = false
        var announced = false
        var generation = 0
        /// The send under way, if any, with its generation.
        var current: (generation: Int, task: Task<Void, Never>)?
        var statistics = Statistics()
        /// The attempts per token in force (``Options/maximumAttempts``, or ``setMaximumAttempts(_:)``'s).
        var maximumAttempts: Int?
    }

    /// A webhook with `options`. `installationID` and `deviceToken` supply the body's `installationID` and
    /// `deviceToken` (`nil` is sent as `null`). The waits between attempts are slept on `clock` (a test gives a
    /// `HeraldTesting.ManualClock`; the timeout of each attempt runs on the loop). Throws ``TokenWebhookError`` for an
    /// option Herald cannot use (a URL that is not `http://` or `https://`, a timeout or backoff that is not positive, ...).
    public init(
        options: Options,
        installationID: @escaping @Sendable () async -> String? = { nil },
        deviceToken: @escaping @Sendable () async -> String? = { nil },
        clock: any Clock<Duration> = ContinuousClock()
    ) throws {
        do {
            endpoint = try HTTPURL(parsing: options.url)
        } catch {
            throw TokenWebhookError.invalidOption("url", value: options.url, reason: "\(error)")
        }
        if let secret = options.secret {
            guard !secret.isEmpty, secret.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw TokenWebhookError.invalidOption(
                    "secret", value: "(hidden)", reason: "the bearer secret must be non-empty visible ASCII, with no spaces or line ends")
            }
        }
        if let caFile = options.caFile, access(caFile, R_OK) != 0 {
            throw TokenWebhookError.invalidOption("caFile", value: caFile, reason: "cannot read it: \(String(cString: strerror(errno)))")
        }
        guard options.timeout > .zero else {
            throw TokenWebhookError.invalidOption("timeout", value: "\(options.timeout)", reason: "must be more than zero")
        }
        if let maximum = options.maximumAttempts, maximum < 1 {
            throw TokenWebhookError.invalidOption("maximumAttempts", value: "\(maximum)", reason: "must be at least 1 (nil for no limit)")
        }
        guard options.initialBackoff > .zero else {
            throw TokenWebhookError.invalidOption("initialBackoff", value: "\(options.initialBackoff)", reason: "must be more than zero")
        }
        guard options.maximumBackoff >= options.initialBackoff else {
            throw TokenWebhookError.invalidOption(
                "maximumBackoff", value: "\(options.maximumBackoff)", reason: "must be at least initialBackoff (\(options.initialBackoff))")
        }
        self.options = options
        self.installationID = installationID
        self.deviceToken = deviceToken
        self.clock = clock
        state.withLock { $0.maximumAttempts = options.maximumAttempts }
    }

    /// The attempts per token now in force: ``Options/maximumAttempts``, unless ``setMaximumAttempts(_:)`` changed it.
    public var maximumAttempts: Int? { state.withLock { $0.maximumAttempts } }

    /// Changes the attempts per token while the webhook runs (a daemon's reload: ``applyLiveSettings(_:)``); `nil`
    /// for no limit. A token being retried counts the attempts it has made: lowered to or below them, it is given up
    /// after its next failed attempt. Callable from any thread.
    ///
    /// - Throws: ``TokenWebhookError/invalidOption(_:value:reason:)`` for a limit below 1; nothing changes then.
    public func setMaximumAttempts(_ maximum: Int?) throws {
        if let maximum, maximum < 1 {
            throw TokenWebhookError.invalidOption("maximumAttempts", value: "\(maximum)", reason: "must be at least 1 (nil for no limit)")
        }
        state.withLock { $0.maximumAttempts = maximum }
    }

    /// A webhook whose `installationID` and `deviceToken` are `herald`'s (held weakly: no reference cycle); the
    /// waits between attempts slept on `clock`.
    public convenience init(options: Options, herald: Herald, clock: any Clock<Duration> = ContinuousClock()) throws {
        try self.init(
            options: options,
            installationID: { [weak herald] in try? await herald?.installationID() },
            deviceToken: { [weak herald] in (try? await herald?.deviceToken()) ?? nil },
            clock: clock
        )
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "token-webhook", summary: "POSTs the registration token to the app server at every start and change")
    }

    /// What the webhook has done so far. Callable from any thread.
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// Whether a token is being sent (a request or a wait to retry under way).
    var isSending: Bool { state.withLock { $0.current != nil } }

    public func start(_ context: PluginContext) async throws {
        state.withLock { state in
            state.context = context
            state.client = HTTPClient(
                loop: context.loop, configuration: .init(caFile: options.caFile, userAgent: "Herald-TokenWebhook/\(HeraldBuild.version)"))
            state.stopped = false
            state.announced = false
        }
    }

    /// Cancels the send under way (its retry wait or its request) and waits for it to end, which is prompt.
    public func stop() async {
        let current = state.withLock { state in
            state.stopped = true
            state.client = nil  // its kept connection closes once the send under way is over
            defer { state.current = nil }
            return state.current?.task
        }
        current?.cancel()
        await current?.value
    }

    public func didReceiveRegistrationToken(_ token: String?) async {
        state.withLock { state in
            guard !state.stopped, let context = state.context, let client = state.client else { return }
            let reason = !state.announced ? "start" : token == nil ? "deleted" : "refresh"
            state.announced = true
            state.generation += 1
            let generation = state.generation
            let previous = state.current?.task
            if previous != nil { state.statistics.superseded += 1 }
            previous?.cancel()
            let task = Task {
                await previous?.value  // one request at a time, in order; cancelling it makes this quick
                await self.send(token, reason: reason, client: client, context: context)
                self.state.withLock { state in
                    if state.current?.generation == generation { state.current = nil }
                }
            }
            state.current = (generation, task)
        }
    }

    // MARK: Sending

    private enum Outcome {
        case delivered
        case refused
        case retry(after: Duration?)
        case stop
    }

    private func send(_ token: String?, reason: String, client: HTTPClient, context: PluginContext) async {
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            var body: JSONObject = ["token": token.map { .string($0) } ?? .null]
            body["installationID"] = await installationID().map { .string($0) } ?? .null
            body["deviceToken"] = await deviceToken().map { .string($0) } ?? .null
            body["reason"] = .string(reason)
            var headers: [(name: String, value: String)] = [("Content-Type", "application/json"), ("Accept", "*/*")]
            if let secret = options.secret { headers.append(("Authorization", "Bearer \(secret)")) }
            let request = HTTPRequest(
                method: "POST", url: endpoint.description, headers: headers, body: JSONValue.object(body).jsonBytes(),
                timeout: options.timeout, maximumResponseBytes: 64 * 1024)
            guard !Task.isCancelled else { return }
            state.withLock { $0.statistics.attempts += 1 }
            let outcome = await attemptOnce(request, attempt: attempt, reason: reason, client: client, context: context)
            let retryAfter: Duration?
            switch outcome {
            case .delivered, .refused, .stop:
                return
            case .retry(let after):
                retryAfter = after
            }
            if let maximum = state.withLock({ $0.maximumAttempts }), attempt >= maximum {
                guard !Task.isCancelled else { return }
                state.withLock { $0.statistics.abandoned += 1 }
                context.logger.error(
                    "gave up sending the registration token to the app server",
                    metadata: [
                        "url": "\(endpoint)", "attempts": "\(attempt)", "reason": "\(reason)",
                    ])
                return
            }
            let delay = Self.retryDelay(
                afterAttempt: attempt, initial: options.initialBackoff, maximum: options.maximumBackoff,
                retryAfter: retryAfter, fraction: Double.random(in: 0...1))
            context.logger.warning(
                "will retry sending the registration token",
                metadata: [
                    "url": "\(endpoint)", "attempt": "\(attempt)", "delay": "\(delay)",
                ])
            do {
                try await clock.sleep(for: delay)
            } catch {
                return  // cancelled: stopped, or superseded by a newer token
            }
        }
    }

    private func attemptOnce(_ request: HTTPRequest, attempt: Int, reason: String, client: HTTPClient, context: PluginContext) async
        -> Outcome
    {
        let response: HTTPResponse
        do {
            response = try await client.send(request)
        } catch is CancellationError {
            return .stop
        } catch let error as EventLoopError {
            if !Task.isCancelled {
                context.logger.warning("cannot send the registration token: the loop is shutting down", metadata: ["error": "\(error)"])
            }
            return .stop
        } catch {
            guard !Task.isCancelled else { return .stop }
            if case .certificateRejected = error as? HTTPClientError {
                context.logger.error(
                    "the app server's certificate is not trusted; will retry",
                    metadata: ["url": "\(endpoint)", "attempt": "\(attempt)", "error": "\(error)"])
                return .retry(after: nil)
            }
            context.logger.warning(
                "sending the registration token failed",
                metadata: [
                    "url": "\(endpoint)", "attempt": "\(attempt)", "error": "\(error)",
                ])
            return .retry(after: nil)
        }
        let status = response.status
        state.withLock { $0.statistics.lastStatus = status }
        switch status {
        case 200..<300:
            state.withLock { $0.statistics.delivered += 1 }
            context.logger.info(
                "registration token sent to the app server",
                metadata: [
                    "url": "\(endpoint)", "status": "\(status)", "attempts": "\(attempt)", "reason": "\(reason)",
                ])
            return .delivered
        case 429, 500..<600:
            guard !Task.isCancelled else { return .stop }
            context.logger.warning(
                "the app server could not take the registration token now",
                metadata: [
                    "url": "\(endpoint)", "status": "\(status)", "attempt": "\(attempt)",
                ])
            return .retry(after: response.value(of: "Retry-After").flatMap { Self.parseRetryAfter($0) })
        default:
            state.withLock { $0.statistics.rejected += 1 }
            let excerpt = String(decoding: response.body.prefix(200), as: UTF8.self)
            context.logger.error(
                "the app server refused the registration token; not retried",
                metadata: [
                    "url": "\(endpoint)", "status": "\(status)", "body": "\(excerpt)",
                ])
            return .refused
        }
    }

    // MARK: Delays

    /// The wait after failed attempt number `attempt` (1 for the first): `initial` doubled `attempt - 1` times,
    /// at most `maximum`, times a factor between ½ and 1 drawn from `fraction` (in `0...1`); a longer
    /// `retryAfter` wins, up to ``maximumRetryAfter``.
    static func retryDelay(afterAttempt attempt: Int, initial: Duration, maximum: Duration, retryAfter: Duration?, fraction: Double)
        -> Duration
    {
        var base = initial
        var doublings = max(0, attempt - 1)
        while doublings > 0, base < maximum {
            base = base * 2
            doublings -= 1
        }
        base = min(base, maximum)
        let factor = 0.5 + 0.5 * min(max(fraction, 0), 1)
        let jittered = Duration.nanoseconds(Int64(min(Self.seconds(base) * factor * 1e9, 9e18).rounded()))
        guard let retryAfter else { return jittered }
        return max(jittered, min(retryAfter, maximumRetryAfter))
    }

    /// `Retry-After` as delta-seconds (`120`) or an HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`, measured from now);
    /// `nil` when it is neither. A date in the past is zero.
    static func parseRetryAfter(_ value: String, now: Int = time(nil)) -> Duration? {
        let text = value.trimmingSpaces
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            guard let seconds = Int64(text.prefix(12)) else { return nil }
            return .seconds(seconds)
        }
        // IMF-fixdate, the form HTTP senders use: "Sun, 06 Nov 1994 08:49:37 GMT".
        let fields = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard fields.count == 6, fields[0].hasSuffix(","), fields[5] == "GMT",
            let day = Int(fields[1]), (1...31).contains(day),
            let month = months.firstIndex(of: String(fields[2])),
            let year = Int(fields[3]), (1970...9999).contains(year)
        else { return nil }
        let clock = fields[4].split(separator: ":", omittingEmptySubsequences: false).map { Int($0) }
        guard clock.count == 3, let hour = clock[0], let minute = clock[1], let second = clock[2],
            (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let date = timegm(&parts)
        guard date != -1 else { return nil }
        return .seconds(max(0, date - now))
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
    }
}

/// An option of ``TokenWebhook`` that cannot be used.
public enum TokenWebhookError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidOption(String, value: String, reason: String)

    public var description: String {
        switch self {
        case .invalidOption(let option, let value, let reason): "token webhook option \(option) '\(value)': \(reason)"
        }
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
