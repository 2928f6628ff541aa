import Foundation
import Glibc
import Herald
import HeraldHTTPReceiver
import HeraldTLS
import HeraldTesting
import Testing

/// RFC 8292 on the endpoints: an app registered through Distributor2 with its server's VAPID key; pushes must carry
/// a token that key signed for this push service, still valid.
@Suite("UnifiedPush VAPID")
struct VAPIDTests {
    /// `Authorization: vapid t=..., k=...`: a token signed by `signer`, presenting `presented` (the signer's key when nil).
    static func authorization(
        signer: P256PrivateKey, presented: P256PublicKey? = nil, audience: String = "http://127.0.0.1:8080",
        expiry: Int64 = Int64(time(nil)) + 3600
    ) throws -> String {
        let header = Array(#"{"typ":"JWT","alg":"ES256"}"#.utf8).base64URL
        let claims = Array(#"{"aud":"\#(audience)","exp":\#(expiry),"sub":"mailto:ops@example.org"}"#.utf8).base64URL
        let input = header + "." + claims
        let signature = try signer.signES256(Array(input.utf8))
        return "Authorization: vapid t=\(input).\(signature.base64URL), k=\((presented ?? signer.publicKey).x963Representation.base64URL)"
    }

    @Test("no authorization 401; expired, wrong key, wrong audience, bad signature, malformed 403; a valid token 201 and delivered")
    func vapidRestrictedEndpoint() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let server = try P256PrivateKey()
        let other = try P256PrivateKey()
        try await world.withHerald { base, _ in
            let app = try world.app(
                "org.example.Restricted", version: 2, register: "r", options: ["--vapid", server.publicKey.x963Representation.base64URL])
            let url = "\(base)/up/\(try endpointToken(try await app.next("endpoint")["endpoint"]))"
            func status(_ headers: [String]) async throws -> Int {
                try await post(url, Array("push".utf8), headers: ["TTL: 60"] + headers, in: world.directory).status
            }
            #expect(try await status([]) == 401)
            #expect(try await status([try Self.authorization(signer: server, expiry: Int64(time(nil)) - 10)]) == 403)
            #expect(try await status([try Self.authorization(signer: server, expiry: Int64(time(nil)) + 2 * 24 * 3600)]) == 403)
            #expect(try await status([try Self.authorization(signer: other)]) == 403)
            #expect(try await status([try Self.authorization(signer: server, audience: "https://push.example.org")]) == 403)
            #expect(try await status([try Self.authorization(signer: other, presented: server.publicKey)]) == 403)
            #expect(try await status(["Authorization: vapid t=not-a-jwt, k=\(server.publicKey.x963Representation.base64URL)"]) == 403)
            #expect(try await status(["Authorization: Bearer something"]) == 401)
            #expect(app.messages.isEmpty)
            #expect(try await status([try Self.authorization(signer: server)]) == 201)
            #expect(try await app.next("message")["body"] == Array("push".utf8).hex)
        }
    }

    @Test("a token PyJWT signed with an application server's key is taken")
    func pyJWTSignedToken() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        let python = try pythonEnvironment(with: "PyJWT")
        let script = PushApp.script.deletingLastPathComponent().appendingPathComponent("vapid_sign.py").path
        let signed = try await onOwnThread {
            try runExecutable(python, [script, "http://127.0.0.1:8080", String(Int64(time(nil)) + 3600)])
        }
        guard case .object(let identity)? = try? JSONParser.parse(signed.output), let key = identity["key"]?.stringValue,
            let authorization = identity["authorization"]?.stringValue
        else { throw VAPIDTestError.noIdentity(signed.error) }
        try await world.withHerald { base, _ in
            let app = try world.app("org.example.PyJWT", version: 2, register: "p", options: ["--vapid", key])
            let url = "\(base)/up/\(try endpointToken(try await app.next("endpoint")["endpoint"]))"
            let answer = try await post(
                url, Array("signed".utf8), headers: ["TTL: 60", "Authorization: \(authorization)"], in: world.directory)
            #expect(answer.status == 201)
            #expect(try await app.next("message")["body"] == Array("signed".utf8).hex)
        }
    }

    enum VAPIDTestError: Error {
        case noIdentity(String)
    }

    @Test("a Distributor2 registration whose VAPID key is not a P-256 public key is refused")
    func badVAPIDKey() async throws {
        let world = try UnifiedPushWorld()
        try await world.startBus()
        try await world.withHerald { _, _ in
            let app = try world.app("org.example.BadKey", version: 2, register: "b", options: ["--vapid", "BNotAKey"])
            let registered = try await app.next("registered")
            #expect(registered["result"] == "REGISTRATION_FAILED")
            #expect(registered["reason"]?.hasPrefix("VAPID_REQUIRED") == true)
        }
    }

    @Test("the VAPID audience is the endpoint URL's origin")
    func origin() {
        #expect(VAPID.origin(of: "https://push.example.org/up/") == "https://push.example.org")
        #expect(VAPID.origin(of: "http://127.0.0.1:8080/up/") == "http://127.0.0.1:8080")
    }
}

extension Sequence<UInt8> {
    /// base64url without padding, as JWT and RFC 8292 write bytes.
    var base64URL: String {
        Data(self).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
