import Foundation
import Herald
import HeraldTLS
import HeraldTesting
import Testing

@testable import HeraldHTTPReceiver

/// A provider token as APNs providers make one: ES256 over `header.claims`, base64url without padding.
private func providerToken(
    key: P256PrivateKey, keyID: String = "KEY1234567", teamID: String = "TEAM123456", issuedAt: Int64,
    algorithm: String = "ES256"
) throws -> String {
    func encoded(_ bytes: some DataProtocol) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    let header = encoded(JSONValue.object(["alg": .string(algorithm), "kid": .string(keyID)]).jsonBytes())
    let claims = encoded(JSONValue.object(["iss": .string(teamID), "iat": .int(issuedAt)]).jsonBytes())
    let signature = try key.signES256(Array("\(header).\(claims)".utf8))
    return "\(header).\(claims).\(encoded(signature))"
}

/// The public key (PEM) of a new EC key on `curve`, made by the `openssl` command.
private func publicKeyPEM(curve: String) async throws -> String {
    let openssl = URL(fileURLWithPath: "/usr/bin/openssl")
    let made = try await runExecutable(openssl, ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(curve)"])
    let key = try #require(made.status == 0 ? made.output : nil, "\(made.error)")
    let publicHalf = try await runExecutable(openssl, ["pkey", "-pubout"], input: key)
    return try #require(publicHalf.status == 0 ? publicHalf.output : nil, "\(publicHalf.error)")
}

@Suite("APNs provider tokens: ES256 JWTs of configured keys, checked as APNs checks them")
struct APNsProviderTokenTests {
    let key: P256PrivateKey
    let now: Int64 = 1_800_000_000

    init() throws { key = try P256PrivateKey() }

    private func verifier(_ keys: [APNsProviderKey]? = nil) throws -> APNsTokenVerifier {
        let keys = try keys ?? [APNsProviderKey(keyID: "KEY1234567", teamID: "TEAM123456", pem: key.publicKey.pemRepresentation)]
        return try #require(try APNsTokenVerifier(keys: keys))
    }

    private func refusal(_ authorization: String?, at time: Int64? = nil, verifier: APNsTokenVerifier) -> APNsTokenRefusal? {
        do {
            try verifier.verify(authorization: authorization, now: time ?? now)
            return nil
        } catch {
            return error
        }
    }

    @Test("a good token is accepted up to an hour after it was issued, then expired; the cache does not outlive that")
    func lifetime() throws {
        let verifier = try verifier()
        let token = "bearer " + (try providerToken(key: key, issuedAt: now))
        #expect(refusal(token, verifier: verifier) == nil)
        #expect(refusal(token, at: now + 3600, verifier: verifier) == nil, "remembered, still fresh")
        #expect(refusal(token, at: now + 3601, verifier: verifier) == .expired)
        #expect(refusal("Bearer " + (try providerToken(key: key, issuedAt: now - 3601)), verifier: verifier) == .expired)
        #expect(refusal("BEARER " + (try providerToken(key: key, issuedAt: now + 299)), verifier: verifier) == nil, "clock skew")
        #expect(refusal("bearer " + (try providerToken(key: key, issuedAt: now + 301)), verifier: verifier) == .invalid)
    }

    @Test("missing, foreign or broken tokens get APNs' reasons")
    func refusals() throws {
        let verifier = try verifier()
        #expect(refusal(nil, verifier: verifier) == .missing)
        #expect(refusal("bearer ", verifier: verifier) == .missing)
        #expect(refusal("bearer    ", verifier: verifier) == .missing)
        #expect(refusal("Basic dXNlcjpwdw==", verifier: verifier) == .missing)
        let stranger = try P256PrivateKey()
        #expect(refusal("bearer " + (try providerToken(key: stranger, issuedAt: now)), verifier: verifier) == .invalid)
        #expect(refusal("bearer " + (try providerToken(key: key, keyID: "OTHERKEY99", issuedAt: now)), verifier: verifier) == .invalid)
        #expect(refusal("bearer " + (try providerToken(key: key, teamID: "OTHERTEAM1", issuedAt: now)), verifier: verifier) == .invalid)
        #expect(refusal("bearer " + (try providerToken(key: key, issuedAt: now, algorithm: "ES384")), verifier: verifier) == .invalid)
        let good = try providerToken(key: key, issuedAt: now)
        var tampered = Array(good.utf8)
        tampered[tampered.count - 5] = tampered[tampered.count - 5] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(refusal("bearer " + String(decoding: tampered, as: UTF8.self), verifier: verifier) == .invalid)
        let parts = good.split(separator: ".")
        #expect(refusal("bearer \(parts[0]).\(parts[1])", verifier: verifier) == .invalid)
        #expect(refusal("bearer \(parts[0]).\(parts[1]).\(parts[2]).x", verifier: verifier) == .invalid)
        #expect(refusal("bearer \(parts[0]).\(parts[1]).\(parts[2])=", verifier: verifier) == .invalid, "padding is not base64url")
        #expect(refusal("bearer not.a.jwt", verifier: verifier) == .invalid)
        #expect(refusal("bearer e30.e30.", verifier: verifier) == .invalid)
    }

    @Test("keys from a public key or a .p8 private key in PEM; anything else, and a key ID given twice, refused")
    func keys() async throws {
        let fromPrivate = try APNsProviderKey(keyID: "KEY1234567", teamID: "TEAM123456", pem: key.pemRepresentation)
        let verifier = try verifier([fromPrivate])
        #expect(refusal("bearer " + (try providerToken(key: key, issuedAt: now)), verifier: verifier) == nil)
        #expect(throws: APNsProviderKeyError.self) {
            try APNsProviderKey(keyID: "K", teamID: "T", pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n")
        }
        let p384 = try await publicKeyPEM(curve: "P-384")
        #expect(throws: APNsProviderKeyError.self) { try APNsProviderKey(keyID: "K", teamID: "T", pem: p384) }
        #expect(throws: APNsProviderKeyError.self) { try APNsProviderKey(keyID: "", teamID: "T", pem: key.publicKey.pemRepresentation) }
        #expect(throws: APNsProviderKeyError.self) { try APNsTokenVerifier(keys: [fromPrivate, fromPrivate]) }
        #expect(try APNsTokenVerifier(keys: []) == nil)
    }

    @Test("the APNs route with provider keys: a token or the secret gets in, others get 403 and a reason; other routes keep the secret")
    func route() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
        options.apnsKeys = [try APNsProviderKey(keyID: "KEY1234567", teamID: "TEAM123456", pem: key.publicKey.pemRepresentation)]
        try await withHTTPHerald(options: options) { herald, collected, address in
            let device = try await herald.token()
            let good = try providerToken(key: key, issuedAt: Int64(time(nil)))
            let expired = try providerToken(key: key, issuedAt: Int64(time(nil)) - 7200)
            let alert = #"{"build": "8121"}"#
            let id = "123E4567-E89B-12D3-A456-426614174000"
            let client = try TestSocketClient(address)
            client.send(
                request("POST", "/3/device/\(device)", body: alert, headers: ["authorization": "bearer \(good)", "apns-id": id])
                    + request("POST", "/3/device/\(device)", body: alert, headers: ["Authorization": "Bearer s3cret"])
                    + request("POST", "/3/device/\(device)", body: alert, headers: ["apns-id": id])
                    + request("POST", "/3/device/\(device)", body: alert, headers: ["authorization": "bearer \(expired)"])
                    + request("POST", "/3/device/\(device)", body: alert, headers: ["authorization": "bearer guess"])
                    + request(
                        "POST", "/v1/projects/demo/messages:send", body: #"{"message": {"token": "\#(device)"}}"#,
                        headers: ["authorization": "bearer \(good)"]))
            let answers = responses(in: client.read { responses(in: $0).count >= 6 })
            #expect(answers.map(\.status) == [200, 200, 403, 403, 403, 401])
            #expect(answers[0].headers["apns-id"] == id.lowercased())
            #expect(answers[0].headers["apns-unique-id"]?.count == 36)
            #expect(answers[1].headers["apns-id"]?.count == 36, "a new UUID when the sender gives none")
            #expect(answers[2].headers["apns-id"] == id.lowercased(), "errors carry apns-id too")
            #expect(
                answers[2...4].map { $0.body?["reason"]?.stringValue } == [
                    "MissingProviderToken", "ExpiredProviderToken", "InvalidProviderToken",
                ])
            try await herald.waitUntilIdle()
            #expect(collected.messages.withLock { $0.map(\.messageID) } == [id.lowercased(), answers[1].headers["apns-id"]])
        }
    }

    @Test("base64url: every length and alphabet of RFC 7515, nothing else")
    func base64URL() {
        for count in 0..<40 {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 * 37 + 251) }
            let encoded = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
                of: "/", with: "_"
            )
            .replacingOccurrences(of: "=", with: "")
            #expect(APNsTokenVerifier.base64URLDecoded(Substring(encoded)) == bytes)
        }
        #expect(APNsTokenVerifier.base64URLDecoded("A") == nil, "a length no encoding has")
        #expect(APNsTokenVerifier.base64URLDecoded("AB") == nil, "bits left over that are not zero")
        #expect(APNsTokenVerifier.base64URLDecoded("a+b/") == nil)
        #expect(APNsTokenVerifier.base64URLDecoded("YQ==") == nil)
    }
}
