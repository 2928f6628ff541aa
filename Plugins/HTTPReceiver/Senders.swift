public import Herald
import HeraldTLS

/// What a sender may do, each a scope of its credential.
///
/// - ``send``: FCM v1 sends to a token or an installation (`fid`), and APNs provider style pushes.
/// - ``sendTopics``: FCM v1 sends to a topic or a condition.
/// - ``manageTopics``: topic management (the Instance ID `batchAdd`, `batchRemove` and `info`, FCM v1's
///   `topicSubscriptions`).
public struct SenderScopes: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: Int

    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Sends to tokens and installations.
    public static let send = SenderScopes(rawValue: 1)
    /// Sends to topics and conditions.
    public static let sendTopics = SenderScopes(rawValue: 2)
    /// Topic management.
    public static let manageTopics = SenderScopes(rawValue: 4)
    /// Every scope: what the bearer secret and a credential made without a list have.
    public static let all: SenderScopes = [.send, .sendTopics, .manageTopics]

    /// The scopes by the names the command line, the store and the fleet's bucket use, in this order.
    public static let named: [(name: String, scope: SenderScopes)] = [
        ("send", .send), ("send-topics", .sendTopics), ("manage-topics", .manageTopics),
    ]

    /// The scopes of a comma-separated list of names (`send,send-topics`), `all` for every one; `nil` when a name
    /// is unknown or the list is empty.
    public init?(parsing list: some StringProtocol) {
        var scopes: SenderScopes = []
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map { String($0.filter { $0 != " " }) }
        guard !names.isEmpty else { return nil }
        for name in names {
            if name == "all" {
                scopes.formUnion(.all)
            } else if let scope = Self.named.first(where: { $0.name == name })?.scope {
                scopes.formUnion(scope)
            } else {
                return nil
            }
        }
        self = scopes
    }

    /// The names of the scopes held, in ``named`` order.
    public var names: [String] { Self.named.filter { contains($0.scope) }.map(\.name) }

    /// The names, comma-separated.
    public var description: String { names.joined(separator: ",") }
}

/// A sender's credential as kept (in an instance's store, or in the fleet's senders bucket): a name, the SHA-256 of
/// its secret (the secret itself is shown once, when it is made, and kept nowhere), its scopes and its rate limit.
public struct SenderCredential: Sendable, Hashable {
    /// The sender's name: 1 to 64 of `a-z`, `0-9`, `-` and `_` (a key of a NATS bucket).
    public var name: String
    /// The SHA-256 of the secret, lower-case hex.
    public var secretHash: String
    /// What the sender may do.
    public var scopes: SenderScopes
    /// The requests per second the sender may make, on average; `nil`: no limit. Within ``rates`` (a rate from
    /// elsewhere, such as the fleet's bucket, is taken as the nearest end of it).
    public var rate: Double?
    /// The rates a sender can have: one request in 1,000 s to a million a second.
    public static let rates: ClosedRange<Double> = 0.001...1_000_000
    /// The bursts a sender can have.
    public static let bursts: ClosedRange<Int> = 1...1_000_000
    /// The requests the sender may make at once after a pause (the token bucket's size); `nil`: the rate rounded
    /// up (at least 1).
    public var burst: Int?
    /// When it was made, seconds since 1970.
    public var createdAt: Int64
    /// When it was revoked, seconds since 1970; `nil` while it is valid.
    public var revokedAt: Int64?

    /// A credential as made or read back.
    public init(
        name: String, secretHash: String, scopes: SenderScopes, rate: Double? = nil, burst: Int? = nil, createdAt: Int64,
        revokedAt: Int64? = nil
    ) {
        self.name = name
        self.secretHash = secretHash
        self.scopes = scopes
        self.rate = rate
        self.burst = burst
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }

    /// Whether `name` is a valid sender name.
    public static func isValidName(_ name: String) -> Bool {
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        return !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy(allowed.contains)
    }

