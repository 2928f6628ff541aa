import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTLS
import HeraldTesting
import Testing

/// One answer as curl printed it with `-i`: the status, the fields that matter to a client, the body with the
/// identifiers the receiver makes up (message names, `apns-id`) replaced by `ID`.
private struct CurlAnswer: Equatable, CustomStringConvertible {
    var version: String
    var status: Int
    var contentType: String?
    var wwwAuthenticate: String?
    var hasAPNsID: Bool
    var body: String

    init(_ output: String) {
        let parts = output.components(separatedBy: "\r\n\r\n")
        let head = parts[0].components(separatedBy: "\r\n")
        let statusLine = head[0].split(separator: " ")
        version = statusLine.first.map(String.init) ?? ""
        status = statusLine.count > 1 ? Int(statusLine[1]) ?? 0 : 0
        var fields: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        contentType = fields["content-type"]
        wwwAuthenticate = fields["www-authenticate"]
        hasAPNsID = fields["apns-id"] != nil
        body = parts.dropFirst().joined(separator: "\r\n\r\n")
            .replacingOccurrences(of: #"messages/[^"]+"#, with: "messages/ID", options: .regularExpression)
    }

    var description: String { "\(version) \(status) \(contentType ?? "-") \(wwwAuthenticate ?? "-") apns-id:\(hasAPNsID) \(body)" }
}

/// How a test's client reaches the receiver: in clear (HTTP/2 by prior knowledge), or over TLS with a test CA's
/// server certificate, which the clients check, and the protocol negotiated by ALPN (`h2` or `http/1.1`).
enum Transport: String, Sendable, CaseIterable, CustomTestStringConvertible {
    case clear
    case tls

    var testDescription: String { self == .clear ? "in clear" : "over TLS" }
}

/// The receiver a test's clients talk to: its port, its base URL and, over TLS, the CA its certificate is signed by.
struct Endpoint: Sendable {
    let port: Int
    let transport: Transport
    let caFile: String?

    /// `http://127.0.0.1:PORT` or `https://127.0.0.1:PORT` (the test certificate names 127.0.0.1).
    var baseURL: String { "\(transport == .tls ? "https" : "http")://127.0.0.1:\(port)" }
    /// curl's options for HTTP/2 and for trusting the server: `--http2-prior-knowledge` in clear, `--http2` (ALPN)
    /// with `--cacert` over TLS.
    var curlHTTP2: [String] { caFile.map { ["--http2", "--cacert", $0] } ?? ["--http2-prior-knowledge"] }
    /// curl's options for HTTP/1.1 (over TLS, ALPN offers `http/1.1` only).
    var curlHTTP1: [String] { ["--http1.1"] + (caFile.map { ["--cacert", $0] } ?? []) }
}

/// ``withHTTPHerald(options:plugins:_:)`` reached by `transport`: over TLS, the receiver serves a test CA's
/// certificate made in a temporary directory.
func withHTTPHerald(
    _ transport: Transport, options: HTTPReceiver.Options, plugins: [any HeraldPlugin] = [],
    _ body: (Herald, Collected, Endpoint) async throws -> Void
) async throws {
    try await withTemporaryDirectory { directory in
        var options = options
        var caFile: String?
        if transport == .tls {
            let certificates = try await TestCertificates.make(in: directory)
            options.tls = try TLSServerContext(
                configuration: .init(certificateFile: certificates.certificateFile, keyFile: certificates.keyFile))
            caFile = certificates.caFile
        }
        try await withHTTPHerald(options: options, plugins: plugins) { herald, collected, address in
            guard case .tcp(_, let port) = address else { throw POSIXError(.EINVAL) }
            try await body(herald, collected, Endpoint(port: port, transport: transport, caFile: caFile))
        }
    }
}

@Suite("HTTPReceiver over HTTP/2, in clear (prior knowledge) and over TLS (ALPN): the same answers as over HTTP/1.1", .serialized)
struct HTTP2ReceiverTests {
    static let secret = "h2-secret"

    static func options() -> HTTPReceiver.Options {
        var options = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: secret)
        options.maximumBodyBytes = 4096
        return options
    }

