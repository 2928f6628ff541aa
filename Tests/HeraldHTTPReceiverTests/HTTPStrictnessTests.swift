import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTesting
import Testing

/// A send request to the test instance with `head` as its header lines (each ending in CRLF, `Host` not added)
/// and a good body for `token`: what is refused must be the head, not the body.
func sendWithHead(_ head: String, token: String, n: String = "strict", version: String = "HTTP/1.1") -> String {
    "POST \(sendPath) \(version)\r\n\(head)\r\n" + sendBody(token, n)
}

/// Sends `text` to a new connection and reads the one answer and the end of the connection.
func answerAndEnd(_ address: SocketAddress, _ text: String, byteByByte: Bool = false) throws -> (answer: Response?, ended: Bool) {
    let client = try TestSocketClient(address)
    if byteByByte {
        _ = client.trickle(text, intervalMilliseconds: 1)
    } else {
        client.send(text)
    }
    let answer = responses(in: client.read { responses(in: $0).count >= 1 }).first
    return (answer, client.readsClosed())
}

@Suite("HTTPReceiver: what RFC 9112 says a server must refuse, refused with 400 and a close", .serialized)
struct HTTPStrictnessTests {
    /// Each head is refused with 400 INVALID_ARGUMENT whose message mentions `mentions`, sent whole and byte by
    /// byte (so the check does not depend on where reads split the head); nothing is delivered and other
    /// connections are served.
    private func expectRefused(
        _ cases: [(head: String, mentions: String)], version: String = "HTTP/1.1", sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            for input in cases {
                let length = sendBody(token, "strict").utf8.count
                let text = sendWithHead(input.head.replacingOccurrences(of: "{length}", with: "\(length)"), token: token, version: version)
                for byteByByte in [false, true] {
                    let (answer, ended) = try answerAndEnd(address, text, byteByByte: byteByByte)
                    let message = answer?.body?["error"]?["message"]?.stringValue ?? ""
                    #expect(answer?.status == 400, "\(input.head.debugDescription)", sourceLocation: sourceLocation)
                    #expect(answer?.body?["error"]?["status"] == "INVALID_ARGUMENT", sourceLocation: sourceLocation)
                    #expect(
                        message.localizedCaseInsensitiveContains(input.mentions), "\(input.head.debugDescription) → \(message)",
                        sourceLocation: sourceLocation)
                    #expect(answer?.headers["connection"] == "close", sourceLocation: sourceLocation)
                    #expect(ended, "the connection closes after the 400", sourceLocation: sourceLocation)
                }
            }
            try expectServed(address, token, "served")
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["served"], sourceLocation: sourceLocation)
        }
    }

    @Test("whitespace between a header field name and its colon (RFC 9112 §5.1)")
    func whitespaceBeforeColon() async throws {
        try await expectRefused([
            ("Host: localhost\r\nContent-Length : {length}\r\n", "colon"),
            ("Host: localhost\r\nX-Custom : value\r\nContent-Length: {length}\r\n", "colon"),
            ("Host : localhost\r\nContent-Length: {length}\r\n", "colon"),
            ("Host: localhost\r\nX-Custom\t: value\r\nContent-Length: {length}\r\n", "HPE_INVALID_HEADER_TOKEN"),
        ])
    }

    @Test("obs-fold line folding, and whitespace before the first header line (RFC 9112 §5.2, §2.2)")
    func lineFolding() async throws {
        try await expectRefused([
            ("Host: localhost\r\nX-Custom: one\r\n two\r\nContent-Length: {length}\r\n", "fold"),
            ("Host: localhost\r\nX-Custom: one\r\n\ttwo\r\nContent-Length: {length}\r\n", "fold"),
            ("Host: localhost\r\nX-Custom:\r\n two\r\nContent-Length: {length}\r\n", "fold"),
            ("Host: localhost\r\nX-Custom: one\r\n   \r\nContent-Length: {length}\r\n", "fold"),
            ("Host: localhost\nX-Custom: one\n two\nContent-Length: {length}\n", "fold"),
            (" Host: localhost\r\nContent-Length: {length}\r\n", "fold"),
        ])
    }

    @Test("Transfer-Encoding with Content-Length, and a Transfer-Encoding that does not end in chunked (RFC 9112 §6.1, §6.3)")
    func transferEncodingAndContentLength() async throws {
        try await expectRefused([
            ("Host: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: {length}\r\n", "HPE_UNEXPECTED_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: {length}\r\nTransfer-Encoding: chunked\r\n", "HPE_UNEXPECTED_CONTENT_LENGTH"),
            ("Host: localhost\r\nTransfer-Encoding: gzip\r\n", "HPE_INVALID_TRANSFER_ENCODING"),
        ])
    }

    @Test("a Host header missing from an HTTP/1.1 request, repeated, or not a host (RFC 9112 §3.2)")
    func host() async throws {
        try await expectRefused([
            ("Content-Length: {length}\r\n", "Host"),
            ("Host: localhost\r\nHost: localhost\r\nContent-Length: {length}\r\n", "Host"),
            ("Host: localhost\r\nContent-Length: {length}\r\nhost: other\r\n", "Host"),
            ("Host: local host\r\nContent-Length: {length}\r\n", "Host"),
            ("Host: localhost/path\r\nContent-Length: {length}\r\n", "Host"),
        ])
        try await expectRefused([("Host: a\r\nHost: b\r\nContent-Length: {length}\r\n", "Host")], version: "HTTP/1.0")
    }

    @Test("a bare CR in the request line or a header line (RFC 9112 §2.2)")
    func bareCR() async throws {
        try await expectRefused([
            ("Host: localhost\r\nX-Custom: one\rtwo\r\nContent-Length: {length}\r\n", "HPE_LF_EXPECTED"),
            ("Host: localhost\rX-Custom: one\r\nContent-Length: {length}\r\n", "HPE_LF_EXPECTED"),
        ])
        try await withHTTPHerald { _, _, address in
            let (answer, ended) = try answerAndEnd(address, "POST \(sendPath) HTTP/1.1\rHost: localhost\r\nContent-Length: 0\r\n\r\n")
            #expect(answer?.status == 400)
            #expect(ended)
        }
    }

    @Test("an invalid Content-Length: repeated (even with the same value), a list, not digits, empty, too big (RFC 9112 §6.3)")
    func invalidContentLength() async throws {
        try await expectRefused([
            ("Host: localhost\r\nContent-Length: {length}\r\nContent-Length: 1{length}\r\n", "HPE_UNEXPECTED_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: {length}\r\nContent-Length: {length}\r\n", "HPE_UNEXPECTED_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: {length}, {length}\r\n", "HPE_INVALID_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: {length}x\r\n", "HPE_INVALID_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: +{length}\r\n", "HPE_INVALID_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: -1\r\n", "HPE_INVALID_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: \r\n", "HPE_INVALID_CONTENT_LENGTH"),
            ("Host: localhost\r\nContent-Length: 99999999999999999999999\r\n", "HPE_INVALID_CONTENT_LENGTH"),
        ])
    }

    @Test(
        "a chunked body's framing: a bare CR in a chunk-size line or the last chunk, a chunk's data not followed by CRLF (RFC 9112 §2.2, §7.1)"
    )
    func chunkedFraming() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let body = sendBody(token, "chunked")
            let size = String(body.utf8.count, radix: 16)
            let head = "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
            let bad = [
                "\(size)\rX\(body)\r\n0\r\n\r\n",  // a bare CR ends the chunk-size line
                "\(size)\r\n\(body)XX0\r\n\r\n",  // the chunk's data not followed by CRLF
                "\(size)\r\n\(body)\rX0\r\n\r\n",
                "\(size)\r\n\(body)\r\n0\rX\r\n",  // a bare CR ends the last chunk
                "\(size);ext=1\rX\(body)\r\n0\r\n\r\n",
            ]
            for framing in bad {
                for byteByByte in [false, true] {
                    let (answer, ended) = try answerAndEnd(address, head + framing, byteByByte: byteByByte)
                    #expect(answer?.status == 400, "\(framing.debugDescription)")
                    #expect(answer?.body?["error"]?["status"] == "INVALID_ARGUMENT")
                    #expect(ended)
                }
            }
            // Well-formed chunking, whole and byte by byte, with an extension and a trailer: delivered.
            let half = body.utf8.count / 2
            let good =
                String(half, radix: 16) + ";ext=1\r\n" + String(body.prefix(half)) + "\r\n" + String(body.utf8.count - half, radix: 16)
                + "\r\n"
                + String(body.dropFirst(half)) + "\r\n0\r\nX-Trailer: t\r\n\r\n"
            for byteByByte in [false, true] {
                let client = try TestSocketClient(address)
                if byteByByte { _ = client.trickle(head + good, intervalMilliseconds: 1) } else { client.send(head + good) }
                #expect(responses(in: client.read { responses(in: $0).count >= 1 }).first?.status == 200)
            }
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["chunked", "chunked"])
        }
    }

    @Test("what RFC 9112 allows still goes through: HTTP/1.0 without Host, Host with a port or an IPv6 literal, OWS around values")
    func allowed() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let heads = [
                ("Content-Length: {length}\r\n", "HTTP/1.0", "http10"),
                ("Host: localhost:8080\r\nContent-Length: {length}\r\n", "HTTP/1.1", "port"),
                ("Host: [::1]:8080\r\nContent-Length: {length}\r\n", "HTTP/1.1", "ipv6"),
                ("Host:\r\nContent-Length: {length}\r\n", "HTTP/1.1", "empty-host"),
                ("Host:  localhost \r\nX-Custom:\tone two\t\r\nContent-Length: {length} \r\n", "HTTP/1.1", "ows"),
            ]
            for (head, version, n) in heads {
                let length = sendBody(token, n).utf8.count
                let client = try TestSocketClient(address)
                client.send(
                    sendWithHead(head.replacingOccurrences(of: "{length}", with: "\(length)"), token: token, n: n, version: version))
                #expect(responses(in: client.read { responses(in: $0).count >= 1 }).first?.status == 200, "\(head.debugDescription)")
            }
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["empty-host", "http10", "ipv6", "ows", "port"])
        }
    }
}

