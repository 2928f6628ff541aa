import Herald
import HeraldTesting
import Testing

@testable import HeraldTokenWebhook

@Suite("TokenWebhook: the registration token POSTed to the app server", .serialized)
struct TokenWebhookTests {
    /// A started instance with a webhook to `url`.
    private func startHerald(
        _ options: TokenWebhook.Options,
        configuration: Herald.Configuration = .init(senderID: "1234567890"),
        clock: any Clock<Duration> = ContinuousClock()
    ) async throws -> (Herald, TokenWebhook) {
        let herald = Herald(configuration: patientShutdown(configuration))
        let webhook = try TokenWebhook(options: options, herald: herald, clock: clock)
        try herald.register(webhook)
        try await herald.start()
        return (herald, webhook)
    }

    /// Waits until the webhook sleeps before a retry (one sleeper on `clock`), then moves `clock` on by `duration`.
    private func retry(after duration: Duration, on clock: ManualClock, sourceLocation: SourceLocation = #_sourceLocation) async {
        #expect(await eventually { clock.sleepers == 1 }, "the webhook waits to retry", sourceLocation: sourceLocation)
        clock.advance(by: duration)
    }

    /// Shuts the instance down and checks that nothing of the webhook is left on its loop.
    private func finish(_ herald: Herald, _ server: TestHTTPServer? = nil) async {
        await herald.shutdown()
        #expect(herald.loop.statistics.liveHandles == 0)
        await server?.close()
    }

    @Test("the token is POSTed at start: JSON body with token, installation ID, device token and reason; bearer secret")
    func postedAtStart() async throws {
        let server = try await TestHTTPServer.start { _, _ in .status(200, body: "{}") }
        let (herald, webhook) = try await startHerald(.init(url: "\(server.url)/hooks/token?app=weather", secret: "s3cret"))
        #expect(await eventually { webhook.statistics.delivered == 1 })
        let token = try await herald.token()
        let installationID = try await herald.installationID()
        await finish(herald, server)

        let requests = server.requests
        try #require(requests.count == 1)
        let request = requests[0]
        #expect(request.method == "POST")
        #expect(request.target == "/hooks/token?app=weather")
        #expect(request.headers["host"] == "127.0.0.1:\(server.port)")
        #expect(request.headers["authorization"] == "Bearer s3cret")
        #expect(request.headers["content-type"] == "application/json")
        #expect(request.headers["content-length"] == "\(request.body.count)")
        let json = try #require(request.json)
        #expect(json.keys == ["token", "installationID", "deviceToken", "reason"])
        #expect(json["token"]?.stringValue == token)
        #expect(json["installationID"]?.stringValue == installationID)
        #expect(json["deviceToken"]?.isNull == true)
        #expect(json["reason"]?.stringValue == "start")
        #expect(webhook.statistics == TokenWebhook.Statistics(attempts: 1, delivered: 1, lastStatus: 200))
    }

    @Test("after deleteToken() the new token is POSTed (reason refresh), with the device token once one is set; no secret, no header")
    func newTokenAfterDelete() async throws {
        let server = try await TestHTTPServer.start { _, _ in .status(204) }
        let (herald, webhook) = try await startHerald(.init(url: "\(server.url)/token"))
        #expect(await eventually { webhook.statistics.delivered == 1 })
        let first = try await herald.token()
        try await herald.setDeviceToken("unix:/run/weatherd/push.sock")
        try await herald.deleteToken()
        let second = try await herald.token()
        #expect(await eventually { webhook.statistics.delivered == 2 })
        await finish(herald, server)

        let requests = server.requests
        try #require(requests.count == 2)
        #expect(first != second)
        #expect(requests.map(\.token) == [first, second])
        #expect(requests.map { $0.json?["reason"]?.stringValue } == ["start", "refresh"])
        #expect(requests[0].json?["deviceToken"]?.isNull == true)
        #expect(requests[1].json?["deviceToken"]?.stringValue == "unix:/run/weatherd/push.sock")
        #expect(requests.map(\.connection) == [1, 1], "the second token goes over the first one's connection")
        #expect(requests.allSatisfy { $0.headers["authorization"] == nil })
    }

