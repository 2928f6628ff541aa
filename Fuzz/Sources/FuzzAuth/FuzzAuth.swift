import FuzzSupport
import Herald
import HeraldTLS

// The HTTP receiver's parsers are internal: the fuzz build is a debug build, whose modules are compiled for testing.
@testable import HeraldHTTPReceiver

/// The HTTP receiver's parsers of credentials and push headers, on arbitrary bytes. The input's first byte picks
/// the parser (its low seven bits modulo 5), the rest is what that parser reads:
///
/// - 0: `POST /token`'s form (`grant_type=...&assertion=<JWT>`), checked by ``ServiceAccountTokens``;
/// - 1: an `authorization` header with an APNs provider token, checked by ``APNsTokenVerifier``;
/// - 2: an `Authorization: vapid t=..., k=...` header, checked by ``VAPID/verify(authorization:key:audience:now:)``;
/// - 3: a Web Push request's `TTL`, `Urgency` and `Topic` values, one a line (a line not there: no such header);
/// - 4: the first bytes of a connection to a receiver with the FCM proxy on, in the chunks their first byte picks
///   (``FuzzInput/chunked(_:)``), read as the connection's preamble reads them.
///
/// With the first byte's high bit set, parsers 0 to 2 take the rest as a token's claims instead, sign them with the
/// harness's key and check the token: every check after the signature's is reached, and the verdict must be what
/// the claims call for. Any other verdict, an accepted token the harness did not sign, or a crash, stops the run.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = FuzzInput.bytes(start, count)
    guard let first = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    let signed = first & 0x80 != 0
    switch (first & 0x7F) % 5 {
    case 0: signed ? Keys.shared.checkSignedAssertion(claims: rest) : Keys.shared.checkForm(rest)
    case 1: signed ? Keys.shared.checkSignedProviderToken(claims: rest) : Keys.shared.checkProviderToken(rest)
    case 2: signed ? Keys.shared.checkSignedVAPID(claims: rest) : Keys.shared.checkVAPID(rest)
    case 3: checkWebPushHeaders(rest)
    default: checkConnectPreamble(rest)
    }
    return 0
}