@Suite("HTTPReceiver: Expect: 100-continue", .serialized)
struct HTTPExpectContinueTests {
    @Test("100 Continue before the body is read; then the body and the final answer, on a kept-alive connection")
    func continueThenBody() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            for n in ["1", "2"] {
                let body = sendBody(token, n)
                client.send(
                    "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n")
                let interim = responses(in: client.read { responses(in: $0).count >= 1 })
                #expect(interim.map(\.status) == [100], "100 Continue comes before any body byte is sent")
                client.send(body)
                let final = responses(in: client.read { responses(in: $0).count >= 1 })
                #expect(final.map(\.status) == [200])
                #expect(final.first?.headers["connection"] == nil)
            }
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["1", "2"])
        }
    }

    @Test(
        "a request refused anyway is answered at once instead of 100 Continue: unauthorized, no route, a body too large; then the connection closes"
    )
    func refusedAtOnce() async throws {
        let options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
        try await withHTTPHerald(options: options) { herald, collected, address in
            let token = try await herald.token()
            let length = sendBody(token, "x").utf8.count
            let refused: [(head: String, status: Int)] = [
                ("POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: \(length)\r\n\r\n", 401),
                (
                    "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\nExpect: 100-continue\r\nContent-Length: \(length)\r\n\r\n",
                    401
                ),
                (
                    "POST /v1/nowhere HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\nExpect: 100-continue\r\nContent-Length: \(length)\r\n\r\n",
                    404
                ),
                (
                    "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\nExpect: 100-continue\r\nContent-Length: \(1 << 20)\r\n\r\n",
                    413
                ),
            ]
            for input in refused {
                let client = try TestSocketClient(address)
                client.send(input.head)
                let answers = responses(in: client.read { responses(in: $0).count >= 1 })
                #expect(answers.map(\.status) == [input.status], "\(input.head.prefix(40))")
                #expect(answers.first?.headers["connection"] == "close")
                #expect(client.readsClosed())
            }
            // Authorized, to a route: 100 Continue.
            let client = try TestSocketClient(address)
            client.send(
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret\r\nExpect: 100-continue\r\nContent-Length: \(length)\r\n\r\n"
            )
            #expect(responses(in: client.read { responses(in: $0).count >= 1 }).map(\.status) == [100])
            client.send(sendBody(token, "x"))
            #expect(responses(in: client.read { responses(in: $0).count >= 1 }).map(\.status) == [200])
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["x"])
        }
    }

    @Test("an expectation other than 100-continue: 417 and a close; in an HTTP/1.0 request Expect is ignored")
    func otherExpectations() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let body = sendBody(token, "x")
            let client = try TestSocketClient(address)
            client.send("POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nExpect: 200-ok\r\nContent-Length: \(body.utf8.count)\r\n\r\n")
            let answers = responses(in: client.read { responses(in: $0).count >= 1 })
            #expect(answers.map(\.status) == [417])
            #expect(answers.first?.body?["error"]?["message"]?.stringValue?.contains("200-ok") == true)
            #expect(client.readsClosed())

            let old = try TestSocketClient(address)
            old.send("POST \(sendPath) HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            #expect(responses(in: old.read { _ in false }).map(\.status) == [200])
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["x"])
        }
    }

    @Test("curl with Expect: 100-continue and a 2 KiB body: 100 Continue seen, 200; refused at once when unauthorized")
    func curl() async throws {
        let options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
        try await withHTTPHerald(options: options) { herald, collected, address in
            guard case .tcp(_, let port) = address else { throw POSIXError(.EINVAL) }
            let token = try await herald.token()
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("herald-expect-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: file) }
            try Data(sendBody(token, String(repeating: "e", count: 2048)).utf8).write(to: file)
            let curl = URL(fileURLWithPath: "/usr/bin/curl")
            func run(secret: String) async throws -> (status: Int32, output: String) {
                try await runChild(
                    curl,
                    [
                        "-sS", "-v", "-o", "/dev/null", "-w", "code=%{http_code}\n", "-H", "Expect: 100-continue", "-H",
                        "Authorization: Bearer \(secret)", "-H", "Content-Type: application/json", "--data-binary", "@\(file.path)",
                        "http://127.0.0.1:\(port)\(sendPath)",
                    ], limit: .seconds(30))
            }
            let accepted = try await run(secret: "s3cret")
            #expect(accepted.status == 0, "\(accepted.output)")
            #expect(accepted.output.contains("code=200"), "\(accepted.output)")
            #expect(accepted.output.contains("HTTP/1.1 100 Continue"), "\(accepted.output)")
            #expect(!accepted.output.contains("Done waiting for 100-continue"), "curl did not wait out its timeout")

            let refused = try await run(secret: "wrong")
            #expect(refused.output.contains("code=401"), "\(refused.output)")
            #expect(!refused.output.contains("HTTP/1.1 100 Continue"), "\(refused.output)")
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == [String(repeating: "e", count: 2048)])
        }
    }
}
