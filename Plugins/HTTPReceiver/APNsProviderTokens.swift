import Herald
import HeraldTLS

/// A key that APNs provider tokens may be signed with: the key ID and team ID Apple gives with a `.p8` key, and the
/// key itself (its public half is all the receiver keeps).
public struct APNsProviderKey: Sendable {
    /// The 10-character key ID, the token header's `kid`.
    public let keyID: String
    /// The team ID, the token's `iss` claim.
    public let teamID: String
    let publicKey: P256PublicKey

    /// A key from its PEM text: the P-256 public key (`BEGIN PUBLIC KEY`) or the `.p8` private key Apple hands out
    /// (`BEGIN PRIVATE KEY`; only its public half is kept). Throws ``APNsProviderKeyError``.
    public init(keyID: String, teamID: String, pem: String) throws(APNsProviderKeyError) {
        guard !keyID.isEmpty, !teamID.isEmpty else {
            throw APNsProviderKeyError(keyID: keyID, reason: "the key ID and team ID must not be empty")
        }
        if let key = try? P256PublicKey(pem: pem) {
            publicKey = key
        } else if let key = try? P256PrivateKey(pem: pem) {
            publicKey = key.publicKey
        } else {
            throw APNsProviderKeyError(keyID: keyID, reason: "not a P-256 (ES256) public key or .p8 private key in PEM form")
        }
        self.keyID = keyID
        self.teamID = teamID
    }
}

/// A provider key that cannot be used.
public struct APNsProviderKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    public let keyID: String
    public let reason: String
    public var description: String { "APNs provider key \(keyID): \(reason)" }
}

/// Why APNs refuses a provider token: its `reason`, answered with 403.
enum APNsTokenRefusal: String, Error, Equatable {
    /// No `authorization: bearer <token>`.
    case missing = "MissingProviderToken"
    /// Not a well-formed ES256 token of a known key and its team, or its signature does not verify.
    case invalid = "InvalidProviderToken"
    /// Issued (`iat`) more than an hour ago.
    case expired = "ExpiredProviderToken"
}

/// Verifies APNs provider tokens (JWT, ES256) against the configured keys as APNs does: the header's `alg` is
/// `ES256` and its `kid` a configured key ID, the claims' `iss` that key's team ID, the signature verifies with the
/// key, and `iat` is at most an hour old (and at most ``allowedClockSkew`` ahead of this machine's clock).
///
/// Providers send the same token for up to an hour: a verified token is remembered (up to ``cacheSize`` of them), so
/// its signature is checked once; its age is checked every time.
final class APNsTokenVerifier: Sendable {
    static let lifetime: Int64 = 3600
    static let allowedClockSkew: Int64 = 300
    static let cacheSize = 256

    private let keys: [String: APNsProviderKey]
    /// Verified tokens and their `iat`.
    private let verified = Locked<[String: Int64]>([:])

    /// A verifier of `keys`; `nil` for none. Throws ``APNsProviderKeyError`` when two keys have the same ID.
    init?(keys: [APNsProviderKey]) throws(APNsProviderKeyError) {
        guard !keys.isEmpty else { return nil }
        var byID: [String: APNsProviderKey] = [:]
        for key in keys {
            guard byID.updateValue(key, forKey: key.keyID) == nil else {
                throw APNsProviderKeyError(keyID: key.keyID, reason: "configured twice")
            }
        }
        self.keys = byID
    }

    /// Checks the `authorization` header's provider token at `now` (seconds since 1970).
    func verify(authorization: String?, now: Int64) throws(APNsTokenRefusal) {
        let scheme = "bearer "
        guard let authorization, authorization.utf8.count > scheme.utf8.count, authorization.prefix(scheme.count).lowercased() == scheme
        else { throw .missing }
        let token = String(authorization.dropFirst(scheme.count)).trimmingBlanks()
        guard !token.isEmpty else { throw .missing }
        let issued: Int64
        if let known = verified.withLock({ $0[token] }) {
            issued = known
        } else {
            issued = try verifySignature(token)
            verified.withLock { cache in
                if cache.count >= Self.cacheSize { cache.removeAll() }
                cache[token] = issued
            }
        }
        guard issued <= now + Self.allowedClockSkew else { throw .invalid }
        // Not `now - issued`, which overflows for an `iat` far in the past (a signed token can hold any integer).
        guard issued >= now - Self.lifetime else { throw .expired }
    }

    /// Checks the token's form, key, team and signature; returns its `iat`.
    private func verifySignature(_ token: String) throws(APNsTokenRefusal) -> Int64 {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Self.base64URLDecoded(parts[0]), let claimsBytes = Self.base64URLDecoded(parts[1]),
            let signatureBytes = Self.base64URLDecoded(parts[2]),
            let header = try? JSONParser.parse(headerBytes), let claims = try? JSONParser.parse(claimsBytes),
            header["alg"]?.stringValue == "ES256", let keyID = header["kid"]?.stringValue, let key = keys[keyID],
            claims["iss"]?.stringValue == key.teamID, case .int(let issued)? = claims["iat"], signatureBytes.count == 64
        else { throw .invalid }
        let signed = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        guard key.publicKey.isValidES256Signature(signatureBytes, for: signed) else { throw .invalid }
        return issued
    }

    /// base64url without padding (RFC 7515), as JWT uses it; `nil` for any other byte or a length no encoding has.
    static func base64URLDecoded(_ text: Substring) -> [UInt8]? {
        var output: [UInt8] = []
        output.reserveCapacity(text.utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in text.utf8 {
            let value: UInt8
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): value = 62
            case UInt8(ascii: "_"): value = 63
            default: return nil
            }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        guard bits < 6, accumulator & ((1 << UInt32(bits)) - 1) == 0 else { return nil }
        return output
    }
}

extension String {
    fileprivate func trimmingBlanks() -> String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice.removeFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice.removeLast() }
        return String(slice)
    }
}
