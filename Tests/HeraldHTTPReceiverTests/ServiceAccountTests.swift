import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTLS
import HeraldTesting
import Testing

/// A receiver with service accounts and the FCM proxy on, the keys in memory (read again every 200 ms), its CA in a
/// temporary directory; `body` gets the receiver's port, the CA file, the issued key pair and the key list.
private func withProxyHerald(
    refreshInterval: Duration = .milliseconds(200), requestTimeout: Duration = .seconds(10), tokensPerKey: Int = 64,
    onRead: @escaping @Sendable () -> Void = {},
    _ body: (Herald, Collected, _ port: Int, _ caFile: String, _ pair: RSAKeyPair, _ keys: Locked<[ServiceAccountPublicKey]>) async throws
        -> Void
) async throws {
    try await withTemporaryDirectory { directory in
        let pair = try RSAKeyPair.generate()
        let keys = Locked([ServiceAccountPublicKey(keyID: "key-1", clientEmail: ServiceAccountTests.email, publicKeyPEM: pair.publicKeyPEM)]
        )
        let authority = try LocalCertificateAuthority.openOrCreate(
            directory: directory + "/ca", permittedNames: ["fcm.googleapis.com", "iid.googleapis.com", "oauth2.googleapis.com"])
        try authority.issueServerCertificate(names: ["fcm.googleapis.com", "iid.googleapis.com", "oauth2.googleapis.com"])
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "proxy-secret")
        options.requestTimeout = requestTimeout
        var accounts = ServiceAccountOptions {
            onRead()
            return keys.withLock { $0 }
        }
        accounts.refreshInterval = refreshInterval
        accounts.maximumTokensPerKey = tokensPerKey
        accounts.unknownKeyReadInterval = .zero
        options.serviceAccounts = accounts
        options.fcmProxy = try TLSServerContext(
            configuration: .init(certificateFile: authority.serverCertificateFile, keyFile: authority.serverKeyFile))
        try await withHTTPHerald(options: options) { herald, collected, address in
            guard case .tcp(_, let port) = address else { throw POSIXError(.EINVAL) }
            try await body(herald, collected, port, authority.certificateFile, pair, keys)
        }
    }
}

private func base64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// curl through the receiver as an HTTPS proxy: the status line's code and the body, or curl's failure.
private struct ProxiedAnswer {
    var status: Int
    var body: String
    var connectStatus: Int
    var httpVersion: String
    var exitStatus: Int32

    var json: JSONValue? { try? JSONParser.parse(Array(body.utf8)) }
}

@Suite("HTTPReceiver: service-account tokens and the FCM proxy (CONNECT to Google's hosts, TLS inside)", .serialized)
struct ServiceAccountTests {
    static let email = "sender@demo.iam.gserviceaccount.com"
    static let tokenURI = "https://oauth2.googleapis.com/token"
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    /// An RS256 JWT as google-auth makes it for a service account, with what a test changes.
    static func assertion(
        _ privateKeyPEM: String, kid: String = "key-1", iss: String = email, aud: String = tokenURI, scope: String = scope,
        issuedAt: Int = Int(Date().timeIntervalSince1970), lifetime: Int = 3600, expiresAt: Int? = nil
    ) throws -> String {
        let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(kid)"}"#
        let expires = expiresAt ?? issuedAt + lifetime
        let claims = #"{"iss":"\#(iss)","aud":"\#(aud)","scope":"\#(scope)","iat":\#(issuedAt),"exp":\#(expires)}"#
        let signed = base64URL(Array(header.utf8)) + "." + base64URL(Array(claims.utf8))
        return signed + "." + base64URL(try RSAKeyPair.signRS256(Array(signed.utf8), privateKeyPEM: privateKeyPEM))
    }

