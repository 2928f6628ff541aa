import HeraldJSON
import HeraldTLS

/// Why a push's VAPID authorization (RFC 8292) is refused: `401` when there is none, `403` when it does not hold.
public enum VAPIDRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// No `Authorization: vapid t=..., k=...` on a push to an endpoint restricted to a key.
    case missing
    /// The header or its token is not what RFC 8292 describes.
    case malformed(String)
    /// `k` is not the key the endpoint is restricted to.
    case wrongKey
    /// The token's signature does not verify with `k`.
    case badSignature
    /// `exp` has passed, or is more than 24 hours ahead.
    case expired
    /// `aud` is not the push service's origin.
    case wrongAudience(expected: String, got: String)

    /// The HTTP status to answer with.
    public var status: Int { self == .missing ? 401 : 403 }

    public var description: String {
        switch self {
        case .missing: "This endpoint is restricted to a VAPID key: send Authorization: vapid t=<JWT>, k=<public key> (RFC 8292)."
        case .malformed(let detail): "The VAPID authorization is malformed: \(detail)."
        case .wrongKey: "The VAPID key (k) is not the one this endpoint is restricted to."
        case .badSignature: "The VAPID token's signature does not verify with its key (ES256)."
        case .expired: "The VAPID token has expired, or its exp is more than 24 hours ahead."
        case .wrongAudience(let expected, let got): "The VAPID token's aud is '\(got)'; this push service is '\(expected)'."
        }
    }
}

/// Voluntary Application Server Identification (RFC 8292) for Web Push endpoints: the `vapid` authorization scheme,
/// an ES256 JWT (`t`) signed with the application server's P-256 key (`k`, uncompressed, base64url).
public enum VAPID {
    /// The longest a token may still be valid for: RFC 8292 allows 24 hours.
    public static let maximumLifetime: Int64 = 24 * 3600

    /// Whether `key` is a P-256 public key as RFC 8292 writes it (the uncompressed point, base64url; padding allowed).
    public static func isPublicKey(_ key: String) -> Bool { publicKey(key) != nil }

    /// Checks `authorization` (the request's header) for an endpoint restricted to `key`: `k` is that key, the token
    /// is an ES256 JWT it signed, `aud` is `audience` (the push service's origin, `https://host[:port]`) and `exp`
    /// is after `now` (seconds since 1970) and at most 24 hours ahead.
    public static func verify(authorization: String?, key: String, audience: String, now: Int64) throws(VAPIDRefusal) {
        guard let authorization else { throw .missing }
        let scheme = "vapid "
        guard authorization.utf8.count > scheme.utf8.count, authorization.prefix(scheme.count).lowercased() == scheme else {
            throw .missing
        }
        var parameters: [String: Substring] = [:]
        for part in authorization.dropFirst(scheme.count).split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { throw .malformed("'\(part)' is not name=value") }
            parameters[pair[0].filter { $0 != " " && $0 != "\t" }.lowercased()] = Substring(pair[1].filter { $0 != " " && $0 != "\t" })
        }
        guard let token = parameters["t"], let given = parameters["k"] else { throw .malformed("it needs t (the token) and k (the key)") }
        guard let givenKey = publicKey(String(given)) else { throw .malformed("k is not a P-256 public key") }
        guard let restricted = publicKey(key), givenKey.x963Representation == restricted.x963Representation else { throw .wrongKey }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = APNsTokenVerifier.base64URLDecoded(parts[0]),
            let claimsBytes = APNsTokenVerifier.base64URLDecoded(parts[1]),
            let signatureBytes = APNsTokenVerifier.base64URLDecoded(parts[2]),
            let header = try? JSONParser.parse(headerBytes), let claims = try? JSONParser.parse(claimsBytes)
        else { throw .malformed("t is not a JWT") }
        guard header["alg"]?.stringValue == "ES256" else { throw .malformed("the token's alg is not ES256") }
        guard givenKey.isValidES256Signature(signatureBytes, for: Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count)))
        else { throw .badSignature }
        guard case .int(let expiry)? = claims["exp"] else { throw .malformed("the token has no exp") }
        guard expiry > now, expiry <= now + maximumLifetime else { throw .expired }
        let claimed = claims["aud"]?.stringValue ?? ""
        guard claimed == audience else { throw .wrongAudience(expected: audience, got: claimed) }
    }

    private static func publicKey(_ text: String) -> P256PublicKey? {
        guard let bytes = APNsTokenVerifier.base64URLDecoded(Substring(text.filter { $0 != "=" })) else { return nil }
        return try? P256PublicKey(x963Representation: bytes)
    }

    /// The origin of `url` (`scheme://host[:port]`), the `aud` VAPID tokens for its endpoints carry.
    public static func origin(of url: String) -> String {
        let parts = url.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
        // "https:", "", "host[:port]", "path..."
        guard parts.count >= 3, parts[0].hasSuffix(":"), parts[1].isEmpty else { return url }
        return "\(parts[0])//\(parts[2])"
    }
}
