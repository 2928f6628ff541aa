import Herald
import HeraldHTTP

/// Where the receiver's Web Push route (`POST /up/{token}`, RFC 8030 as UnifiedPush app servers speak it) hands
/// its pushes: the UnifiedPush distributor, which knows the endpoint tokens it minted. Set as
/// ``HTTPReceiver/Options/webPush``.
public protocol WebPushEndpoint: AnyObject, Sendable {
    /// Takes `push` (its headers checked, its body at most ``WebPush/maximumBodyBytes``) and answers once, through
    /// `answer`. Called on the loop thread; `answer` is called on it too.
    func receive(_ push: WebPush, answer: @escaping (WebPushAnswer) -> Void)
}

/// One push POSTed to an endpoint.
public struct WebPush: Sendable, Hashable {
    /// The largest body a push may have (UnifiedPush's limit): a larger one is answered 413.
    public static let maximumBodyBytes = 4096

    /// The endpoint token: the last path segment.
    public var token: String
    /// The body as received; with `Content-Encoding: aes128gcm` (RFC 8291) it is encrypted, and stays so.
    public var body: [UInt8]
    /// RFC 8030's `TTL`: how many seconds the push is worth keeping for an app that is not there (0: now or never).
    public var ttl: Int64
    /// RFC 8030's `Urgency`: `very-low`, `low`, `normal` (when not given) or `high`.
    public var urgency: String
    /// RFC 8030's `Topic`: a newer push with the same topic replaces a waiting one.
    public var topic: String?
    /// The request's `Authorization` header (`vapid t=..., k=...` with RFC 8292), for the endpoint to check.
    public var authorization: String?
    /// Whether the push's VAPID token was already checked against the registration's key (by a fleet's gateway,
    /// which passes the push on); `false` for a push POSTed here.
    public var authorized = false
    /// The message ID to give the push (a gateway answered its sender with it); `nil`: the endpoint makes one.
    public var messageID: String?

    public init(token: String, body: [UInt8], ttl: Int64, urgency: String = "normal", topic: String? = nil, authorization: String? = nil) {
        self.token = token
        self.body = body
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
        self.authorization = authorization
    }
}

/// One endpoint a ``WebPushDirectory`` serves, as a fleet's gateway needs to know it.
public struct WebPushRegistration: Sendable, Hashable {
    /// The endpoint token.
    public var token: String
    /// The app's VAPID public key, when its endpoint is restricted to it.
    public var vapid: String?

    public init(token: String, vapid: String?) {
        self.token = token
        self.vapid = vapid
    }
}

/// A ``WebPushEndpoint`` that tells which endpoints it serves, so that a fleet's gateway can take their pushes and
/// pass them on to it.
public protocol WebPushDirectory: WebPushEndpoint {
    /// Calls `changed` with every endpoint served: once the endpoint runs, and again after each registration or
    /// unregistration. Called on the loop thread.
    func observeEndpoints(_ changed: @escaping @Sendable ([WebPushRegistration]) -> Void)
}

/// What a ``WebPushEndpoint`` answers a push with.
public enum WebPushAnswer: Sendable, Hashable {
    /// Accepted and kept until its app takes it or its TTL passes: `201 Created`, `Location` naming the message.
    case created(messageID: String)
    /// No such endpoint (never minted, or unregistered): `404`, so that the app server forgets it.
    case notFound
    /// Refused, with the HTTP status to answer and why (`401`/`403` for VAPID, `503` when the store fails).
    case refused(status: Int, reason: String)
}

/// A push's RFC 8030 headers, checked: `TTL` a number of seconds (at most ``defaultTTL``, which is also what none
/// gives), `Urgency` one of the four (`normal` when none), `Topic` 1 to 32 characters of the URL-safe base64 alphabet.
struct WebPushHeaders: Equatable {
    /// The TTL given when a push has none, and the most it may have: four weeks, what push services commonly keep a
    /// message at most.
    static let defaultTTL: Int64 = 28 * 24 * 3600

    var ttl: Int64
    var urgency: String
    var topic: String?

    /// The headers' values as received (`nil` for a header not sent); throws what to answer with 400.
    init(ttl: String?, urgency: String?, topic: String?) throws(WebPushHeaderError) {
        self.ttl = Self.defaultTTL
        if let ttl {
            guard let value = Int64(ttl), value >= 0 else {
                throw WebPushHeaderError(message: "TTL must be a number of seconds (0 or more); got '\(ttl)'.")
            }
            self.ttl = min(value, Self.defaultTTL)
        }
        self.urgency = urgency?.lowercased() ?? "normal"
        guard ["very-low", "low", "normal", "high"].contains(self.urgency) else {
            throw WebPushHeaderError(message: "Urgency must be very-low, low, normal or high; got '\(self.urgency)'.")
        }
        if let topic {
            let allowed = topic.utf8.allSatisfy { byte in
                (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
            guard allowed, !topic.isEmpty, topic.utf8.count <= 32 else {
                throw WebPushHeaderError(message: "Topic must be 1 to 32 characters of the URL-safe base64 alphabet; got '\(topic)'.")
            }
        }
        self.topic = topic
    }
}

/// Why a push's headers are refused: the text answered with `400 Bad Request`.
struct WebPushHeaderError: Error, Equatable {
    var message: String
}

extension HTTPAPI {

    /// `POST /up/{token}`: the push's headers checked (`TTL` a number, `Urgency` one of RFC 8030's four, `Topic` at
    /// most 32 URL-safe base64 characters), its size too, then handed to `endpoint`. Errors are plain text.
    func routeWebPush(_ request: HTTPRequest, token: String, endpoint: any WebPushEndpoint, responder: HTTPResponder) {
        func refuse(_ status: Int, _ reason: String) {
            responder.respond(HTTPResponse(status: status, contentType: "text/plain; charset=utf-8", body: Array((reason + "\n").utf8)))
        }
        guard request.method == .post else { return refuse(405, "Use POST to push to an endpoint.") }
        guard request.body.count <= WebPush.maximumBodyBytes else {
            return refuse(413, "The push is \(request.body.count) bytes; an endpoint takes at most \(WebPush.maximumBodyBytes).")
        }
        let headers: WebPushHeaders
        do {
            headers = try WebPushHeaders(
                ttl: request.headers.value(of: "ttl"), urgency: request.headers.value(of: "urgency"),
                topic: request.headers.value(of: "topic"))
        } catch {
            return refuse(400, error.message)
        }
        let ttl = headers.ttl
        let push = WebPush(
            token: token, body: request.body, ttl: ttl, urgency: headers.urgency, topic: headers.topic,
            authorization: request.headers.value(of: "authorization"))
        endpoint.receive(push) { answer in
            switch answer {
            case .created(let messageID):
                responder.respond(HTTPResponse(status: 201, headers: [("Location", "/up/messages/\(messageID)"), ("TTL", String(ttl))]))
            case .notFound:
                refuse(404, "No such endpoint: it was never registered, or its app unregistered it.")
            case .refused(let status, let reason):
                refuse(status, reason)
            }
        }
    }
}
