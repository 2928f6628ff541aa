import Foundation
import Herald
import HeraldTLS
import Testing

@testable import HeraldHTTPReceiver

private func base64URL(_ bytes: some Sequence<UInt8>) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// The parsers the auth fuzz target (Fuzz/Sources/FuzzAuth) drives, on what it found and on their edges: the Web
/// Push headers and the FCM proxy's CONNECT head as pure functions, and tokens whose claims hold extreme numbers.
@Suite("HTTPReceiver: the credential and push-header parsers on extreme input")
struct AuthParserTests {
    @Test("Web Push headers: TTL a number (capped at four weeks), Urgency one of four, Topic 1 to 32 URL-safe characters")
    func webPushHeaders() throws {
        let defaults = try WebPushHeaders(ttl: nil, urgency: nil, topic: nil)
        #expect(defaults.ttl == WebPushHeaders.defaultTTL && defaults.urgency == "normal" && defaults.topic == nil)
        let given = try WebPushHeaders(ttl: "60", urgency: "HIGH", topic: "news_1-" + String(repeating: "a", count: 25))
        #expect(given.ttl == 60 && given.urgency == "high" && given.topic?.count == 32)
        #expect(try WebPushHeaders(ttl: "9223372036854775807", urgency: nil, topic: nil).ttl == WebPushHeaders.defaultTTL)
        for (ttl, urgency, topic) in [
            ("-1", nil, nil), ("9223372036854775808", nil, nil), ("1e3", nil, nil), ("", nil, nil), (" 60", nil, nil),
            (nil, "urgent", nil), (nil, "", nil), (nil, nil, ""), (nil, nil, String(repeating: "a", count: 33)), (nil, nil, "a/b"),
            (nil, nil, "é"),
        ] as [(String?, String?, String?)] {
            #expect(
                throws: WebPushHeaderError.self, "\(String(describing: ttl)) \(String(describing: urgency)) \(String(describing: topic))"
            ) {
                try WebPushHeaders(ttl: ttl, urgency: urgency, topic: topic)
            }
        }
    }

    @Test("the CONNECT head: incomplete until its blank line, refused 400/403/431, a tunnel to Google's hosts only")
    func connectHead() {
        func parse(_ text: String, limit: Int = 1024) -> ConnectPreamble.Head {
            ConnectPreamble.parse(Array(text.utf8), maximumHeaderBytes: limit)
        }
        #expect(parse("") == .incomplete)
        #expect(parse("CONN") == .incomplete)
        #expect(parse("CONNECT fcm.googleapis.com:443 HTTP/1.1\r\n") == .incomplete)
        #expect(parse("GET / HTTP/1.1\r\n\r\n") == .notConnect)
        #expect(parse("connect fcm.googleapis.com:443 HTTP/1.1\r\n\r\n") == .notConnect)
        let head = "CONNECT FCM.googleapis.com:443 HTTP/1.1\r\nHost: fcm.googleapis.com:443\r\n\r\n"
        #expect(parse(head + "\u{16}\u{3}\u{1}") == .tunnel(target: "fcm.googleapis.com:443", end: head.utf8.count))
        #expect(parse("CONNECT example.com:443 HTTP/1.1\r\n\r\n") == .refused(status: 403, reason: "Forbidden", message: forbidden))
        for line in [
            "CONNECT fcm.googleapis.com:443", "CONNECT fcm.googleapis.com:443 HTTP/1.1 x", "CONNECT fcm.googleapis.com:443 HTTP/2",
        ] {
            guard case .refused(400, _, _) = parse(line + "\r\n\r\n") else {
                Issue.record("\(line): \(parse(line + "\r\n\r\n"))")
                continue
            }
        }
        guard
            case .refused(431, _, _) = parse(
                "CONNECT fcm.googleapis.com:443 HTTP/1.1\r\nX: " + String(repeating: "a", count: 100), limit: 64)
        else {
            Issue.record("a head over the limit is not refused 431")
            return
        }
    }

    @Test("an APNs provider token whose iat is far in the past is expired, not an arithmetic overflow (fuzz finding)")
    func providerTokenIssuedLongAgo() throws {
        let key = try P256PrivateKey()
        let verifier = try #require(
            try APNsTokenVerifier(keys: [APNsProviderKey(keyID: "KEY1234567", teamID: "TEAM123456", pem: key.publicKey.pemRepresentation)]))
        func token(_ claims: String) throws -> String {
            let signed = base64URL(#"{"alg":"ES256","kid":"KEY1234567"}"#.utf8) + "." + base64URL(claims.utf8)
            return "bearer " + signed + "." + base64URL(try key.signES256(Array(signed.utf8)))
        }
        let now: Int64 = 1_700_000_000
        // The fuzz input's claims (after its first byte, which picks the signed provider token).
        for issued in [Int64.min, -9_223_372_036_854_775_000, now - 3601] {
            #expect(throws: APNsTokenRefusal.expired, "iat \(issued)") {
                try verifier.verify(authorization: try token(#"{"iss":"TEAM123456","iat":\#(issued)}"#), now: now)
            }
        }
        #expect(throws: APNsTokenRefusal.invalid) {
            try verifier.verify(authorization: try token(#"{"iss":"TEAM123456","iat":\#(Int64.max)}"#), now: now)
        }
        try verifier.verify(authorization: try token(#"{"iss":"TEAM123456","iat":\#(now - 3600)}"#), now: now)
    }

    @Test("a service-account assertion whose iat is far in the past is refused invalid_grant, not an arithmetic overflow (fuzz finding)")
    func assertionIssuedLongAgo() throws {
        let pair = try RSAKeyPair.generate()
        let email = "fuzz@demo.iam.gserviceaccount.com"
        let publicKey = ServiceAccountPublicKey(keyID: "fuzzkey", clientEmail: email, publicKeyPEM: pair.publicKeyPEM)
        let tokens = ServiceAccountTokens(options: ServiceAccountOptions(loadKeys: { [publicKey] }))
        try tokens.reload()
        let now: Int64 = 1_700_000_000
        func exchange(issuedAt: Int64, expires: Int64) throws(OAuthError) {
            let claims =
                #"{"iss":"\#(email)","aud":"https://oauth2.googleapis.com/token","iat":\#(issuedAt),"exp":\#(expires),"scope":"https://www.googleapis.com/auth/firebase.messaging"}"#
            let signed = base64URL(#"{"alg":"RS256","typ":"JWT","kid":"fuzzkey"}"#.utf8) + "." + base64URL(claims.utf8)
            let signature = (try? RSAKeyPair.signRS256(Array(signed.utf8), privateKeyPEM: pair.privateKeyPEM)) ?? []
            _ = try tokens.exchange(
                ["grant_type": ServiceAccountTokens.grantType, "assertion": signed + "." + base64URL(signature)], now: now)
        }
        // The fuzz input's iat and exp (after its first byte, which picks the signed assertion).
        for (issuedAt, expires) in [(-9_223_372_036_854_775_000, now), (Int64.min, Int64.max), (now - 3601, now + 1)] {
            #expect(throws: OAuthError.self, "iat \(issuedAt), exp \(expires)") { try exchange(issuedAt: issuedAt, expires: expires) }
            do {
                try exchange(issuedAt: issuedAt, expires: expires)
            } catch {
                #expect(error.error == "invalid_grant")
            }
        }
        try exchange(issuedAt: now - 100, expires: now + 3500)
    }

    private let forbidden =
        "Herald tunnels to fcm.googleapis.com:443, iid.googleapis.com:443 and oauth2.googleapis.com:443 only; it is not a general proxy."
}