    @Test("auto-init off: null at start, the minted token, then null again with reason deleted")
    func autoInitOff() async throws {
        let server = try await TestHTTPServer.start { _, _ in .status(200) }
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.isAutoInitEnabled = false
        let (herald, webhook) = try await startHerald(.init(url: "\(server.url)/token"), configuration: configuration)
        #expect(await eventually { webhook.statistics.delivered == 1 })
        let minted = try await herald.token()
        #expect(await eventually { webhook.statistics.delivered == 2 })
        try await herald.deleteToken()
        #expect(await eventually { webhook.statistics.delivered == 3 })
        await finish(herald, server)

        let requests = server.requests
        try #require(requests.count == 3)
        #expect(requests.map { $0.json?["reason"]?.stringValue } == ["start", "refresh", "deleted"])
        #expect(requests[0].json?["token"]?.isNull == true)
        #expect(requests[1].token == minted)
        #expect(requests[2].json?["token"]?.isNull == true)
        #expect(requests.allSatisfy { $0.json?["installationID"]?.stringValue != nil })
    }

    @Test("503 twice then 200: three attempts, each delay longer than the one before")
    func retriesWithBackoff() async throws {
        let server = try await TestHTTPServer.start { _, index in index < 2 ? .status(503, body: "busy") : .status(200) }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .milliseconds(100), maximumBackoff: .seconds(2)),
            clock: clock)
        await retry(after: .milliseconds(100), on: clock)
        #expect(await eventually { server.requests.count == 2 })
        await retry(after: .milliseconds(200), on: clock)
        #expect(await eventually { webhook.statistics.delivered == 1 })
        await finish(herald, server)

        let requests = server.requests
        try #require(requests.count == 3)
        #expect(Set(requests.map(\.token)).count == 1, "every attempt carries the same token")
        // The first delay is 50...100 ms (100 ms with jitter), the second 100...200 ms.
        let delays = clock.requestedSleeps
        try #require(delays.count == 2)
        #expect(delays[0] >= .milliseconds(50) && delays[0] <= .milliseconds(100), "\(delays)")
        #expect(delays[1] >= .milliseconds(100) && delays[1] <= .milliseconds(200), "\(delays)")
        #expect(webhook.statistics == TokenWebhook.Statistics(attempts: 3, delivered: 1, lastStatus: 200))
    }

    @Test("429 with Retry-After: 1 waits a second although the backoff is 10 ms")
    func honoursRetryAfter() async throws {
        let server = try await TestHTTPServer.start { _, index in index == 0 ? .status(429, headers: ["Retry-After: 1"]) : .status(200) }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20)),
            clock: clock)
        await retry(after: .milliseconds(999), on: clock)
        #expect(clock.sleepers == 1, "999 ms into a 1 s Retry-After it still waits")
        clock.advance(by: .milliseconds(1))
        #expect(await eventually { webhook.statistics.delivered == 1 })
        await finish(herald, server)

        #expect(server.requests.count == 2)
        #expect(clock.requestedSleeps == [.seconds(1)])
    }

    @Test("400 is not retried: one request, counted as rejected")
    func clientErrorNotRetried() async throws {
        let server = try await TestHTTPServer.start { _, _ in .status(400, body: #"{"error": "unknown app"}"#) }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(40)),
            clock: clock)
        #expect(await eventually { webhook.statistics.rejected == 1 && !webhook.isSending })
        // The send is over without a wait to retry: nothing more can be sent.
        #expect(clock.requestedSleeps.isEmpty && clock.sleepers == 0)
        await finish(herald, server)

        #expect(server.requests.count == 1)
        #expect(webhook.statistics == TokenWebhook.Statistics(attempts: 1, rejected: 1, lastStatus: 400))
    }

    @Test("connection refused is retried until the server appears")
    func refusedUntilServerAppears() async throws {
        let port = try TestHTTPServer.unusedPort()
        let (herald, webhook) = try await startHerald(
            .init(url: "http://localhost:\(port)/token", initialBackoff: .milliseconds(20), maximumBackoff: .milliseconds(80)))
        #expect(await eventually { webhook.statistics.attempts >= 3 })
        #expect(webhook.statistics.delivered == 0 && webhook.statistics.lastStatus == nil)
        let server = try await TestHTTPServer.start(port: port) { _, _ in .status(200) }
        #expect(await eventually { webhook.statistics.delivered == 1 })
        let token = try await herald.token()
        await finish(herald, server)

        #expect(server.requests.map(\.token) == [token])
        #expect(server.requests.first?.json?["reason"]?.stringValue == "start")
    }

    @Test("an answer that does not come within the timeout is retried")
    func timeoutRetried() async throws {
        let server = try await TestHTTPServer.start { _, index in index == 0 ? .hang : .chunked(200, chunks: ["o", "k"]) }
        let (herald, webhook) = try await startHerald(
            .init(
                url: "\(server.url)/token", timeout: .seconds(2),
                initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20)))
        #expect(await eventually { webhook.statistics.delivered == 1 })
        await finish(herald, server)

        let requests = server.requests
        try #require(requests.count == 2)
        // The hanging request was given up (its connection with it) and sent again on a new one: not at once (the
        // backoff is 10 ms), after the timeout. The timeout covers the whole exchange, the answered one too, so it is
        // long enough for a new connection's exchange on a machine busy with the whole suite under a sanitizer (200 ms
        // was not: the answered attempt timed out as well and a third was sent). The server notes an arrival once it
        // has read the request, which can be tens of milliseconds after the client began it (its clock), so the bound
        // is half the timeout: a retry that did not wait for it would come within about 10 ms.
        #expect(requests[1].connection != requests[0].connection)
        #expect(requests[0].arrival.duration(to: requests[1].arrival) >= .seconds(1))
        #expect(webhook.statistics.attempts == 2)
    }

    @Test("a newer token supersedes an older one being retried: only the latest is sent from then on")
    func newerTokenSupersedes() async throws {
        let rejected = Locked<String?>(nil)
        let server = try await TestHTTPServer.start { request, _ in
            // The first token is answered 503 for ever; any other 200.
            let first = rejected.withLock { value in
                if value == nil { value = request.token }
                return value
            }
            return request.token == first ? .status(503) : .status(200)
        }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .milliseconds(40), maximumBackoff: .milliseconds(80)),
            clock: clock)
        let old = try await herald.token()
        await retry(after: .milliseconds(40), on: clock)
        #expect(await eventually { server.requests.count == 2 && clock.sleepers == 1 }, "the old token waits to retry again")
        try await herald.deleteToken()
        let new = try await herald.token()
        #expect(await eventually { webhook.statistics.delivered == 1 && !webhook.isSending })
        // The old token's retry wait was cancelled: nothing waits, so nothing more will be sent.
        #expect(clock.sleepers == 0)
        await finish(herald, server)

        let tokens = server.requests.map(\.token)
        let firstNew = try #require(tokens.firstIndex(of: new))
        #expect(tokens[..<firstNew].allSatisfy { $0 == old })
        #expect(tokens[firstNew...] == [new], "after the new token, nothing more: \(tokens)")
        #expect(webhook.statistics.superseded == 1)
        #expect(webhook.statistics.delivered == 1)
    }

    /// On a manual clock the wait would never end by itself: shutdown returns only because it cancels it.
    @Test("stop during a backoff wait cancels the wait and nothing more is sent", .timeLimit(.minutes(1)))
    func stopDuringBackoff() async throws {
        let server = try await TestHTTPServer.start { _, _ in .status(503) }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .seconds(30), maximumBackoff: .seconds(60)),
            clock: clock)
        #expect(await eventually { webhook.statistics.lastStatus == 503 && clock.sleepers == 1 })
        await herald.shutdown()
        #expect(clock.sleepers == 0 && !webhook.isSending)
        #expect(herald.loop.statistics.liveHandles == 0)
        await server.close()
        #expect(server.requests.count == 1)
    }

    @Test("stop while a request waits for its answer returns promptly")
    func stopDuringRequest() async throws {
        let server = try await TestHTTPServer.start { _, _ in .hang }
        let (herald, webhook) = try await startHerald(.init(url: "\(server.url)/token", timeout: .seconds(60)))
        #expect(await eventually { server.requests.count == 1 })
        let clock = ContinuousClock()
        let began = clock.now
        await herald.shutdown()
        let took = clock.now - began
        #expect(took < .seconds(2), "shutdown took \(took)")
        #expect(herald.loop.statistics.liveHandles == 0)
        #expect(webhook.statistics.delivered == 0)
        await server.close()
    }

    @Test("gives up after maximumAttempts, with the token counted as abandoned")
    func givesUp() async throws {
        let server = try await TestHTTPServer.start { _, _ in .closeDelimited(500, body: "down") }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(
                url: "\(server.url)/token", maximumAttempts: 3,
                initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20)),
            clock: clock)
        await retry(after: .milliseconds(10), on: clock)
        #expect(await eventually { server.requests.count == 2 })
        await retry(after: .milliseconds(20), on: clock)
        #expect(await eventually { webhook.statistics.abandoned == 1 && !webhook.isSending })
        #expect(clock.sleepers == 0 && clock.requestedSleeps.count == 2, "no wait after the last attempt")
        await finish(herald, server)
        #expect(server.requests.count == 3)
        #expect(webhook.statistics == TokenWebhook.Statistics(attempts: 3, abandoned: 1, lastStatus: 500))
    }

    @Test(
        "a live change of the attempts (a daemon's reload): lowered while a token is retried, it is given up after its next failed attempt; the schema's value 0 is no limit"
    )
    func maximumAttemptsChangedLive() async throws {
        let server = try await TestHTTPServer.start { _, _ in .closeDelimited(500, body: "down") }
        let clock = ManualClock()
        let (herald, webhook) = try await startHerald(
            .init(url: "\(server.url)/token", initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20)), clock: clock)
        #expect(webhook.maximumAttempts == nil)
        await retry(after: .milliseconds(10), on: clock)
        // The second attempt has failed: the webhook waits to make the third.
        #expect(await eventually { server.requests.count == 2 && clock.sleepers == 1 })
        // As herald serve's reload hands it on: token-webhook-max-attempts 2, which the token has made already.
        webhook.applyLiveSettings(ConfigurationValues([TokenWebhook.Settings.maxAttempts.key: .integer(2)]))
        #expect(webhook.maximumAttempts == 2)
        await retry(after: .milliseconds(20), on: clock)
        #expect(await eventually { webhook.statistics.abandoned == 1 && !webhook.isSending })
        #expect(server.requests.count == 3, "one attempt after the change, then given up")
        webhook.applyLiveSettings(ConfigurationValues([TokenWebhook.Settings.maxAttempts.key: .integer(0)]))
        #expect(webhook.maximumAttempts == nil)
        #expect(throws: TokenWebhookError.self) { try webhook.setMaximumAttempts(0) }
        await finish(herald, server)
    }

    @Test("https: delivered to a server whose certificate the CA file trusts; an untrusted certificate is retried, never sent to")
    func https() async throws {
        try await withTemporaryDirectory { directory in
            let certificates = try await TestCertificates.make(in: directory)
            let trusted = try await PythonHTTPServer.start(certificate: certificates.certificateFile, key: certificates.keyFile)
            defer { trusted.stop() }
            let untrusted = try await PythonHTTPServer.start(
                certificate: certificates.untrustedCertificateFile, key: certificates.untrustedKeyFile)
            defer { untrusted.stop() }

            let (herald, webhook) = try await startHerald(
                .init(url: "\(trusted.baseURL)/echo", secret: "s3cret", caFile: certificates.caFile))
            #expect(await eventually { webhook.statistics.delivered == 1 })
            #expect(webhook.statistics == TokenWebhook.Statistics(attempts: 1, delivered: 1, lastStatus: 200))
            await finish(herald)

            let (refusing, refused) = try await startHerald(
                .init(
                    url: "\(untrusted.baseURL)/echo", initialBackoff: .milliseconds(10), maximumBackoff: .milliseconds(20),
                    caFile: certificates.caFile))
            #expect(await eventually { refused.statistics.attempts >= 3 })
            #expect(refused.statistics.delivered == 0 && refused.statistics.lastStatus == nil, "no request got through")
            await finish(refusing)
        }
    }

    @Test("options Herald cannot use are refused at init; https URLs and host names are accepted")
    func badOptions() {
        func refusal(_ options: TokenWebhook.Options) -> String? {
            do {
                _ = try TokenWebhook(options: options)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(refusal(.init(url: "https://push.example.com/token")) == nil)
        #expect(refusal(.init(url: "http://push.example.com/token", caFile: "/etc/hostname")) == nil)
        #expect(refusal(.init(url: "https://push.example.com/token", caFile: "/no/such/ca.pem"))?.contains("cannot read") == true)
        #expect(refusal(.init(url: "ftp://push.example.com/token"))?.contains("http://") == true)
        #expect(refusal(.init(url: "https://user:pw@push.example.com/token"))?.contains("user information") == true)
        #expect(refusal(.init(url: "http://127.0.0.1:70000/token")) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", secret: "")) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", secret: "a\r\nX-Evil: 1")) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", timeout: .zero)) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", maximumAttempts: 0)) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", initialBackoff: .zero)) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", initialBackoff: .seconds(2), maximumBackoff: .seconds(1))) != nil)
        #expect(refusal(.init(url: "http://127.0.0.1:8000/t", secret: "s3cret", maximumAttempts: 5)) == nil)
    }

    @Test("retry delays double from the initial backoff up to the maximum, jittered between half and all; Retry-After wins when longer")
    func retryDelays() {
        func delay(_ attempt: Int, _ fraction: Double, retryAfter: Duration? = nil) -> Duration {
            TokenWebhook.retryDelay(
                afterAttempt: attempt, initial: .milliseconds(100), maximum: .seconds(1), retryAfter: retryAfter, fraction: fraction)
        }
        #expect(delay(1, 1.0) == .milliseconds(100))
        #expect(delay(1, 0) == .milliseconds(50))
        #expect(delay(2, 0) == .milliseconds(100))
        #expect(delay(3, 1.0) == .milliseconds(400))
        #expect(delay(4, 1.0) == .milliseconds(800))
        #expect(delay(5, 1.0) == .seconds(1), "capped")
        #expect(delay(1_000_000, 0) == .milliseconds(500), "capped, no overflow")
        for attempt in 1...8 {
            for fraction in [0.0, 0.25, 0.5, 0.75, 0.999] {
                #expect(delay(attempt + 1, 0) >= delay(attempt, fraction) || delay(attempt, fraction) > .milliseconds(500))
            }
        }
        #expect(delay(1, 0.5, retryAfter: .seconds(5)) == .seconds(5))
        #expect(delay(4, 1.0, retryAfter: .milliseconds(1)) == .milliseconds(800), "a shorter Retry-After does not shorten the backoff")
        #expect(delay(1, 0, retryAfter: .seconds(86_400)) == TokenWebhook.maximumRetryAfter)
    }

    @Test("Retry-After in seconds or as an HTTP date")
    func retryAfterParsing() {
        let now = 1_445_412_000  // Wed, 21 Oct 2015 07:20:00 GMT
        #expect(TokenWebhook.parseRetryAfter("120", now: now) == .seconds(120))
        #expect(TokenWebhook.parseRetryAfter(" 0 ", now: now) == .zero)
        #expect(TokenWebhook.parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now: now) == .seconds(480))
        #expect(TokenWebhook.parseRetryAfter("Wed, 21 Oct 2015 07:00:00 GMT", now: now) == .zero)
        #expect(TokenWebhook.parseRetryAfter("soon", now: now) == nil)
        #expect(TokenWebhook.parseRetryAfter("-5", now: now) == nil)
        #expect(TokenWebhook.parseRetryAfter("", now: now) == nil)
    }
}