    /// curl's answer to one request, in `version` (``Endpoint/curlHTTP1`` or ``Endpoint/curlHTTP2``).
    private func curl(
        _ version: [String], _ endpoint: Endpoint, _ method: String, _ path: String, body: String? = nil, headers: [String] = []
    ) async throws -> CurlAnswer {
        var arguments = ["-sS", "-i"] + version + ["-X", method]
        for header in headers { arguments += ["-H", header] }
        if let body {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("herald-h2-body-\(UUID().uuidString)")
            try Data(body.utf8).write(to: file)
            arguments += ["-H", "content-type: application/json", "--data-binary", "@\(file.path)"]
        }
        let result = try await runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), arguments + [endpoint.baseURL + path])
        #expect(result.status == 0, "curl \(version) \(method) \(path): \(result.error)")
        return CurlAnswer(result.output)
    }

    @Test(
        "every route (FCM v1 send, APNs, IID, topics, /healthz) and its errors answer over HTTP/2 as over HTTP/1.1",
        arguments: Transport.allCases)
    func sameAnswers(transport: Transport) async throws {
        try await withHTTPHerald(transport, options: Self.options()) { herald, collected, endpoint in
            let token = try await herald.token()
            let auth = "authorization: Bearer \(Self.secret)"
            // Every request once per protocol, the whole list in HTTP/1.1 first: the topic routes leave the
            // subscriptions as they found them. The sends differ by protocol, so that neither is a duplicate.
            func requests(_ n: String) -> [(method: String, path: String, body: String?, headers: [String])] {
                let send = #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"#
                return [
                    ("GET", "/healthz", nil, []),
                    ("POST", "/v1/projects/demo/messages:send", send, [auth]),
                    ("POST", "/v1/projects/demo/messages:send", send, []),
                    ("POST", "/v1/projects/demo/messages:send", "{not json", [auth]),
                    ("POST", "/v1/projects/other/messages:send", send, [auth]),
                    ("POST", "/v1/projects/demo/messages:send", String(repeating: "x", count: 5000), [auth]),
                    ("GET", "/v1/projects/demo/messages:send", nil, [auth]),
                    ("POST", "/v2/nothing", "{}", [auth]),
                    (
                        "POST", "/3/device/\(token)", #"{"aps": {"alert": "hi"}, "n": "\#(n)"}"#,
                        [auth, "apns-push-type: alert", "apns-priority: 10"]
                    ),
                    ("POST", "/3/device/someone-else", #"{"aps": {"alert": "hi"}}"#, [auth]),
                    ("POST", "/iid/v1:batchAdd", #"{"to": "/topics/news", "registration_tokens": ["\#(token)"]}"#, [auth]),
                    ("POST", "/v1/projects/demo/registrations/\(token)/topicSubscriptions?topic_name=weather", nil, [auth]),
                    ("DELETE", "/v1/projects/demo/registrations/\(token)/topicSubscriptions/weather", nil, [auth]),
                ]
            }
            var answers1: [CurlAnswer] = []
            for request in requests("h1") {
                answers1.append(
                    try await curl(endpoint.curlHTTP1, endpoint, request.method, request.path, body: request.body, headers: request.headers)
                )
            }
            var answers2: [CurlAnswer] = []
            for request in requests("h2") {
                answers2.append(
                    try await curl(endpoint.curlHTTP2, endpoint, request.method, request.path, body: request.body, headers: request.headers)
                )
            }
            for (request, (http1, http2)) in zip(requests("h2"), zip(answers1, answers2)) {
                #expect(http1.version == "HTTP/1.1")
                #expect(http2.version == "HTTP/2")
                var same = http2
                same.version = http1.version
                #expect(same == http1, "\(request.method) \(request.path): HTTP/1.1 \(http1) / HTTP/2 \(http2)")
            }
            #expect(answers2.map(\.status) == [200, 200, 401, 400, 403, 413, 405, 404, 200, 400, 200, 200, 200])
            try await herald.waitUntilIdle()
            // The data message of each protocol's send (the APNs alert is a notification, for a presenter).
            #expect(collected.messages.withLock { $0.compactMap { $0.data["n"] }.sorted() } == ["h1", "h2"])
        }
    }

    @Test(
        "httpx with http2=True: sends on one connection, 50 at once multiplexed, /healthz and an error, all over HTTP/2",
        arguments: Transport.allCases)
    func httpx(transport: Transport) async throws {
        let python = try pythonEnvironment(with: "httpx")
        let script = repositoryRoot.appendingPathComponent("Tests/HTTP2Clients/httpx_check.py")
        try await withHTTPHerald(transport, options: Self.options()) { herald, collected, endpoint in
            let token = try await herald.token()
            let child = try await runChild(
                python,
                [script.path, "--url", endpoint.baseURL, "--secret", Self.secret, "--token", token, "--project", "demo"]
                    + (endpoint.caFile.map { ["--ca-file", $0] } ?? []))
            #expect(child.status == 0, "httpx_check.py: \(child.output)")
            let line = try #require(child.output.split(separator: "\n").last)
            let result = try JSONParser.parse(Array(line.utf8))
            #expect(result["versions"] == ["HTTP/2"])
            #expect(result["statuses"]?.arrayValue?.allSatisfy { $0 == 200 } == true)
            #expect(result["accepted"] == 70)
            #expect(result["healthz"] == [200, ["status": "ready"]])
            #expect(result["error"] == [400, "INVALID_ARGUMENT"])
            try await herald.waitUntilIdle()
            #expect(collected.messages.withLock { $0.count } == 70)
        }
    }

    @Test("h2load: 4 connections x 10 streams, 1,000 FCM v1 sends, all 2xx", arguments: Transport.allCases)
    func h2load(transport: Transport) async throws {
        try await withHTTPHerald(transport, options: Self.options()) { herald, collected, endpoint in
            let token = try await herald.token()
            let body = FileManager.default.temporaryDirectory.appendingPathComponent("herald-h2load-\(UUID().uuidString).json")
            try Data(#"{"message": {"token": "\#(token)", "data": {"n": "load"}}}"#.utf8).write(to: body)
            defer { try? FileManager.default.removeItem(at: body) }
            let result = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/h2load"),
                [
                    "-n", "1000", "-c", "4", "-m", "10", "-d", body.path, "-H", "authorization: Bearer \(Self.secret)",
                    "-H", "content-type: application/json", endpoint.baseURL + "/v1/projects/demo/messages:send",
                ])
            #expect(result.status == 0, "\(result.error)")
            #expect(result.output.contains("1000 succeeded, 0 failed, 0 errored"), "\(result.output)")
            #expect(result.output.contains("status codes: 1000 2xx"), "\(result.output)")
            #expect(result.output.contains("Application protocol: \(transport == .tls ? "h2" : "h2c")\n"), "\(result.output)")
            try await herald.waitUntilIdle()
            #expect(collected.messages.withLock { $0.count } == 1000)
        }
    }
}