    /// A new random secret: `hsk_` and 32 random bytes, base64url.
    public static func newSecret() -> String {
        var random = SystemRandomNumberGenerator()
        return "hsk_" + ServiceAccountTokens.base64URLEncoded((0..<32).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    /// The SHA-256 of `secret`, lower-case hex: what is kept of it.
    public static func hash(secret: some StringProtocol) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let digest = sha256(secret.utf8)
        return String(decoding: digest.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }

    /// The credential as the fleet's senders bucket holds it (a JSON object).
    public var json: JSONValue {
        var object: JSONObject = [
            "name": .string(name), "secretHash": .string(secretHash), "scopes": .array(scopes.names.map { .string($0) }),
            "createdAt": .int(createdAt),
        ]
        object["rate"] = rate.map { .double($0) } ?? .null
        object["burst"] = burst.map { .int(Int64($0)) } ?? .null
        object["revokedAt"] = revokedAt.map { .int($0) } ?? .null
        return .object(object)
    }

    /// A credential from its JSON object; `nil` when it is not one.
    public init?(json: JSONValue) {
        guard let name = json["name"]?.stringValue, Self.isValidName(name), let hash = json["secretHash"]?.stringValue,
            hash.utf8.count == 64, let names = json["scopes"]?.arrayValue?.compactMap(\.stringValue),
            let createdAt = json["createdAt"]?.intValue
        else { return nil }
        let scopes = names.isEmpty ? [] : SenderScopes(parsing: names.joined(separator: ","))
        guard let scopes else { return nil }
        self.init(
            name: name, secretHash: hash, scopes: scopes, rate: json["rate"]?.doubleValue,
            burst: json["burst"]?.intValue.map { Int($0) }, createdAt: createdAt, revokedAt: json["revokedAt"]?.intValue)
    }
}

/// Where a receiver reads its senders' credentials from, and when.
public struct SenderOptions: Sendable {
    /// Reads every credential, revoked ones included (an instance's store, the fleet's bucket). Called at start and
    /// again at each of ``changes`` (without: every ``refreshInterval``), never on the loop thread; it may block briefly.
    public var loadSenders: @Sendable () throws -> [SenderCredential]
    /// How often the credentials are read again when there are no ``changes``: a sender revoked or added is known
    /// within this.
    public var refreshInterval: Duration = .seconds(2)
    /// Says when the credentials may have changed (a watch of where they are kept): each element reads them again
    /// at once, in place of reading them every ``refreshInterval``. `nil` (the default): read every interval.
    public var changes: AsyncStream<Void>?

    /// Options reading the credentials with `loadSenders`, again at each of `changes` (or every ``refreshInterval``
    /// without).
    public init(changes: AsyncStream<Void>? = nil, loadSenders: @escaping @Sendable () throws -> [SenderCredential]) {
        self.changes = changes
        self.loadSenders = loadSenders
    }
}

/// A sender's token bucket: `rate` tokens a second, at most `burst`; each request takes one. Loop thread only.
struct TokenBucket {
    let rate: Double
    let burst: Double
    private var tokens: Double
    private var updated: ContinuousClock.Instant

    /// `rate` and `burst` are taken into ``SenderCredential/rates`` and ``SenderCredential/bursts``, whatever a
    /// bucket's entry says: a rate near zero or huge would make the arithmetic below leave `Int`'s range.
    init(rate: Double, burst: Int?, now: ContinuousClock.Instant) {
        let rate = min(max(rate, SenderCredential.rates.lowerBound), SenderCredential.rates.upperBound)
        self.rate = rate
        let bursts = SenderCredential.bursts
        self.burst = Double(min(max(burst ?? Int(rate.rounded(.up)), bursts.lowerBound), bursts.upperBound))
        self.tokens = self.burst
        self.updated = now
    }

    /// Takes a token: `nil` when there was one, else how long until there is (whole seconds, at least 1, as
    /// `Retry-After` says it).
    mutating func take(now: ContinuousClock.Instant) -> Int? {
        let elapsed = now - updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        tokens = min(burst, tokens + seconds * rate)
        updated = now
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        return max(1, Int(((1 - tokens) / rate).rounded(.up)))
    }
}

/// A sender known to a receiver: its scopes and, with a rate limit, its bucket. Loop thread only.
final class KnownSender {
    let credential: SenderCredential
    var bucket: TokenBucket?

    init(_ credential: SenderCredential, now: ContinuousClock.Instant) {
        self.credential = credential
        self.bucket = credential.rate.flatMap { $0 > 0 && $0.isFinite ? TokenBucket(rate: $0, burst: credential.burst, now: now) : nil }
    }
}

/// Who made a request, as its authorization says: the scopes it has and, for a sender's secret, that sender.
struct Caller {
    var scopes: SenderScopes
    var sender: KnownSender?

    /// The bearer secret's: every scope, no limit.
    static var everything: Caller { Caller(scopes: .all, sender: nil) }
}
