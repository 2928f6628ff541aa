import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTesting
import Testing

final class Collected: MessageHandler, Sendable {
    let messages = Locked<[RemoteMessage]>([])
    func didReceive(_ message: RemoteMessage) async throws { messages.withLock { $0.append(message) } }
}

/// One HTTP response read off a raw socket: status, headers (lower-cased), JSON body.
struct Response {
    var status: Int
    var headers: [String: String]
    var body: JSONValue?
}

/// Splits `data` into complete HTTP responses (Content-Length framed).
func responses(in data: [UInt8]) -> [Response] {
    var result: [Response] = []
    var rest = data[...]
    while let end = rest.firstRange(of: Array("\r\n\r\n".utf8)) {
        let head = String(decoding: rest[rest.startIndex..<end.lowerBound], as: UTF8.self).split(separator: "\r\n").map(String.init)
        guard let statusLine = head.first, let status = Int(statusLine.split(separator: " ")[1]) else { break }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2 { headers[parts[0].lowercased()] = parts[1] }
        }
        let length = Int(headers["content-length"] ?? "0") ?? 0
        let bodyStart = end.upperBound
        guard rest.distance(from: bodyStart, to: rest.endIndex) >= length else { break }
        let bodyEnd = rest.index(bodyStart, offsetBy: length)
        result.append(Response(status: status, headers: headers, body: try? JSONParser.parse(Array(rest[bodyStart..<bodyEnd]))))
        rest = rest[bodyEnd...]
    }
    return result
}

func request(_ method: String, _ path: String, body: String = "", headers: [String: String] = [:], chunked: Bool = false) -> String {
    var text = "\(method) \(path) HTTP/1.1\r\nHost: localhost\r\n"
    for (name, value) in headers { text += "\(name): \(value)\r\n" }
    if chunked {
        text += "Transfer-Encoding: chunked\r\n\r\n"
        let bytes = Array(body.utf8)
        let half = bytes.count / 2
        for chunk in [bytes[..<half], bytes[half...]] where !chunk.isEmpty {
            text += String(chunk.count, radix: 16) + "\r\n" + String(decoding: chunk, as: UTF8.self) + "\r\n"
        }
        text += "0\r\n\r\n"
    } else {
        text += "Content-Length: \(body.utf8.count)\r\n\r\n" + body
    }
    return text
}