@_cdecl("FuzzAuth_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}

/// The time every check is made at (seconds since 1970).
private let now: Int64 = 1_700_000_000

/// The harness's keys (made once per run, so no input can hold a signature of theirs) and the verifiers of them.
private final class Keys: Sendable {
    static let shared = Keys()

    let rsa: RSAKeyPair
    let serviceAccounts: ServiceAccountTokens
    let apnsKey = try! P256PrivateKey()
    let apns: APNsTokenVerifier
    /// The verifier of the inputs' own tokens: apart from ``apns``, whose cache of the tokens the harness signs
    /// could otherwise teach the fuzzer one (through its string comparisons).
    let apnsOfInputs: APNsTokenVerifier
    let vapidKey = try! P256PrivateKey()
    let vapidPublicKey: String
    static let clientEmail = "fuzz@demo.iam.gserviceaccount.com"
    static let audience = "https://push.example.com"

    private init() {
        rsa = try! RSAKeyPair.generate()
        let publicKey = ServiceAccountPublicKey(keyID: "fuzzkey", clientEmail: Self.clientEmail, publicKeyPEM: rsa.publicKeyPEM)
        serviceAccounts = ServiceAccountTokens(options: ServiceAccountOptions(loadKeys: { [publicKey] }))
        try! serviceAccounts.reload()
        let providerKey = try! APNsProviderKey(keyID: "KEY1234567", teamID: "TEAM123456", pem: apnsKey.publicKey.pemRepresentation)
        apns = try! APNsTokenVerifier(keys: [providerKey])!
        apnsOfInputs = try! APNsTokenVerifier(keys: [providerKey])!
        vapidPublicKey = base64URL(vapidKey.publicKey.x963Representation)
        // The round trips: a token made as its clients make it, with good claims, is accepted.
        check(expectingAcceptance: true, of: "a good assertion") {
            try self.exchange(self.assertion(claims: Self.goodAssertionClaims))
        }
        check(expectingAcceptance: true, of: "a good provider token") {
            try self.apns.verify(
                authorization: "bearer " + self.providerToken(claims: Array(#"{"iss":"TEAM123456","iat":1700000000}"#.utf8)), now: now)
        }
        check(expectingAcceptance: true, of: "a good VAPID token") {
            try self.verifyVAPID(self.vapidToken(claims: Array(#"{"aud":"https://push.example.com","exp":1700003600}"#.utf8)))
        }
    }

    static let goodAssertionClaims = Array(
        #"{"iss":"fuzz@demo.iam.gserviceaccount.com","aud":"https://oauth2.googleapis.com/token","iat":1700000000,"exp":1700003600,"scope":"https://www.googleapis.com/auth/firebase.messaging"}"#
            .utf8)

    // MARK: Service-account assertions

    func checkForm(_ bytes: [UInt8]) {
        let form = HTTPAPI.queryItems("/token?" + String(decoding: bytes, as: UTF8.self))
        _ = ServiceAccountTokens.keyID(ofAssertionIn: form)
        check(expectingAcceptance: false, of: "a form the harness did not sign") { _ = try serviceAccounts.exchange(form, now: now) }
    }

    func checkSignedAssertion(claims: [UInt8]) {
        let accepted = Self.acceptsAssertion(claims: claims)
        check(expectingAcceptance: accepted, of: "an assertion of claims \(String(decoding: claims, as: UTF8.self))") {
            try exchange(assertion(claims: claims))
        }
    }

    /// What ``ServiceAccountTokens/exchange(_:now:)`` must do with an assertion of `claims` signed with the key.
    private static func acceptsAssertion(claims bytes: [UInt8]) -> Bool {
        guard let claims = try? JSONParser.parse(bytes), claims.objectValue != nil, claims["iss"]?.stringValue == clientEmail else {
            return false
        }
        let audiences = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard audiences.contains("https://oauth2.googleapis.com/token"), let issued = claims["iat"]?.intValue,
            let expires = claims["exp"]?.intValue
        else { return false }
        let (lifetime, overflow) = expires.subtractingReportingOverflow(issued)
        guard issued <= now + 300, expires > now - 300, expires > issued, !overflow, lifetime <= 3600 else { return false }
        let scopes = (claims["scope"]?.stringValue ?? "").split(separator: " ")
        return scopes.contains { ServiceAccountTokens.scopes.contains(String($0)) }
    }

    private func assertion(claims: [UInt8]) throws -> String {
        let signed = base64URL(#"{"alg":"RS256","typ":"JWT","kid":"fuzzkey"}"#.utf8) + "." + base64URL(claims)
        return signed + "." + base64URL(try RSAKeyPair.signRS256(Array(signed.utf8), privateKeyPEM: rsa.privateKeyPEM))
    }

    private func exchange(_ assertion: String) throws {
        _ = try serviceAccounts.exchange(["grant_type": ServiceAccountTokens.grantType, "assertion": assertion], now: now)
    }

    // MARK: APNs provider tokens

    func checkProviderToken(_ bytes: [UInt8]) {
        let authorization = String(decoding: bytes, as: UTF8.self)
        check(expectingAcceptance: false, of: "a provider token the harness did not sign") {
            try apnsOfInputs.verify(authorization: authorization, now: now)
        }
    }

    func checkSignedProviderToken(claims: [UInt8]) {
        let expected: APNsTokenRefusal? =
            if let parsed = try? JSONParser.parse(claims), parsed["iss"]?.stringValue == "TEAM123456",
                case .int(let issued)? = parsed["iat"]
            {
                issued > now + APNsTokenVerifier.allowedClockSkew ? .invalid : issued < now - APNsTokenVerifier.lifetime ? .expired : nil
            } else {
                .invalid
            }
        let token: String
        do {
            token = try providerToken(claims: claims)
        } catch {
            fatalError("fuzz harness: cannot sign: \(error)")
        }
        var refusal: APNsTokenRefusal?
        do {
            try apns.verify(authorization: "bearer " + token, now: now)
        } catch {
            refusal = error
        }
        guard refusal == expected else {
            fatalError(
                "a provider token of claims \(String(decoding: claims, as: UTF8.self)): \(String(describing: refusal)), not \(String(describing: expected))"
            )
        }
    }

    private func providerToken(claims: [UInt8]) throws -> String {
        let signed = base64URL(#"{"alg":"ES256","kid":"KEY1234567"}"#.utf8) + "." + base64URL(claims)
        return signed + "." + base64URL(try apnsKey.signES256(Array(signed.utf8)))
    }

    // MARK: VAPID

    func checkVAPID(_ bytes: [UInt8]) {
        let authorization = String(decoding: bytes, as: UTF8.self)
        check(expectingAcceptance: false, of: "a VAPID authorization the harness did not sign") {
            try VAPID.verify(authorization: authorization, key: vapidPublicKey, audience: Self.audience, now: now)
        }
    }

    func checkSignedVAPID(claims: [UInt8]) {
        let expected: VAPIDRefusal? =
            if let parsed = try? JSONParser.parse(claims) {
                if case .int(let expiry)? = parsed["exp"] {
                    expiry <= now || expiry > now + VAPID.maximumLifetime
                        ? .expired
                        : parsed["aud"]?.stringValue == Self.audience
                            ? nil : .wrongAudience(expected: Self.audience, got: parsed["aud"]?.stringValue ?? "")
                } else {
                    .malformed("the token has no exp")
                }
            } else {
                .malformed("t is not a JWT")
            }
        let token: String
        do {
            token = try vapidToken(claims: claims)
        } catch {
            fatalError("fuzz harness: cannot sign: \(error)")
        }
        var refusal: VAPIDRefusal?
        do {
            try verifyVAPID(token)
        } catch {
            refusal = error
        }
        guard refusal == expected else {
            fatalError(
                "a VAPID token of claims \(String(decoding: claims, as: UTF8.self)): \(String(describing: refusal)), not \(String(describing: expected))"
            )
        }
    }

    private func vapidToken(claims: [UInt8]) throws -> String {
        let signed = base64URL(#"{"typ":"JWT","alg":"ES256"}"#.utf8) + "." + base64URL(claims)
        return signed + "." + base64URL(try vapidKey.signES256(Array(signed.utf8)))
    }

    private func verifyVAPID(_ token: String) throws(VAPIDRefusal) {
        try VAPID.verify(authorization: "vapid t=\(token), k=\(vapidPublicKey)", key: vapidPublicKey, audience: Self.audience, now: now)
    }
}

/// Runs `body`, which must succeed when `expectingAcceptance` and throw otherwise; stops the run when it does not.
private func check(expectingAcceptance: Bool, of what: @autoclosure () -> String, _ body: () throws -> Void) {
    do {
        try body()
        if !expectingAcceptance { fatalError("\(what()) was accepted") }
    } catch {
        if expectingAcceptance { fatalError("\(what()) was refused: \(error)") }
    }
}

/// base64url without padding, as JWTs write their parts.
private func base64URL(_ bytes: some Sequence<UInt8>) -> String {
    ServiceAccountTokens.base64URLEncoded(Array(bytes))
}

/// `TTL`, `Urgency`, `Topic`: what is accepted is what RFC 8030 allows, within Herald's limits.
private func checkWebPushHeaders(_ bytes: [UInt8]) {
    let lines = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false).map {
        String(decoding: $0, as: UTF8.self)
    }
    let value = { (index: Int) in index < lines.count ? lines[index] : nil }
    do {
        let headers = try WebPushHeaders(ttl: value(0), urgency: value(1), topic: value(2))
        precondition((0...WebPushHeaders.defaultTTL).contains(headers.ttl), "TTL \(headers.ttl) accepted")
        precondition(["very-low", "low", "normal", "high"].contains(headers.urgency), "Urgency \(headers.urgency) accepted")
        if let topic = headers.topic { precondition((1...32).contains(topic.utf8.count), "Topic \(topic) accepted") }
    } catch {
        precondition(!error.message.isEmpty)
    }
}

/// A connection's first bytes, read as they arrive until the preamble knows what they are.
private func checkConnectPreamble(_ bytes: [UInt8]) {
    let limit = 1024
    var head: [UInt8] = []
    for chunk in FuzzInput.chunked(bytes) {
        head += chunk
        switch ConnectPreamble.parse(head, maximumHeaderBytes: limit) {
        case .incomplete:
            precondition(head.count <= limit, "a head of \(head.count) bytes still read")
            continue
        case .notConnect:
            precondition(!Array("CONNECT ".utf8).starts(with: head.prefix(8)), "a CONNECT taken for a request")
        case .refused(let status, _, _):
            precondition([400, 403, 431].contains(status), "refused with \(status)")
        case .tunnel(let target, let end):
            precondition(ConnectPreamble.targets.contains(target), "a tunnel to \(target)")
            precondition(end <= head.count && head[(end - 4)..<end].elementsEqual([13, 10, 13, 10]), "the head ends at \(end)")
        }
        return
    }
}
