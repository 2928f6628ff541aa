import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTesting
import Testing

extension TestSocketClient {
    /// Sends raw bytes (which a `String` could not carry, such as invalid UTF-8); stops early if the peer closed.
    func send(bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            offset += written
        }
    }

    /// Sends `text` one byte at a time, `intervalMilliseconds` apart, until all is sent or the server answers or
    /// closes (the socket turns readable: the wait between bytes is a wait on that event). Returns the number of
    /// bytes sent.
    func trickle(_ text: String, intervalMilliseconds: Int32) -> Int {
        for (index, byte) in text.utf8.enumerated() {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, intervalMilliseconds) != 0 { return index }
            var value = byte
            if Glibc.send(fd, &value, 1, Int32(MSG_NOSIGNAL)) != 1 { return index }
        }
        return text.utf8.count
    }

    /// Makes closing this socket send a reset (RST) instead of an orderly end (FIN).
    func resetOnClose() {
        var option = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
    }
}

/// The FCM v1 send path of the test instance (project `demo`).
let sendPath = "/v1/projects/demo/messages:send"

/// A send body for `token` whose data carries `n`, so that tests can tell which messages were delivered.
func sendBody(_ token: String, _ n: String) -> String {
    fcmBody(token: token, data: ["n": n])
}

/// The `n` data values handlers received, sorted.
func delivered(_ collected: Collected) -> [String] {
    collected.messages.withLock { $0.compactMap { $0.data["n"] } }.sorted()
}

/// A second connection's request and answer: 200 for a good send. The proof that other connections are
/// unaffected by what a bad client does.
func expectServed(_ address: SocketAddress, _ token: String, _ n: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let other = try TestSocketClient(address)
    other.send(request("POST", sendPath, body: sendBody(token, n)))
    let answer = responses(in: other.read { responses(in: $0).count >= 1 }).first
    #expect(answer?.status == 200, "another connection is served", sourceLocation: sourceLocation)
}