func withHTTPHerald(
    options: HTTPReceiver.Options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0)),
    plugins: [any HeraldPlugin] = [],
    _ body: (Herald, Collected, SocketAddress) async throws -> Void
) async throws {
    var configuration = Herald.Configuration(senderID: "1234567890")
    configuration.projectID = "demo"
    let herald = Herald(configuration: patientShutdown(configuration))
    let receiver = HTTPReceiver(options: options)
    let collected = Collected()
    try herald.register(receiver)
    try herald.register(collected)
    for plugin in plugins { try herald.register(plugin) }
    try await herald.start()
    let address = try #require(try await receiver.listeningAddress())
    do {
        try await body(herald, collected, address)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
    #expect(herald.loop.statistics.liveHandles == 0)
}

@Suite("HTTPReceiver: the FCM v1 endpoint over real TCP", .serialized)
struct HTTPReceiverTests {
    @Test("send, keep-alive, pipelining and a chunked body, answered in order")
    func sendPipelined() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            let send: (String) -> String = { n in #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# }
            client.send(
                request("POST", "/v1/projects/demo/messages:send", body: send("1"))
                    + request("POST", "/v1/projects/demo/messages:send", body: send("2"), chunked: true)
                    + request("POST", "/v1/projects/demo/messages:send", body: #"{"message": {"token": "nobody", "data": {"n": "3"}}}"#)
                    + request("GET", "/healthz")
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 4 })
            #expect(answers.map(\.status) == [200, 200, 404, 200])
            #expect(answers[0].body?["name"]?.stringValue?.hasPrefix("projects/demo/messages/") == true)
            #expect(answers[2].body?["error"]?["status"] == "NOT_FOUND")
            #expect(answers[2].body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "UNREGISTERED")
            #expect(answers[3].body?["status"] == "ready")
            try await herald.waitUntilIdle()
            #expect(collected.messages.withLock { $0.compactMap { $0.data["n"] } } == ["1", "2"])
        }
    }

    @Test("a send's 200 answer, written in place, is byte for byte the answer written the general way (Connection: close)")
    func sendAnswerBytes() async throws {
        try await withHTTPHerald { herald, _, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            client.send(
                request("POST", sendPath, body: sendBody(token, "1"))
                    + request("POST", sendPath, body: sendBody(token, "2"), headers: ["Connection": "close"]))
            let text = String(decoding: client.read { responses(in: $0).count >= 2 }, as: UTF8.self)
            let answers = text.components(separatedBy: "HTTP/1.1 ").dropFirst().map { "HTTP/1.1 " + $0 }
            #expect(answers.count == 2)
            for (answer, close) in zip(answers, [false, true]) {
                let parts = answer.components(separatedBy: "\r\n\r\n")
                let body = parts.count == 2 ? parts[1] : ""
                #expect(body.hasPrefix(#"{"name":"projects/demo/messages/"#) && body.hasSuffix(#""}"#))
                let head =
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=UTF-8\r\nContent-Length: \(body.utf8.count)\r\n"
                    + (close ? "Connection: close\r\n" : "")
                #expect(parts.first.map { $0 + "\r\n" } == head, "answer \(answer)")
            }
        }
    }

    @Test("bad input gets clear errors: malformed JSON, wrong project, unknown route, wrong method, oversized body, bad HTTP")
    func badInput() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.maximumBodyBytes = 1024
        try await withHTTPHerald(options: options) { _, collected, address in
            let client = try TestSocketClient(address)
            client.send(
                request("POST", "/v1/projects/demo/messages:send", body: "{not json")
                    + request("POST", "/v1/projects/other/messages:send", body: "{}")
                    + request("POST", "/v2/nothing")
                    + request("GET", "/v1/projects/demo/messages:send")
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 4 })
            #expect(answers.map(\.status) == [400, 403, 404, 405])
            #expect(answers[0].body?["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(answers[1].body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "SENDER_ID_MISMATCH")

            let big = try TestSocketClient(address)
            big.send(request("POST", "/v1/projects/demo/messages:send", body: String(repeating: "x", count: 5000)))
            let tooLarge = responses(in: big.read { responses(in: $0).count >= 1 })
            #expect(tooLarge.first?.status == 413)
            #expect(big.readsEndOfFile())

            let garbage = try TestSocketClient(address)
            garbage.send("NOT AN HTTP REQUEST\r\n\r\n")
            #expect(responses(in: garbage.read { responses(in: $0).count >= 1 }).first?.status == 400)
            #expect(garbage.readsEndOfFile())
            #expect(collected.messages.withLock { $0.isEmpty })
        }
    }

    @Test("with a secret, every route but /healthz needs the bearer secret: missing, wrong and right secrets")
    func authentication() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: "s3cret")
        options.idleTimeout = .seconds(5)
        try await withHTTPHerald(options: options) { herald, collected, address in
            let token = try await herald.token()
            let body = { (n: String) in #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# }
            let refused: [[String: String]] = [
                [:],
                ["Authorization": ""],
                ["Authorization": "Bearer"],
                ["Authorization": "Bearer "],
                ["Authorization": "Bearer wrong"],
                ["Authorization": "Bearer s3cre"],  // a prefix of the secret
                ["Authorization": "Bearer s3cretX"],  // the secret and more
                ["Authorization": "Bearer S3CRET"],  // the secret is case-sensitive
                ["Authorization": "Bearer  s3cret"],
                ["Authorization": "s3cret"],
                ["Authorization": "Basic czNjcmV0"],
                ["X-Authorization": "Bearer s3cret"],
            ]
            let client = try TestSocketClient(address)
            client.send(
                refused.map { request("POST", "/v1/projects/demo/messages:send", body: body("refused"), headers: $0) }.joined()
                    + request("POST", "/v1/projects/demo/messages:send", body: body("right"), headers: ["Authorization": "Bearer s3cret"])
                    + request("POST", "/v1/projects/demo/messages:send", body: body("scheme"), headers: ["Authorization": "bearer s3cret"])
                    + request("GET", "/healthz")
            )
            let answers = responses(in: client.read { responses(in: $0).count >= refused.count + 3 })
            #expect(answers.map(\.status) == Array(repeating: 401, count: refused.count) + [200, 200, 200])
            for answer in answers.prefix(refused.count) {
                #expect(answer.body?["error"]?["status"] == "UNAUTHENTICATED")
                #expect(answer.headers["www-authenticate"] == "Bearer")
                #expect(answer.headers["connection"] == nil, "a refused request does not close the connection")
            }

            // The other routes need it too, and a refused request changes nothing.
            let wrong = ["Authorization": "Bearer wrong"]
            client.send(
                request("POST", "/v1/projects/demo/registrations/\(token)/topicSubscriptions?topic_name=weather", headers: wrong)
                    + request("DELETE", "/v1/projects/demo/registrations/\(token)/topicSubscriptions/weather")
                    + request("POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/weather", "registration_tokens": ["\#(token)"]}"#)
                    + request("POST", "/3/device/\(token)", body: #"{"n": "apns"}"#, headers: wrong)
                    + request("GET", "/nowhere")
            )
            #expect(responses(in: client.read { responses(in: $0).count >= 5 }).map(\.status) == [401, 401, 401, 401, 401])
            try await herald.waitUntilIdle()
            #expect(
                collected.messages.withLock { $0.compactMap { $0.data["n"] ?? $0.userInfo["n"]?.stringValue } }.sorted() == [
                    "right", "scheme",
                ])
            #expect(try await herald.subscribedTopics().isEmpty)
        }
    }

    @Test("without a secret only loopback addresses are allowed; an empty secret is refused")
    func loopbackOnlyWithoutSecret() async throws {
        for options in [
            HTTPReceiver.Options(address: .tcp(host: "0.0.0.0", port: 0)), .init(address: .tcp(host: "127.0.0.1", port: 0), secret: ""),
        ] {
            let herald = Herald()
            try herald.register(HTTPReceiver(options: options))
            await #expect(throws: HeraldError.self) { try await herald.start() }
            await herald.shutdown()
        }
    }

    @Test("a slow client that sends half a request is closed after the idle timeout")
    func slowClient() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.idleTimeout = .milliseconds(100)
        try await withHTTPHerald(options: options) { _, _, address in
            let client = try TestSocketClient(address)
            client.send("POST /v1/projects/demo/messages:send HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"mess")
            #expect(client.readsEndOfFile())
        }
    }

    @Test("APNs provider style: POST /3/device/{token} with apns-* headers; APNs reasons for errors")
    func apnsEndpoint() async throws {
        try await withHTTPHerald { herald, collected, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            let alert = #"{"aps": {"alert": {"title": "Build finished", "body": "All green"}}, "build": "8121"}"#
            client.send(
                request(
                    "POST", "/3/device/\(token)", body: #"{"build": "8121"}"#,
                    headers: ["apns-id": "123E4567-E89B-12D3-A456-426614174000", "apns-priority": "10"])
                    + request("POST", "/3/device/someone-else", body: alert)
                    + request("POST", "/3/device/\(token)", body: alert, headers: ["apns-priority": "10", "apns-push-type": "background"])
                    + request("POST", "/3/device/\(token)", body: "")
                    + request("POST", "/3/device/\(token)", body: alert, headers: ["apns-collapse-id": String(repeating: "c", count: 65)])
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 5 })
            #expect(answers.map(\.status) == [200, 400, 400, 400, 400])
            #expect(answers[0].headers["apns-id"] == "123e4567-e89b-12d3-a456-426614174000")
            #expect(
                answers.dropFirst().map { $0.body?["reason"]?.stringValue } == [
                    "BadDeviceToken", "BadPriority", "PayloadEmpty", "BadCollapseId",
                ])
            try await herald.waitUntilIdle()
            #expect(collected.messages.withLock { $0.map { $0.userInfo["build"] } } == ["8121"])
            #expect(collected.messages.withLock { $0.first?.messageID } == "123e4567-e89b-12d3-a456-426614174000")
        }
    }

    @Test("FCM topic management: subscribe, unsubscribe, allow_missing, wrong token, bad names")
    func topicManagement() async throws {
        try await withHTTPHerald { herald, _, address in
            let token = try await herald.token()
            let base = "/v1/projects/demo/registrations/\(token)/topicSubscriptions"
            let client = try TestSocketClient(address)
            client.send(
                request("POST", base + "?topic_name=weather")
                    + request("POST", "/v1/projects/demo/registrations/someone-else/topicSubscriptions?topic_name=weather")
                    + request("POST", base + "?topic_name=bad%20name")
                    + request("DELETE", base + "/news")
                    + request("DELETE", base + "/news?allow_missing=true")
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 5 })
            #expect(answers.map(\.status) == [200, 404, 400, 404, 200])
            #expect(answers[0].body?["name"]?.stringValue == "projects/demo/registrations/\(token)/topicSubscriptions/weather")
            #expect(answers[1].body?["error"]?["details"]?.arrayValue?.first?["errorCode"] == "UNREGISTERED")
            #expect(try await herald.subscribedTopics() == ["weather"])
            client.send(request("DELETE", base + "/weather"))
            #expect(responses(in: client.read { responses(in: $0).count >= 1 }).first?.status == 200)
            #expect(try await herald.subscribedTopics().isEmpty)
        }
    }

    @Test("Instance ID topic management: batchAdd / batchRemove answer per token, in order; bad requests get 400")
    func instanceIDTopicManagement() async throws {
        try await withHTTPHerald { herald, _, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            let batch: (String, [String]) -> String = { to, tokens in
                let list = tokens.map { "\"\($0)\"" }.joined(separator: ", ")
                return "{\"to\": \"\(to)\", \"registration_tokens\": [\(list)]}"
            }
            client.send(
                request("POST", "/iid/v1:batchAdd", body: batch("/topics/weather", [token, "someone-else", token]))
                    + request("POST", "/iid/v1:batchAdd", body: batch("news", ["someone-else"]))
                    + request("POST", "/iid/v1:batchRemove", body: batch("/topics/never", [token]))
                    + request("POST", "/iid/v1:batchAdd", body: batch("/topics/bad name", [token]))
                    + request("POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/weather", "registration_tokens": []}"#)
                    + request("POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/weather", "registration_tokens": [1]}"#)
                    + request("POST", "/iid/v1:batchAdd", body: #"{"registration_tokens": ["a"]}"#)
                    + request("POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/a", "registration_tokens": ["a"], "extra": 1}"#)
                    + request("POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/a", "#)
                    + request("GET", "/iid/v1:batchAdd")
            )
            let answers = responses(in: client.read { responses(in: $0).count >= 10 })
            #expect(answers.map(\.status) == [200, 200, 200, 400, 400, 400, 400, 400, 400, 405])
            #expect(answers[0].body == ["results": [[:], ["error": "NOT_FOUND"], [:]]])
            #expect(answers[1].body == ["results": [["error": "NOT_FOUND"]]])
            #expect(answers[2].body == ["results": [[:]]])
            #expect(answers[3...8].allSatisfy { $0.body?["error"] == "INVALID_ARGUMENT" && $0.body?["message"]?.stringValue != nil })
            #expect(try await herald.subscribedTopics() == ["weather"])
            client.send(request("POST", "/iid/v1:batchRemove", body: batch("weather", [token])))
            #expect(responses(in: client.read { responses(in: $0).count >= 1 }).first?.body == ["results": [[:]]])
            #expect(try await herald.subscribedTopics().isEmpty)
        }
    }

    @Test("connections past the limit are closed as they are accepted; the others are served")
    func connectionLimit() async throws {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0))
        options.maximumConnections = 2
        try await withHTTPHerald(options: options) { _, _, address in
            let first = try TestSocketClient(address)
            let second = try TestSocketClient(address)
            first.send(request("GET", "/healthz"))
            second.send(request("GET", "/healthz"))
            #expect(responses(in: first.read { responses(in: $0).count >= 1 }).first?.status == 200)
            #expect(responses(in: second.read { responses(in: $0).count >= 1 }).first?.status == 200)
            let third = try TestSocketClient(address)
            #expect(third.readsEndOfFile())
        }
    }

    @Test("Connection: close is honoured after the answer")
    func connectionClose() async throws {
        try await withHTTPHerald { _, _, address in
            let client = try TestSocketClient(address)
            client.send(request("GET", "/healthz", headers: ["Connection": "close"]))
            let answers = responses(in: client.read { responses(in: $0).count >= 1 })
            #expect(answers.first?.headers["connection"] == "close")
            #expect(client.readsEndOfFile())
        }
    }
}
