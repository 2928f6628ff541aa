import Herald
import HeraldTLS
import Logging

/// A service-account key Herald issued, as the receiver checks assertions with it: only its public half.
public struct ServiceAccountPublicKey: Sendable, Hashable {
    /// The key's ID: the service-account file's `private_key_id`, a JWT's `kid`.
    public var keyID: String
    /// The account's `client_email`: what a JWT signed with the key must have as `iss`.
    public var clientEmail: String
    /// The public key, SubjectPublicKeyInfo PEM.
    public var publicKeyPEM: String
    /// A revoked key signs no new token, and the tokens it got stop working.
    public var revoked: Bool
    /// What the access tokens issued for the key may do.
    public var scopes: SenderScopes

    /// A key as the store lists it.
    public init(keyID: String, clientEmail: String, publicKeyPEM: String, revoked: Bool = false, scopes: SenderScopes = .all) {
        self.keyID = keyID
        self.clientEmail = clientEmail
        self.publicKeyPEM = publicKeyPEM
        self.revoked = revoked
        self.scopes = scopes
    }
}

/// Google's OAuth 2.0 token endpoint for service accounts, as the Admin SDKs use it: `POST /token` with the JWT-bearer
/// grant (RFC 7523), the assertion an RS256 JWT signed with the key of a service-account file Herald issued. It answers
/// an opaque access token, which the receiver's routes accept beside the bearer secret until it expires or its key is
/// revoked.
public struct ServiceAccountOptions: Sendable {
    /// Reads the keys Herald issued, revoked ones included (from the store). Called at start, every
    /// ``refreshInterval``, and when an assertion names a key not yet known; it may block briefly (it is not called
    /// on the loop thread).
    public var loadKeys: @Sendable () throws -> [ServiceAccountPublicKey]
    /// The audience an assertion must name: the service-account file's `token_uri`.
    public var tokenURI = "https://oauth2.googleapis.com/token"
    /// How long an access token is valid.
    public var accessTokenLifetime: Int64 = 3600
    /// How often the keys are read again: a key revoked stops working within this (and a second).
    public var refreshInterval: Duration = .seconds(2)
    /// An assertion naming an unknown key reads the keys again at once, unless they were read less than this ago
    /// (so that a client sending made-up key IDs does not make every request read the store).
    public var unknownKeyReadInterval: Duration = .seconds(1)
    /// The most access tokens one key holds at once: a client asking for tokens in a loop pushes out its own oldest,
    /// not other clients'.
    public var maximumTokensPerKey = 64

    /// Options reading the keys with `loadKeys`, the other settings at their defaults.
    public init(loadKeys: @escaping @Sendable () throws -> [ServiceAccountPublicKey]) {
        self.loadKeys = loadKeys
    }
}

/// Why an assertion was refused, as Google's token endpoint answers it: `{"error": ..., "error_description": ...}`.
struct OAuthError: Error, Equatable {
    var error: String
    var description: String

    static func grant(_ description: String) -> OAuthError { OAuthError(error: "invalid_grant", description: description) }

    var body: JSONValue { ["error": .string(error), "error_description": .string(description)] }
}

/// The keys, the access tokens issued, and the checks. Thread-safe.
final class ServiceAccountTokens: Sendable {
    /// A key as checked: its public key read once.
    struct Key {
        var clientEmail: String
        var verifier: RS256PublicKey
        var revoked: Bool
        var scopes: SenderScopes
    }

    private struct State {
        var keys: [String: Key] = [:]
        /// Access token → the key it was issued to and when it expires (seconds since 1970).
        var tokens: [String: (keyID: String, expires: Int64)] = [:]
        /// Each key's access tokens, oldest first (some may have left ``tokens`` already).
        var tokensOfKey: [String: [String]] = [:]
        var lastLoad: ContinuousClock.Instant?
        /// The reads of the keys started, and the newest one whose result is in use: an older read finishing
        /// later (one that began before a revocation) changes nothing.
        var readsStarted = 0
        var readApplied = 0
        /// Answers waiting for the read of the keys that a request with an unknown `kid` started.
        var waitingForRead: [@Sendable () -> Void]?
    }

    let options: ServiceAccountOptions
    private let state = Locked(State())
    static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// The scopes of which an assertion must ask one.
    static let scopes: Set<String> = [
        "https://www.googleapis.com/auth/firebase.messaging", "https://www.googleapis.com/auth/cloud-platform",
    ]
    /// The clock skew allowed on `iat` and `exp`.
    static let skew: Int64 = 300
    /// The most access tokens kept at once.
    static let tokenLimit = 65_536
    /// Without a `kid`, the most keys of the assertion's `iss` whose signature is tried.
    static let candidatesWithoutKeyID = 2