    private func curl(
        port: Int, caFile: String, _ url: String, form: String? = nil, json: String? = nil, headers: [String] = [], extra: [String] = []
    ) async throws -> ProxiedAnswer {
        var arguments = [
            "-sS", "--proxy", "http://127.0.0.1:\(port)", "--cacert", caFile, "-w", "\n%{http_code} %{http_connect} %{http_version}",
        ]
        arguments += extra
        for header in headers { arguments += ["-H", header] }
        if let form { arguments += ["--data-raw", form] }
        if let json { arguments += ["-H", "content-type: application/json", "--data-raw", json] }
        let command = arguments + [url]
        let result = try await runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), command)
        var lines = result.output.split(separator: "\n", omittingEmptySubsequences: false)
        let codes = (lines.popLast() ?? "").split(separator: " ")
        return ProxiedAnswer(
            status: codes.first.flatMap { Int($0) } ?? 0, body: lines.joined(separator: "\n"),
            connectStatus: codes.count > 1 ? Int(codes[1]) ?? 0 : 0, httpVersion: codes.count > 2 ? String(codes[2]) : "",
            exitStatus: result.status)
    }

    private func token(port: Int, caFile: String, _ assertion: String) async throws -> ProxiedAnswer {
        try await curl(
            port: port, caFile: caFile, Self.tokenURI,
            form: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)")
    }

    @Test("a valid assertion gets an access token through the proxy, which sends over HTTP/1.1 and HTTP/2, changes topics, reads IID info")
    func tokenSendsThroughTheProxy() async throws {
        try await withProxyHerald { herald, collected, port, caFile, pair, _ in
            let answer = try await token(port: port, caFile: caFile, try Self.assertion(pair.privateKeyPEM))
            #expect(answer.status == 200, "\(answer.body)")
            #expect(answer.connectStatus == 200)
            let access = try #require(answer.json?["access_token"]?.stringValue)
            #expect(answer.json?["token_type"] == "Bearer")
            #expect(answer.json?["expires_in"]?.intValue == 3600)
            let registration = try await herald.token()
            for (n, version) in [("1", "--http1.1"), ("2", "--http2")] {
                let sent = try await curl(
                    port: port, caFile: caFile, "https://fcm.googleapis.com/v1/projects/demo/messages:send",
                    json: #"{"message": {"token": "\#(registration)", "data": {"n": "\#(n)"}}}"#,
                    headers: ["authorization: Bearer \(access)"], extra: [version])
                #expect(sent.status == 200, "\(sent.body)")
                #expect(sent.httpVersion == (version == "--http2" ? "2" : "1.1"))
            }
            let added = try await curl(
                port: port, caFile: caFile, "https://iid.googleapis.com/iid/v1:batchAdd",
                json: #"{"to": "/topics/news", "registration_tokens": ["\#(registration)"]}"#, headers: ["authorization: Bearer \(access)"])
            #expect(added.status == 200, "\(added.body)")
            #expect(try await herald.subscribedTopics() == ["news"])
            let info = try await curl(
                port: port, caFile: caFile, "https://iid.googleapis.com/iid/info/\(registration)?details=true",
                headers: ["authorization: Bearer \(access)"], extra: ["--http2"])
            #expect(info.status == 200, "\(info.body)")
            #expect(info.json == ["platform": "LINUX", "rel": ["topics": ["news": [:]]]])
            let brief = try await curl(
                port: port, caFile: caFile, "https://iid.googleapis.com/iid/info/\(registration)",
                headers: ["authorization: Bearer \(access)"])
            #expect(brief.json == ["platform": "LINUX"])
            let stranger = try await curl(
                port: port, caFile: caFile, "https://iid.googleapis.com/iid/info/someone-else", headers: ["authorization: Bearer \(access)"]
            )
            #expect(stranger.status == 404)
            #expect(await eventually { collected.messages.withLock { $0.count } == 2 })
            // Without a token, or with one made up, the routes answer 401 as they do without the secret.
            let refused = try await curl(
                port: port, caFile: caFile, "https://fcm.googleapis.com/v1/projects/demo/messages:send",
                json: #"{"message": {"token": "\#(registration)"}}"#, headers: ["authorization: Bearer ya29.herald.made-up"])
            #expect(refused.status == 401)
        }
    }

    @Test(
        "refused assertions: another key, expired, too long, wrong audience, wrong issuer, wrong scope, no grant type; Google's error shape"
    )
    func refusedAssertions() async throws {
        try await withProxyHerald { _, _, port, caFile, pair, _ in
            let other = try RSAKeyPair.generate()
            let now = Int(Date().timeIntervalSince1970)
            let cases: [(String, String, String)] = [
                ("another key", try Self.assertion(other.privateKeyPEM), "invalid_grant"),
                ("an unknown kid", try Self.assertion(other.privateKeyPEM, kid: "key-2"), "invalid_grant"),
                ("expired", try Self.assertion(pair.privateKeyPEM, issuedAt: now - 7200), "invalid_grant"),
                ("more than an hour", try Self.assertion(pair.privateKeyPEM, lifetime: 7200), "invalid_grant"),
                ("wrong audience", try Self.assertion(pair.privateKeyPEM, aud: "https://example.com/token"), "invalid_grant"),
                ("wrong issuer", try Self.assertion(pair.privateKeyPEM, iss: "other@demo.iam.gserviceaccount.com"), "invalid_grant"),
                ("wrong scope", try Self.assertion(pair.privateKeyPEM, scope: "https://www.googleapis.com/auth/drive"), "invalid_scope"),
                ("not a JWT", "not.a-jwt", "invalid_grant"),
                // exp - iat would overflow: refused, and the daemon goes on (the requests after it are answered).
                (
                    "iat the smallest integer, exp now", try Self.assertion(pair.privateKeyPEM, issuedAt: Int.min, expiresAt: now),
                    "invalid_grant"
                ),
            ]
            for (what, assertion, error) in cases {
                let answer = try await token(port: port, caFile: caFile, assertion)
                #expect(answer.status == 400, "\(what): \(answer.body)")
                #expect(answer.json?["error"]?.stringValue == error, "\(what): \(answer.body)")
                #expect(answer.json?["error_description"]?.stringValue?.isEmpty == false, "\(what)")
            }
            let noGrant = try await curl(port: port, caFile: caFile, Self.tokenURI, form: "assertion=x")
            #expect(noGrant.status == 400)
            #expect(noGrant.json?["error"] == "invalid_request")
            let otherGrant = try await curl(port: port, caFile: caFile, Self.tokenURI, form: "grant_type=password&assertion=x")
            #expect(otherGrant.json?["error"] == "unsupported_grant_type")
        }
    }

    @Test("a revoked key gets no new token, and the tokens it got stop working")
    func revokedKey() async throws {
        try await withProxyHerald { herald, _, port, caFile, pair, keys in
            let answer = try await token(port: port, caFile: caFile, try Self.assertion(pair.privateKeyPEM))
            let access = try #require(answer.json?["access_token"]?.stringValue)
            let registration = try await herald.token()
            let send = #"{"message": {"token": "\#(registration)"}}"#
            let url = "https://fcm.googleapis.com/v1/projects/demo/messages:send"
            #expect(try await curl(port: port, caFile: caFile, url, json: send, headers: ["authorization: Bearer \(access)"]).status == 200)
            keys.withLock { $0[0].revoked = true }
            let stopped = try await eventually(timeout: .seconds(10)) {
                try await self.curl(port: port, caFile: caFile, url, json: send, headers: ["authorization: Bearer \(access)"]).status == 401
            }
            #expect(stopped)
            let again = try await token(port: port, caFile: caFile, try Self.assertion(pair.privateKeyPEM))
            #expect(again.status == 400)
            #expect(again.json?["error"] == "invalid_grant")
            // The bearer secret still works.
            #expect(
                try await curl(port: port, caFile: caFile, url, json: send, headers: ["authorization: Bearer proxy-secret"]).status == 200)
        }
    }

    @Test("one key asking for tokens in a loop pushes out its own oldest tokens, not another key's")
    func tokensPerKey() async throws {
        try await withProxyHerald(tokensPerKey: 3) { herald, _, port, _, pair, keys in
            let other = try RSAKeyPair.generate()
            keys.withLock { $0.append(ServiceAccountPublicKey(keyID: "key-2", clientEmail: Self.email, publicKeyPEM: other.publicKeyPEM)) }
            func issue(_ privateKeyPEM: String, kid: String) throws -> String {
                let form =
                    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
                    + (try Self.assertion(privateKeyPEM, kid: kid))
                let answer = try httpRequest(port: port, "POST", "/token", body: form)
                return try #require(try JSONParser.parse(Array(answer.body.utf8))["access_token"]?.stringValue, "\(answer.body)")
            }
            let registration = try await herald.token()
            func sends(_ access: String) throws -> Bool {
                try httpRequest(
                    port: port, "POST", "/v1/projects/demo/messages:send", body: #"{"message": {"token": "\#(registration)"}}"#,
                    secret: access
                ).status == 200
            }
            let kept = try issue(other.privateKeyPEM, kid: "key-2")
            let looped = try (0..<5).map { _ in try issue(pair.privateKeyPEM, kid: "key-1") }
            #expect(try looped.map(sends) == [false, false, true, true, true])
            #expect(try sends(kept))
        }
    }

    @Test("requests naming unknown keys read the keys one at a time, however many arrive at once")
    func oneReadAtATime() async throws {
        let reading = Locked((now: 0, most: 0, reads: 0))
        let onRead: @Sendable () -> Void = {
            reading.withLock {
                $0.now += 1
                $0.reads += 1
                $0.most = max($0.most, $0.now)
            }
            // A slow store, so that requests arrive while a read is under way.
            usleep(50_000)
            reading.withLock { $0.now -= 1 }
        }
        try await withProxyHerald(refreshInterval: .seconds(3600), onRead: onRead) { _, _, port, _, pair, _ in
            let started = reading.withLock { $0.reads }
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        let form =
                            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
                            + (try Self.assertion(pair.privateKeyPEM, kid: "made-up-\(index)"))
                        return try await onOwnThread { try httpRequest(port: port, "POST", "/token", body: form).status }
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers == Array(repeating: 400, count: 20))
            let seen = reading.withLock { $0 }
            #expect(seen.most == 1, "reads of the keys at once: \(seen.most)")
            #expect(seen.reads - started < 20, "every request read the keys: \(seen.reads - started) reads")
        }
    }

    @Test("the proxy's CA vouches for Google's three names only: a certificate it issues for another name fails verification")
    func constrainedAuthority() async throws {
        try await withTemporaryDirectory { directory in
            let authority = try LocalCertificateAuthority.openOrCreate(
                directory: directory + "/ca", permittedNames: ["fcm.googleapis.com", "iid.googleapis.com", "oauth2.googleapis.com"])
            func verify(_ names: [String]) async throws -> (status: Int32, output: String) {
                try authority.issueServerCertificate(names: names)
                let result = try await runExecutable(
                    URL(fileURLWithPath: "/usr/bin/openssl"),
                    ["verify", "-CAfile", authority.certificateFile, "-purpose", "sslserver", authority.serverCertificateFile])
                return (result.status, result.output + result.error)
            }
            #expect(try await verify(["fcm.googleapis.com", "iid.googleapis.com"]).status == 0)
            let other = try await verify(["example.com"])
            #expect(other.status != 0 && other.output.contains("subtree violation"), "\(other.output)")
            // Half a pair left by a stop between the two writes: both are made again.
            unlink(authority.certificateFile)
            let again = try LocalCertificateAuthority.openOrCreate(directory: directory + "/ca", permittedNames: ["fcm.googleapis.com"])
            #expect(FileManager.default.fileExists(atPath: again.certificateFile))
            try again.issueServerCertificate(names: ["fcm.googleapis.com"])
            let matched = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/openssl"), ["verify", "-CAfile", again.certificateFile, again.serverCertificateFile])
            #expect(matched.status == 0, "\(matched.output)\(matched.error)")
        }
    }

    @Test(
        "made by several at once (herald credentials ca beside a first herald serve): one CA key and certificate that match, and a server pair that verifies"
    )
    func authorityMadeConcurrently() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory + "/ca"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await onOwnThread {
                            let authority = try LocalCertificateAuthority.openOrCreate(
                                directory: path, permittedNames: ["fcm.googleapis.com"])
                            try authority.issueServerCertificate(names: ["fcm.googleapis.com"])
                        }
                    }
                }
                try await group.waitForAll()
            }
            let authority = try LocalCertificateAuthority.openOrCreate(directory: path)
            func publicKey(_ arguments: [String]) async throws -> String {
                try await runExecutable(URL(fileURLWithPath: "/usr/bin/openssl"), arguments).output
            }
            let caKey = try await publicKey(["pkey", "-in", authority.keyFile, "-pubout"])
            let caCertificateKey = try await publicKey(["x509", "-in", authority.certificateFile, "-noout", "-pubkey"])
            #expect(!caKey.isEmpty && caKey == caCertificateKey)
            let serverKey = try await publicKey(["pkey", "-in", authority.serverKeyFile, "-pubout"])
            let serverCertificateKey = try await publicKey(["x509", "-in", authority.serverCertificateFile, "-noout", "-pubkey"])
            #expect(!serverKey.isEmpty && serverKey == serverCertificateKey)
            let verified = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/openssl"), ["verify", "-CAfile", authority.certificateFile, authority.serverCertificateFile])
            #expect(verified.status == 0, "\(verified.output)\(verified.error)")
        }
    }

    @Test("a key issued while running is found at once by the token request that names it")
    func newKeyFoundAtOnce() async throws {
        // No periodic read during the test: only the token request can find the new key.
        try await withProxyHerald(refreshInterval: .seconds(3600)) { _, _, port, caFile, _, keys in
            let fresh = try RSAKeyPair.generate()
            keys.withLock {
                $0.append(ServiceAccountPublicKey(keyID: "key-2", clientEmail: Self.email, publicKeyPEM: fresh.publicKeyPEM))
            }
            let answer = try await token(port: port, caFile: caFile, try Self.assertion(fresh.privateKeyPEM, kid: "key-2"))
            #expect(answer.status == 200, "\(answer.body)")
        }
    }

    @Test("CONNECT to any other host or port is answered 403; plain HTTP inside a tunnel gets nothing; other requests are served")
    func connectRefused() async throws {
        try await withProxyHerald { _, _, port, caFile, _, _ in
            for url in ["https://example.com/", "https://fcm.googleapis.com:8443/", "https://127.0.0.1:\(port)/healthz"] {
                let answer = try await curl(port: port, caFile: caFile, url)
                #expect(answer.connectStatus == 403, "\(url): \(answer.body)")
                #expect(answer.exitStatus != 0)
            }
            // A tunnel to an allowed host used for plain HTTP: the TLS handshake fails, no answer comes.
            let plain = try await curl(
                port: port, caFile: caFile, "http://fcm.googleapis.com:443/healthz", extra: ["--proxytunnel", "--max-time", "10"])
            #expect(plain.connectStatus == 200)
            #expect(plain.status == 0)
            #expect(plain.exitStatus != 0)
            // Without CONNECT the listener is the receiver's own.
            let direct = try await onOwnThread {
                try runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), ["-sS", "http://127.0.0.1:\(port)/healthz"])
            }
            #expect(direct.output.contains("ready"))
        }
    }

    @Test("a malformed CONNECT line is answered 400, a CONNECT head over the limit 431, one that never ends is closed")
    func malformedConnect() async throws {
        try await withProxyHerald(requestTimeout: .seconds(1)) { _, _, port, _, _, _ in
            for (head, status) in [
                ("CONNECT fcm.googleapis.com:443\r\n\r\n", 400), ("CONNECT a b c HTTP/1.1\r\n\r\n", 400),
                ("CONNECT fcm.googleapis.com:443 SPDY/3\r\nHost: x\r\n\r\n", 400),
                ("CONNECT fcm.googleapis.com:443 HTTP/1.1\r\nX: " + String(repeating: "y", count: 20_000), 431),
                ("CONNECT iid.googleapis.com:80 HTTP/1.1\r\nHost: iid.googleapis.com:80\r\n\r\n", 403),
            ] {
                let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: port))
                client.send(head)
                let answer = responses(in: client.read { responses(in: $0).count >= 1 })
                #expect(answer.first?.status == status, "\(head.prefix(60))")
                #expect(answer.first?.body?["error"]?["code"]?.intValue == Int64(status))
                #expect(client.readsClosed())
            }
            // A head cut short is closed after the request timeout, unanswered.
            let slow = try TestSocketClient(.tcp(host: "127.0.0.1", port: port))
            slow.send("CONNECT fcm.googleapis.com:443 HTTP/1.1\r\nHost: fcm")
            #expect(slow.readsClosed())
        }
    }
}