@Suite("HTTPReceiver: bad input over real TCP — each gets its answer, the daemon and other connections go on", .serialized)
struct HTTPBadInputTests {
    @Test("malformed, truncated and wrongly typed JSON: 400 INVALID_ARGUMENT each, naming the problem, on a kept-alive connection")
    func malformedTruncatedWrongTypes() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let bad: [(body: String, mentions: String)] = [
                (#"{"message": {"token": "\#(token)", "data": {"n": "x"}}"#, "JSON"),  // truncated: the last brace
                (#"{"message": {"token": "\#(token)""#, "JSON"),  // truncated mid-object
                (#"{"message": {"token": "\#(token)", "data": {"n": "x"}}} trailing"#, "JSON"),
                (#"{"message": {"token": "\#(token)", "data": {"n": "x",}}}"#, "JSON"),  // trailing comma
                (#"{'message': {}}"#, "JSON"),
                (#"{"message": {"token": 5}}"#, "message.token"),
                (#"{"message": "hello"}"#, "message"),
                (#"{"message": {"token": "\#(token)", "data": {"n": 1}}}"#, "data"),
                (#"{"message": {"token": "\#(token)", "data": ["n"]}}"#, "data"),
                (#"{"message": {"token": "\#(token)", "notification": {"title": ["x"]}}}"#, "title"),
                (#"{"message": {"token": "\#(token)"}, "validate_only": "yes"}"#, "validate_only"),
                (#"{"message": {"token": "\#(token)", "colour": "red"}}"#, "colour"),
                (#"{"message": {"token": "\#(token)", "data": {"n": "1"}, "data": {"n": "2"}}}"#, "data"),  // duplicate key
                (#"[{"message": {"token": "\#(token)"}}]"#, "object"),
                ("null", "object"),
                ("", "empty"),
            ]
            let client = try TestSocketClient(address)
            client.send(
                bad.map { request("POST", sendPath, body: $0.body) }.joined() + request("POST", sendPath, body: sendBody(token, "good")))
            let answers = responses(in: client.read { responses(in: $0).count >= bad.count + 1 })
            #expect(answers.map(\.status) == Array(repeating: 400, count: bad.count) + [200])
            for (answer, input) in zip(answers, bad) {
                #expect(answer.body?["error"]?["status"] == "INVALID_ARGUMENT", "\(input.body)")
                #expect(answer.body?["error"]?["code"] == 400)
                #expect(answer.body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "INVALID_ARGUMENT")
                let message = answer.body?["error"]?["message"]?.stringValue ?? ""
                #expect(message.localizedCaseInsensitiveContains(input.mentions), "\(input.body) → \(message)")
                #expect(answer.headers["connection"] == nil, "a bad body does not close the connection")
            }
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["good"])
        }
    }

    @Test("invalid UTF-8 in a JSON string or key: 400 INVALID_ARGUMENT (MalformedPayload on the APNs route); valid UTF-8 arrives intact")
    func invalidUTF8() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            func post(_ path: String, _ parts: [[UInt8]]) -> [UInt8] {
                let body = parts.flatMap { $0 }
                return Array("POST \(path) HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body
            }
            let head = Array(#"{"message": {"token": "\#(token)", "data": {"n": ""#.utf8)
            let tail = Array(#""}}}"#.utf8)
            let invalid: [[UInt8]] = [
                [0xFF],  // never valid
                [0xC0, 0xAF],  // overlong "/"
                [0xED, 0xA0, 0x80],  // a UTF-16 surrogate encoded as UTF-8
                [0xE2, 0x82],  // a truncated sequence before the closing quote
                [0x80],  // a lone continuation byte
                [0xF4, 0x90, 0x80, 0x80],  // past U+10FFFF
            ]
            var bytes: [UInt8] = []
            for sequence in invalid { bytes += post(sendPath, [head, Array("bad".utf8), sequence, tail]) }
            // In a key instead of a value.
            bytes += post(sendPath, [Array(#"{"message": {"token": "\#(token)", "data": {"k"#.utf8), [0xFF], Array(#"": "v"}}}"#.utf8)])
            // The APNs route, the same bytes in a custom key's value.
            bytes += post("/3/device/\(token)", [Array(#"{"aps": {"alert": "hi"}, "x": ""#.utf8), [0xFF], Array(#""}"#.utf8)])
            // Valid multi-byte UTF-8 goes through as written.
            bytes += post(sendPath, [head, Array("ok-é-€-😀".utf8), tail])
            let client = try TestSocketClient(address)
            client.send(bytes: bytes)
            let count = invalid.count + 3
            let answers = responses(in: client.read { responses(in: $0).count >= count })
            #expect(answers.map(\.status) == Array(repeating: 400, count: invalid.count + 2) + [200])
            for answer in answers.prefix(invalid.count + 1) {
                #expect(answer.body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "INVALID_ARGUMENT")
            }
            #expect(answers.dropFirst(invalid.count + 1).first?.body?["reason"] == "MalformedPayload")
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["ok-é-€-😀"])
        }
    }

    @Test("a 10 MB body gets 413 and a close, announced by Content-Length or sent chunked; the daemon and other connections go on")
    func tenMegabyteBody() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let tenMegabytes = 10 * 1024 * 1024
            let bystander = try TestSocketClient(address)
            bystander.send(request("POST", sendPath, body: sendBody(token, "before")))
            #expect(responses(in: bystander.read { responses(in: $0).count >= 1 }).first?.status == 200)

            // Content-Length says 10 MB and the client sends it all before reading.
            let whole = try TestSocketClient(address)
            whole.send(
                bytes: Array("POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(tenMegabytes)\r\n\r\n".utf8)
                    + [UInt8](repeating: UInt8(ascii: "x"), count: tenMegabytes))
            let wholeAnswer = responses(in: whole.read { responses(in: $0).count >= 1 }).first
            #expect(wholeAnswer?.status == 413)
            #expect(wholeAnswer?.headers["connection"] == "close")
            #expect(wholeAnswer?.body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "INVALID_ARGUMENT")
            #expect(wholeAnswer?.body?["error"]?["message"]?.stringValue?.contains("65536") == true)
            #expect(whole.readsEndOfFile())

            // Content-Length says 10 MB and nothing follows: the answer comes from the head alone.
            let announced = try TestSocketClient(address)
            announced.send("POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(tenMegabytes)\r\n\r\n")
            #expect(responses(in: announced.read { responses(in: $0).count >= 1 }).first?.status == 413)
            #expect(announced.readsEndOfFile())

            // Chunked, 1 MB chunks: refused as soon as the limit is passed.
            let chunked = try TestSocketClient(address)
            let chunk = String(1024 * 1024, radix: 16) + "\r\n" + String(repeating: "x", count: 1024 * 1024) + "\r\n"
            chunked.send(
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n" + String(repeating: chunk, count: 10)
                    + "0\r\n\r\n")
            #expect(responses(in: chunked.read { responses(in: $0).count >= 1 }).first?.status == 413)
            #expect(chunked.readsEndOfFile())

            bystander.send(request("POST", sendPath, body: sendBody(token, "after")) + request("GET", "/healthz"))
            #expect(responses(in: bystander.read { responses(in: $0).count >= 2 }).map(\.status) == [200, 200])
            try expectServed(address, token, "new")
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["after", "before", "new"])
        }
    }

    @Test("after a 413 the connection lingers while the client goes on sending, so it reads the answer, not a reset")
    func lingeringAfterRefusal() async throws {
        try await withHTTPHerald { _, _, address in
            let client = try TestSocketClient(address)
            client.send("POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(10 * 1024 * 1024)\r\n\r\n")
            // A slow uploader: 64 KiB every 300 ms for longer than the 2 s of silence that ends lingering. Were the
            // connection closed with its bytes unread, the kernel would reset it and these sends would fail.
            let chunk = [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024)
            for _ in 0..<10 {
                let written = chunk.withUnsafeBytes { Glibc.send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                #expect(written > 0, "the server still reads what the client sends (errno \(errno))")
                // Between chunks (the client's pace, 300 ms), wait for the outcome this test rules out: the server
                // resetting the connection (POLLERR / POLLHUP, reported whatever is asked). The 413 waiting to be
                // read and the server's FIN after it (it shuts its side after answering) are not that event.
                var descriptor = pollfd(fd: client.fd, events: 0, revents: 0)
                let ended = poll(&descriptor, 1, 300)
                #expect(ended == 0, "the server reset the connection while the client was still sending (revents \(descriptor.revents))")
                if ended != 0 { break }
            }
            client.halfClose()
            let answers = responses(in: client.read { _ in false })
            #expect(answers.map(\.status) == [413])
        }
    }

    @Test("header floods get 431 and a close: many headers, one huge header, a huge URL, a head that never ends")
    func headerFloods() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let body = sendBody(token, "flood")
            let manyHeaders = (0..<3000).map { "X-Flood-\($0): \(String(repeating: "v", count: 40))\r\n" }.joined()
            let floods = [
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\n\(manyHeaders)Content-Length: \(body.utf8.count)\r\n\r\n\(body)",
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nX-Big: \(String(repeating: "v", count: 200_000))\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)",
                "POST \(sendPath)?\(String(repeating: "q", count: 200_000)) HTTP/1.1\r\nHost: localhost\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)",
                // Just over the 16 KiB limit, and the head never ends: answered without waiting for the rest.
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nX-Big: \(String(repeating: "v", count: 17 * 1024))",
            ]
            for flood in floods {
                let client = try TestSocketClient(address)
                client.send(flood)
                let answer = responses(in: client.read { responses(in: $0).count >= 1 }).first
                #expect(answer?.status == 431, "\(flood.prefix(60))")
                #expect(answer?.headers["connection"] == "close")
                #expect(answer?.body?["error"]?["status"] == "INVALID_ARGUMENT")
                #expect(client.readsEndOfFile())
                try expectServed(address, token, "served")
            }
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == Array(repeating: "served", count: floods.count))
        }
    }

    @Test("a client sending one byte at a time is answered 408 and closed by the request timeout; others are served meanwhile")
    func oneByteAtATime() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.idleTimeout = .seconds(5)  // every byte comes well within it
        options.requestTimeout = .milliseconds(300)
        try await withHTTPHerald(options: options) { herald, collected, address in
            let token = try await herald.token()
            let whole = request("POST", sendPath, body: sendBody(token, "slow"))
            // Trickled from the first byte, and with the head sent at once and only the body trickled; another
            // connection is served while the slow one has a request open.
            let head = whole.components(separatedBy: "\r\n\r\n")[0] + "\r\n\r\n"
            for (prefix, trickled) in [(String(whole.prefix(1)), String(whole.dropFirst())), (head, String(whole.dropFirst(head.count)))] {
                let slow = try TestSocketClient(address)
                slow.send(prefix)
                try expectServed(address, token, "meanwhile")
                let sent = slow.trickle(trickled, intervalMilliseconds: 25)
                #expect(sent < trickled.utf8.count, "the server stops the client before it finishes")
                let answer = responses(in: slow.read { responses(in: $0).count >= 1 }).first
                #expect(answer?.status == 408)
                #expect(answer?.headers["connection"] == "close")
                #expect(answer?.body?["error"]?["status"] == "DEADLINE_EXCEEDED")
                #expect(slow.readsEndOfFile())
            }
            try expectServed(address, token, "after")
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["after", "meanwhile", "meanwhile"])
        }
    }

    @Test("a client that disconnects mid-body (FIN or RST): nothing delivered, the daemon and other connections go on")
    func disconnectMidBody() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let bystander = try TestSocketClient(address)
            let partial =
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nContent-Length: 200\r\n\r\n"
                + String(sendBody(token, "partial").prefix(40))

            let ending = try TestSocketClient(address)
            ending.send(partial)
            ending.halfClose()
            #expect(ending.readsEndOfFile(), "the server closes a connection whose client ended mid-request")

            do {
                let resetting = try TestSocketClient(address)
                resetting.send(partial)
                resetting.resetOnClose()
            }

            // A complete request whose client is gone before the answer: the answer has nowhere to go.
            do {
                let impatient = try TestSocketClient(address)
                impatient.send(request("POST", sendPath, body: sendBody(token, "impatient")))
                impatient.resetOnClose()
            }

            bystander.send(request("POST", sendPath, body: sendBody(token, "bystander")) + request("GET", "/healthz"))
            #expect(responses(in: bystander.read { responses(in: $0).count >= 2 }).map(\.status) == [200, 200])
            try expectServed(address, token, "new")
            try await herald.waitUntilIdle()
            #expect(delivered(collected).filter { $0 != "impatient" } == ["bystander", "new"])
        }
    }

    @Test("pipelined requests with bad ones in the middle: each answered in order with its own answer; the good ones delivered")
    func pipelinedWithBadInTheMiddle() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            client.send(
                request("POST", sendPath, body: sendBody(token, "1"))
                    + request("POST", sendPath, body: #"{"message": {"token": "#)
                    + request("POST", sendPath, body: sendBody(token, "2"), chunked: true)
                    + request("POST", "/v1/projects/other/messages:send", body: sendBody(token, "x"))
                    + request("POST", sendPath, body: sendBody(token, "3"))
                    + request("POST", sendPath, body: sendBody("someone-else", "x"))
                    + request("PUT", "/nowhere")
                    + request("POST", sendPath, body: #"{"message": {"token": "\#(token)", "data": {"n": 3}}}"#)
                    + request("POST", sendPath, body: #"{"message": {"token": "\#(token)", "data": {"n": "v"}}, "validate_only": true}"#)
                    + request("POST", sendPath, body: sendBody(token, "4"))
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 10 })
            #expect(answers.map(\.status) == [200, 400, 200, 403, 200, 404, 404, 400, 200, 200])
            #expect(
                answers.map { $0.body?["error"]?["details"]?.arrayValue?.first?["errorCode"]?.stringValue } == [
                    nil, "INVALID_ARGUMENT", nil, "SENDER_ID_MISMATCH", nil, "UNREGISTERED", nil, "INVALID_ARGUMENT", nil, nil,
                ])
            let names = answers.compactMap { $0.body?["name"]?.stringValue }
            #expect(names.count == 5 && Set(names).count == 5, "each success has its own message name")

            // Malformed HTTP in the middle: the requests before it are answered and delivered, then 400 and a
            // close; nothing after it is read.
            let broken = try TestSocketClient(address)
            broken.send(
                request("POST", sendPath, body: sendBody(token, "5"))
                    + request("POST", sendPath, body: sendBody(token, "6"))
                    + "BROKEN\r\n\r\n"
                    + request("POST", sendPath, body: sendBody(token, "never"))
            )
            let brokenAnswers = responses(in: broken.read { responses(in: $0).count >= 3 })
            #expect(brokenAnswers.map(\.status) == [200, 200, 400])
            #expect(brokenAnswers.last?.headers["connection"] == "close")
            #expect(broken.readsEndOfFile())
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["1", "2", "3", "4", "5", "6"])
        }
    }

    @Test(
        "after a request that ends the connection (Connection: close, HTTP/1.0, the request limit), pipelined requests are neither answered nor delivered"
    )
    func nothingAfterTheLastRequest() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.maximumRequestsPerConnection = 2
        try await withHTTPHerald(options: options) { herald, collected, address in
            let token = try await herald.token()
            let closing = try TestSocketClient(address)
            closing.send(
                request("POST", sendPath, body: sendBody(token, "close"), headers: ["Connection": "close"])
                    + request("POST", sendPath, body: sendBody(token, "after-close"))
            )
            #expect(responses(in: closing.read { _ in false }).map(\.status) == [200])

            let old = try TestSocketClient(address)
            let body = sendBody(token, "http10")
            old.send(
                "POST \(sendPath) HTTP/1.0\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
                    + request("POST", sendPath, body: sendBody(token, "after-http10")))
            #expect(responses(in: old.read { _ in false }).map(\.status) == [200])

            let limited = try TestSocketClient(address)
            limited.send((1...3).map { request("POST", sendPath, body: sendBody(token, "limit-\($0)")) }.joined())
            let answers = responses(in: limited.read { _ in false })
            #expect(answers.map(\.status) == [200, 200])
            #expect(answers.last?.headers["connection"] == "close")

            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["close", "http10", "limit-1", "limit-2"])
        }
    }
}

@Suite("HTTPReceiver: header parsing", .serialized)
struct HTTPHeaderParsingTests {
    @Test("a header with an empty value does not swallow the name of the header after it")
    func emptyHeaderValue() async throws {
        let options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
        try await withHTTPHerald(options: options) { herald, collected, address in
            let token = try await herald.token()
            let body = sendBody(token, "empty-value")
            let client = try TestSocketClient(address)
            client.send(
                "POST \(sendPath) HTTP/1.1\r\nHost: localhost\r\nX-Empty:\r\nAuthorization: Bearer s3cret\r\nX-Also-Empty: \r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
            )
            #expect(responses(in: client.read { responses(in: $0).count >= 1 }).first?.status == 200)
            try await herald.waitUntilIdle()
            #expect(delivered(collected) == ["empty-value"])
        }
    }
}