    init(options: ServiceAccountOptions) {
        self.options = options
    }

    /// Reads the keys again (blocking). Keys whose public key cannot be read are left out.
    func reload() throws {
        let (read, known) = state.withLock { state in
            state.readsStarted += 1
            return (state.readsStarted, state.keys)
        }
        let loaded = try options.loadKeys()
        var keys: [String: Key] = [:]
        for key in loaded {
            if let existing = known[key.keyID], existing.clientEmail == key.clientEmail {
                keys[key.keyID] = Key(clientEmail: key.clientEmail, verifier: existing.verifier, revoked: key.revoked, scopes: key.scopes)
            } else if let verifier = try? RS256PublicKey(pem: key.publicKeyPEM) {
                keys[key.keyID] = Key(clientEmail: key.clientEmail, verifier: verifier, revoked: key.revoked, scopes: key.scopes)
            }
        }
        state.withLock { state in
            guard read > state.readApplied else { return }
            state.readApplied = read
            state.keys = keys
            state.lastLoad = .now
            // Tokens of revoked or removed keys go.
            state.tokens = state.tokens.filter { keys[$0.value.keyID]?.revoked == false }
            state.tokensOfKey = state.tokensOfKey.filter { keys[$0.key]?.revoked == false }
        }
    }

    /// Reads the keys again on `loop`'s blocking pool for a request whose `kid` is unknown, then runs `done` on the
    /// loop. While one such read is under way, later requests wait for it instead of starting another: a client
    /// sending assertions with made-up key IDs costs one read at a time, and at most one per
    /// ``ServiceAccountOptions/unknownKeyReadInterval``.
    func readKeys(on loop: EventLoop, logger: Logger, then done: @escaping @Sendable () -> Void) {
        let start = state.withLock { state -> Bool in
            if state.waitingForRead != nil {
                state.waitingForRead?.append(done)
                return false
            }
            state.waitingForRead = [done]
            return true
        }
        guard start else { return }
        loop.offload { [self] in
            try reload()
        } then: { [self] result in
            if case .failure(let error) = result {
                logger.warning("cannot read the service-account keys", metadata: ["error": "\(error)"])
            }
            let waiting = state.withLock { state in
                defer { state.waitingForRead = nil }
                return state.waitingForRead ?? []
            }
            for answer in waiting { answer() }
        }
    }

    /// Whether the keys were read less than ``ServiceAccountOptions/unknownKeyReadInterval`` ago (an unknown `kid`
    /// does not read them again then).
    var loadedRecently: Bool {
        let interval = options.unknownKeyReadInterval
        return state.withLock { state in state.lastLoad.map { .now - $0 < interval } ?? false }
    }

    /// The scopes of `token` (its key's) when it is an access token issued, not expired, whose key is not revoked;
    /// `nil` otherwise.
    func scopes(of token: some StringProtocol, now: Int64) -> SenderScopes? {
        state.withLock { state in
            guard let issued = state.tokens[String(token)] else { return nil }
            guard issued.expires > now, let key = state.keys[issued.keyID], !key.revoked else {
                state.tokens[String(token)] = nil
                return nil
            }
            return key.scopes
        }
    }

    /// The key ID an assertion names (its header's `kid`), to know whether the keys must be read first.
    static func keyID(ofAssertionIn form: [String: String]) -> String? {
        guard let assertion = form["assertion"], let header = assertion.split(separator: ".", omittingEmptySubsequences: false).first,
            let bytes = base64URLDecoded(header), let json = try? JSONParser.parse(bytes)
        else { return nil }
        return json["kid"]?.stringValue
    }

    /// Whether the keys know `keyID`.
    func knows(_ keyID: String) -> Bool { state.withLock { $0.keys[keyID] != nil } }

