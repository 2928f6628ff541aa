import Foundation
import Herald
import HeraldNATSReceiver
import HeraldTesting
import Testing

/// Topic management through `herald serve --gateway`: each token's change made by the instance that holds it, over a
/// core NATS request; real nats-server, real gateway, real curl.
@Suite("Gateway mode: topic management passed on to the instance that holds each token", .serialized)
struct GatewayTopicsTests {
    @Test(
        "batchAdd and batchRemove through the gateway: per-token results for two instances and an unknown token, each instance's topics changed, a topic send reaches the subscribed only; FCM v1's topicSubscriptions; GET /iid/info; a stopped instance's token gets an error and the gateway keeps running; a sender without manage-topics is refused"
    )
    func batchThroughGateway() async throws {
        let server = try NATSServerProcess()
        let a = try FleetInstance(server: server)
        let b = try FleetInstance(server: server)
        let c = try FleetInstance(server: server)
        try await withFleet([a, b, c]) {
            try await withTemporaryDirectory(prefix: "herald-gateway-topics") { directory in
                let fleet = ["--nats", server.url, "--project-id", "demo"]
                let added = try await runBuiltExecutable(
                    "herald", ["senders", "add", "sends-only", "--scopes", "send,send-topics"] + fleet)
                #expect(added.status == 0, "\(added.error)")
                let sendsOnly = added.output.trimmingCharacters(in: .whitespacesAndNewlines)
                let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
                let port = gateway.httpPort
                let (tokenA, tokenB, tokenC) = (try await a.token(), try await b.token(), try await c.token())
                @Sendable func post(_ path: String, _ body: String, bearer: String = "s3cret") async throws -> CurlAnswer {
                    try await curlRequest(port: port, "POST", path, body: body, bearer: bearer)
                }
                func batch(_ operation: String, _ topic: String, _ tokens: [String]) async throws -> [JSONValue] {
                    let list = tokens.map { "\"\($0)\"" }.joined(separator: ",")
                    let answer = try await post("/iid/v1:\(operation)", #"{"to": "/topics/\#(topic)", "registration_tokens": [\#(list)]}"#)
                    #expect(answer.status == 200, "\(answer.body)\n\(gateway.log)")
                    return try JSONParser.parse(Array(answer.body.utf8))["results"]?.arrayValue ?? []
                }

                // Two tokens on two instances and one no instance holds: one result each, in order.
                let subscribed = try await batch("batchAdd", "news", [tokenA, "nobody:unknown", tokenB])
                #expect(subscribed == [[:], ["error": "NOT_FOUND"], [:]], "\(subscribed)")
                #expect(try await a.herald.subscribedTopics() == ["news"])
                #expect(try await b.herald.subscribedTopics() == ["news"])
                let removed = try await batch("batchRemove", "news", [tokenB, "nobody:unknown"])
                #expect(removed == [[:], ["error": "NOT_FOUND"]], "\(removed)")
                #expect(try await a.herald.subscribedTopics() == ["news"])
                #expect(try await b.herald.subscribedTopics() == [])

                // A topic send through the gateway reaches the subscribed instance only.
                let sent = try await post("/v1/projects/demo/messages:send", body(topic: "news", n: 1))
                #expect(sent.status == 200, "\(sent.body)")
                #expect(await eventually { a.collector.numbers == ["1"] }, "\(a.collector.numbers)")
                try await b.herald.waitUntilIdle()
                #expect(b.collector.numbers.isEmpty)

                // FCM v1's route, one token: subscribe, unsubscribe, unsubscribe again (404 unless allow_missing).
                let registrations = "/v1/projects/demo/registrations"
                let v1 = try await post("\(registrations)/\(tokenB)/topicSubscriptions?topic_name=weather", "")
                #expect(v1.status == 200 && v1.body.contains("topicSubscriptions/weather"), "\(v1.body)")
                #expect(try await b.herald.subscribedTopics() == ["weather"])
                @Sendable func delete(_ path: String) async throws -> CurlAnswer {
                    try await curlRequest(port: port, "DELETE", path, bearer: "s3cret")
                }
                #expect(try await delete("\(registrations)/\(tokenB)/topicSubscriptions/weather").status == 200)
                #expect(try await b.herald.subscribedTopics() == [])
                let missing = try await delete("\(registrations)/\(tokenB)/topicSubscriptions/weather")
                #expect(missing.status == 404 && missing.body.contains("NOT_FOUND"), "\(missing.body)")
                #expect(try await delete("\(registrations)/\(tokenB)/topicSubscriptions/weather?allow_missing=true").status == 200)
                let unknown = try await post("\(registrations)/nobody:unknown/topicSubscriptions?topic_name=weather", "")
                #expect(unknown.status == 404 && unknown.body.contains("UNREGISTERED"), "\(unknown.body)")

                // A sender without manage-topics: refused at the gateway, nothing reaches an instance. (Until the
                // gateway's watch of the senders bucket has delivered the sender, its secret is unknown: 401.)
                let sports = #"{"to": "/topics/sports", "registration_tokens": ["\#(tokenA)"]}"#
                let refused = try #require(
                    try await eventuallyValue {
                        let answer = try await post("/iid/v1:batchAdd", sports, bearer: sendsOnly)
                        return answer.status == 401 ? nil : answer
                    }, "the gateway never took the sender: \(gateway.log)")
                #expect(refused.status == 403, "\(refused.body)")
                #expect(refused.body.contains("PERMISSION_DENIED") && refused.body.contains("manage-topics"), "\(refused.body)")
                #expect(try await post("/iid/v1:batchAdd", sports, bearer: "wrong").status == 401)
                #expect(try await a.herald.subscribedTopics() == ["news"])

                // The instance of C stopped (its registration stays): its token gets an error result, the others theirs.
                await c.herald.shutdown()
                let partly = try await batch("batchAdd", "sports", [tokenA, tokenC])
                #expect(partly.count == 2)
                #expect(partly.first == [:], "\(partly)")
                #expect(partly.last?["error"] == "INTERNAL", "\(partly)")
                #expect(partly.last?["message"]?.stringValue?.contains("retry") == true, "\(partly)")
                #expect(try await a.herald.subscribedTopics() == ["news", "sports"])
                #expect(gateway.log.contains("an instance did not make a topic change"), "\(gateway.log)")
                // The gateway runs on: a send is still answered.
                let after = try await post("/v1/projects/demo/messages:send", body(token: tokenA, n: 2))
                #expect(after.status == 200, "\(after.body)")
                #expect(await eventually { a.collector.numbers == ["1", "2"] })

                // GET /iid/info, asked of the token's instance.
                let info = try await onOwnThread {
                    try curlRequest(port: port, "GET", "/iid/info/\(tokenA)?details=true", bearer: "s3cret")
                }
                #expect(info.status == 200, "\(info.body)")
                #expect(
                    try JSONParser.parse(Array(info.body.utf8)) == ["platform": "LINUX", "rel": ["topics": ["news": [:], "sports": [:]]]],
                    "\(info.body)")
                let plain = try await curlRequest(port: port, "GET", "/iid/info/\(tokenB)", bearer: "s3cret")
                #expect(plain.status == 200 && plain.body == #"{"platform":"LINUX"}"#, "\(plain.body)")
                let nobody = try await curlRequest(port: port, "GET", "/iid/info/nobody:unknown", bearer: "s3cret")
                #expect(nobody.status == 404, "\(nobody.body)")
                let away = try await curlRequest(port: port, "GET", "/iid/info/\(tokenC)", bearer: "s3cret")
                #expect(away.status == 503 && away.body.contains("UNAVAILABLE"), "\(away.body)")
                let notAllowed = try await curlRequest(port: port, "GET", "/iid/info/\(tokenA)", bearer: sendsOnly)
                #expect(notAllowed.status == 403, "\(notAllowed.body)")
                #expect(await gateway.terminate() == 0)
            }
        }
    }

    @Test(
        "a herald serve instance behind the gateway: batchAdd changes its store (herald topics list); frozen (SIGSTOP) it does not answer in time and its token gets an error; stopped, likewise at once; the gateway answers throughout"
    )
    func servedInstance() async throws {
        let server = try NATSServerProcess()
        try await withTemporaryDirectory(prefix: "herald-gateway-topics") { directory in
            let instance = try await DaemonProcess.start(
                directory: "\(directory)/instance", arguments: ["--nats-server", server.url, "--socket", "none"])
            let (token, _) = try #require(await echoedToken(instance), "no token line: \(instance.log)")
            let gateway = try await startGateway(server: server, directory: directory, secret: "s3cret")
            let port = gateway.httpPort
            @Sendable func batchAdd(_ topic: String) async throws -> (status: Int, results: [JSONValue], body: String) {
                let answer = try await onOwnThread {
                    try curlRequest(
                        port: port, "POST", "/iid/v1:batchAdd", body: #"{"to": "/topics/\#(topic)", "registration_tokens": ["\#(token)"]}"#,
                        bearer: "s3cret")
                }
                let results = (try? JSONParser.parse(Array(answer.body.utf8)))?["results"]?.arrayValue ?? []
                return (answer.status, results, answer.body)
            }
            // The gateway's copy of the registrations has the instance's token once its watch delivered it.
            let applied = try await eventually { try await batchAdd("news").results == [[:]] }
            #expect(applied, "gateway: \(gateway.log)\ninstance: \(instance.log)")
            let listed = try await runBuiltExecutable("herald", ["topics", "list", "--data-dir", "\(directory)/instance"])
            #expect(listed.output.split(separator: "\n") == ["news"], "\(listed.output)\(listed.error)")

            // Frozen: connected to NATS, but it answers nothing; the gateway gives up after its request timeout (5 s).
            kill(instance.process.processIdentifier, SIGSTOP)
            let started = ContinuousClock.now
            let frozen = try await batchAdd("frozen")
            kill(instance.process.processIdentifier, SIGCONT)
            #expect(frozen.status == 200, "\(frozen.body)")
            #expect(frozen.results.first?["error"] == "INTERNAL", "\(frozen.body)")
            #expect(frozen.body.contains("did not answer"), "\(frozen.body)")
            #expect(ContinuousClock.now - started >= .seconds(4))
            #expect(gateway.log.contains("an instance did not make a topic change"), "\(gateway.log)")

            // Stopped: nothing listens on its subject, answered at once.
            #expect(await instance.terminate() == 0)
            // (Until nats-server has seen its connection close, a request may still go to it and time out.)
            let gone = try await eventuallyValue {
                let answer = try await batchAdd("gone")
                return answer.body.contains("does not listen") ? answer : nil
            }
            #expect(gone?.status == 200 && gone?.results.first?["error"] == "INTERNAL", "\(String(describing: gone))")
            let after = try await runBuiltExecutable("herald", ["topics", "list", "--data-dir", "\(directory)/instance"])
            #expect(!after.output.contains("gone"), "\(after.output)")
            let health = try httpRequest(port: port, "GET", "/healthz")
            #expect(health.status == 200, "\(health.body)")
            #expect(await gateway.terminate() == 0)
        }
    }
}