    /// Checks the token request's form (`grant_type`, `assertion`) and issues an access token: the token and its
    /// lifetime in seconds.
    func exchange(_ form: [String: String], now: Int64) throws(OAuthError) -> (token: String, expiresIn: Int64) {
        guard let grant = form["grant_type"] else {
            throw OAuthError(error: "invalid_request", description: "Missing required parameter: grant_type")
        }
        guard grant == Self.grantType else {
            throw OAuthError(error: "unsupported_grant_type", description: "Invalid grant_type: \(grant)")
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            throw OAuthError(error: "invalid_request", description: "Missing required parameter: assertion")
        }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Self.base64URLDecoded(parts[0]), let claimBytes = Self.base64URLDecoded(parts[1]),
            let signature = Self.base64URLDecoded(parts[2]), let header = try? JSONParser.parse(headerBytes),
            let claims = try? JSONParser.parse(claimBytes), claims.objectValue != nil
        else {
            throw .grant("Invalid JWT: not a JSON Web Token (three base64url parts: header, claims, signature).")
        }
        guard header["alg"]?.stringValue == "RS256" else { throw .grant("Invalid JWT: the algorithm must be RS256.") }
        guard let issuer = claims["iss"]?.stringValue else { throw .grant("Invalid JWT: no iss claim.") }
        let keyID = header["kid"]?.stringValue
        let candidates: [(String, Key)] = state.withLock { state in
            if let keyID { return state.keys[keyID].map { [(keyID, $0)] } ?? [] }
            // Without a `kid` (the Admin SDKs always send one): the issuer's keys still in force, a few at most, so
            // that a guessed `iss` cannot make one request cost many signature checks.
            return Array(
                state.keys.filter { $0.value.clientEmail == issuer && !$0.value.revoked }.map { ($0.key, $0.value) }
                    .prefix(Self.candidatesWithoutKeyID))
        }
        let signed = Array(assertion.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard let (signer, key) = candidates.first(where: { $0.1.verifier.isValidSignature(signature, for: signed) }) else {
            throw .grant("Invalid JWT Signature.")
        }
        guard key.clientEmail == issuer else { throw .grant("Invalid JWT: the iss claim is not the key's service account.") }
        guard !key.revoked else { throw .grant("Invalid JWT Signature: the key \(signer) was revoked.") }
        guard Self.audiences(claims["aud"]).contains(options.tokenURI) else {
            throw .grant("Invalid JWT: Failed audience check. The audience must be \(options.tokenURI).")
        }
        // `expires - 3600`, not `expires - issuedAt`, which overflows for an `iat` far in the past (`expires`, checked
        // to be later than a moment ago first, cannot).
        guard let issuedAt = claims["iat"]?.intValue, let expires = claims["exp"]?.intValue, issuedAt <= now + Self.skew,
            expires > now - Self.skew, expires > issuedAt, expires - 3600 <= issuedAt
        else {
            throw .grant(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
            )
        }
        let scopes = Set((claims["scope"]?.stringValue ?? "").split(separator: " ").map(String.init))
        guard !scopes.isDisjoint(with: Self.scopes) else {
            throw OAuthError(
                error: "invalid_scope",
                description:
                    "The scope must include https://www.googleapis.com/auth/firebase.messaging or https://www.googleapis.com/auth/cloud-platform."
            )
        }
        var random = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
        let token = "ya29.herald." + Self.base64URLEncoded(bytes)
        let lifetime = options.accessTokenLifetime
        state.withLock { state in
            // Expired tokens are dropped as new ones are issued; past the limit (a client asking for tokens in a
            // loop), the half closest to expiry goes too: their clients get 401 and ask again.
            if state.tokens.count >= Self.tokenLimit {
                state.tokens = state.tokens.filter { $0.value.expires > now }
                if state.tokens.count >= Self.tokenLimit {
                    let kept = state.tokens.sorted { $0.value.expires > $1.value.expires }.prefix(Self.tokenLimit / 2)
                    state.tokens = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
                }
            }
            state.tokens[token] = (signer, now + lifetime)
            var own = state.tokensOfKey[signer, default: []].filter { state.tokens[$0] != nil }
            own.append(token)
            let limit = max(options.maximumTokensPerKey, 1)
            if own.count > limit {
                for old in own.prefix(own.count - limit) { state.tokens[old] = nil }
                own.removeFirst(own.count - limit)
            }
            state.tokensOfKey[signer] = own
        }
        return (token, lifetime)
    }

    /// `aud` as a string or a list of strings.
    private static func audiences(_ value: JSONValue?) -> [String] {
        if let single = value?.stringValue { return [single] }
        return value?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    static func base64URLDecoded(_ text: some StringProtocol) -> [UInt8]? {
        var table = [Int16](repeating: -1, count: 256)
        for (index, byte) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8.enumerated() {
            table[Int(byte)] = Int16(index)
        }
        var bytes: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in text.utf8 where byte != UInt8(ascii: "=") {
            let value = table[Int(byte)]
            guard value >= 0 else { return nil }
            buffer = buffer << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        return bytes
    }

    static func base64URLEncoded(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var text: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = buffer << 8 | UInt32(byte)
            bits += 8
            while bits >= 6 {
                bits -= 6
                text.append(alphabet[Int(buffer >> UInt32(bits) & 0x3F)])
            }
        }
        if bits > 0 { text.append(alphabet[Int(buffer << UInt32(6 - bits) & 0x3F)]) }
        return String(decoding: text, as: UTF8.self)
    }
}
