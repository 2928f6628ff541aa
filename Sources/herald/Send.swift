import ArgumentParser
import Glibc
import Herald
import HeraldDaemon
import HeraldHTTPClient
import HeraldNATSReceiver

/// `herald send`: posts one FCM v1 send body to a Herald daemon over HTTP or its socket and prints the answer.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message to a Herald daemon over HTTP, its socket or NATS, and print the answer.",
        discussion: """
            The message comes from --file (an FCM v1 send body {"message": {...}}, or just the message object) or is
            built from the flags. Exits 0 when the daemon accepted it ({"name": ...}), 1 when it answered with an error.
            With --nats, a token message is stored by JetStream (the answer comes once it is stored, and the daemon of
            the token takes it when it runs) and a topic message is a NATS request that a subscribed daemon answers.
            """
    )

    @Option(help: ArgumentHelp("The daemon's HTTP receiver: HOST:PORT, or an http:// or https:// URL.", valueName: "host:port|url"))
    var http: String = "127.0.0.1:8080"

    @Option(
        name: .customLong("ca-file"),
        help: ArgumentHelp("A PEM file of the CAs that sign the daemon's certificate (https), instead of the system's.", valueName: "file"))
    var caFile: String?

    @Option(
        help: ArgumentHelp(
            "The proxy to send through (http://HOST:PORT, socks5h://HOST:PORT), instead of what https_proxy, http_proxy and no_proxy say.",
            valueName: "url"))
    var proxy: String?

    @Option(help: ArgumentHelp("Send over the daemon's socket receiver instead (a Unix socket path or HOST:PORT).", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("Publish to NATS at this server URL instead (nats://host:port).", valueName: "url"))
    var nats: String?

    @Option(name: .customLong("project-id"), help: "The project of the send URL.")
    var projectID: String = "herald"

    @Option(
        name: .customLong("auth-token-file"),
        help: ArgumentHelp("A file holding the bearer secret (else HERALD_AUTH_TOKEN).", valueName: "file"))
    var authTokenFile: String?

    @Option(help: ArgumentHelp("A JSON file with the send body or the message ('-' reads standard input).", valueName: "file"))
    var file: String?

    @Option(help: "Target: a registration token.") var token: String?
    @Option(help: "Target: a topic.") var topic: String?
    @Option(help: "Target: a condition such as \"'a' in topics && 'b' in topics\".") var condition: String?
    @Option(help: "Notification title.") var title: String?
    @Option(help: "Notification body.") var body: String?
    @Option(help: ArgumentHelp("A data entry; repeatable.", valueName: "key=value")) var data: [String] = []
    @Flag(name: .customLong("content-available"), help: "A silent message that wakes background-fetch workers.") var contentAvailable =
        false
    @Flag(name: .customLong("validate-only"), help: "Ask the daemon to validate without delivering.") var validateOnly = false

    func validate() throws {
        let targets = [token, topic, condition].compactMap { $0 }
        if file != nil {
            guard targets.isEmpty, title == nil, body == nil, data.isEmpty, !contentAvailable else {
                throw ValidationError(
                    "--file takes the whole message; leave out --token, --topic, --condition, --title, --body, --data and --content-available"
                )
            }
        } else if targets.count != 1 {
            throw ValidationError("name exactly one target: --token, --topic or --condition (or give --file)")
        }
        if nats != nil, socket != nil {
            throw ValidationError("send over one of --nats and --socket, not both")
        }
        if nats != nil, condition != nil {
            throw ValidationError("a condition cannot be sent over NATS (a subject names one token or one topic); send to each topic")
        }
        for entry in data where !entry.contains("=") {
            throw ValidationError("--data takes key=value, not '\(entry)'")
        }
        if socket == nil, (try? HTTPURL(parsing: daemonURL(http))) == nil {
            throw ValidationError("--http must be HOST:PORT or an http:// or https:// URL, not '\(http)'")
        }
        if let socket, SocketAddress(parsing: socket.contains("/") || socket.contains(":") ? socket : "./\(socket)") == nil {
            throw ValidationError("--socket must be a path or HOST:PORT, not '\(socket)'")
        }
    }

    func run() async throws {
        let request = try sendBody()
        if let nats {
            let answer = try Self.publish(request, to: nats, project: projectID)
            print(String(decoding: answer, as: UTF8.self))
            if (try? JSONParser.parse(answer))?["name"]?.stringValue == nil { throw ExitCode(1) }
            return
        }
        let answer: [UInt8]
        do {
            answer = try await withEventLoop(named: "herald-send") { loop in
                if let socket {
                    let address = SocketAddress(parsing: socket.contains("/") || socket.contains(":") ? socket : "./\(socket)")!
                    var line = request
                    line.append(UInt8(ascii: "\n"))
                    let reply = try await Exchange.run(line, with: address, on: loop) { $0.contains(UInt8(ascii: "\n")) }
                    return Array(reply.prefix { $0 != UInt8(ascii: "\n") })
                }
                var headers = [(name: "Content-Type", value: "application/json")]
                if let secret = try BearerSecret.load(file: authTokenFile) { headers.append(("Authorization", "Bearer \(secret)")) }
                let client = HTTPClient(
                    loop: loop, configuration: .init(caFile: caFile, userAgent: "herald-send/\(HeraldBuild.version)", proxy: proxy))
                let response = try await client.request(
                    "POST", "\(daemonURL(http))/v1/projects/\(percentEncoded(projectID))/messages:send", headers: headers, body: request)
                return response.body
            }
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
        print(String(decoding: answer, as: UTF8.self))
        let accepted = (try? JSONParser.parse(answer))?["name"]?.stringValue != nil
        if !accepted { throw ExitCode(1) }
    }

    /// The FCM v1 send body, from --file or the flags.
    func sendBody() throws -> [UInt8] {
        if let file {
            guard let contents = file == "-" ? readWholeFile("/dev/stdin") : readWholeFile(file) else {
                throw CommandFailure(message: "herald: cannot read \(file): \(String(cString: strerror(errno)))")
            }
            let value: JSONValue
            do {
                value = try JSONParser.parse(contents)
            } catch {
                throw CommandFailure(message: "herald: \(file) is not JSON: \(error)")
            }
            guard var object = value.objectValue else { throw CommandFailure(message: "herald: \(file) holds no JSON object") }
            if object["message"] == nil { object = ["message": .object(object)] }
            if validateOnly { object["validate_only"] = true }
            return JSONValue.object(object).jsonBytes()
        }
        var message = JSONObject()
        if let token { message["token"] = .string(token) }
        if let topic { message["topic"] = .string(topic) }
        if let condition { message["condition"] = .string(condition) }
        if title != nil || body != nil {
            var notification = JSONObject()
            if let title { notification["title"] = .string(title) }
            if let body { notification["body"] = .string(body) }
            message["notification"] = .object(notification)
        }
        if !data.isEmpty {
            var entries = JSONObject()
            for entry in data {
                let parts = entry.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                entries[String(parts[0])] = .string(String(parts[1]))
            }
            message["data"] = .object(entries)
        }
        if contentAvailable {
            message["apns"] = [
                "headers": ["apns-priority": "5", "apns-push-type": "background"], "payload": ["aps": ["content-available": 1]],
            ]
        }
        var request: JSONObject = ["message": .object(message)]
        if validateOnly { request["validate_only"] = true }
        return JSONValue.object(request).jsonBytes()
    }

    /// Publishes `request` on its target's NATS subject and returns the answer: for a token, the FCM name of the
    /// message once JetStream stored it (the stream is created when missing, as the receiver would); for a topic,
    /// the answer of the daemon that took the request, or a name when no daemon is subscribed (FCM accepts topic
    /// sends that reach no one).
    static func publish(_ request: [UInt8], to url: String, project: String) throws -> [UInt8] {
        let message = (try? JSONParser.parse(request))?["message"]
        let options = NATSReceiver.Options(servers: [url])
        do {
            if let token = message?["token"]?.stringValue {
                guard NATSSubjects.isSubjectToken(token) else {
                    throw CommandFailure(
                        message: "herald: the token '\(token)' cannot stand in a NATS subject (it holds '.', '*', '>' or a space)")
                }
                let publisher = try NATSPublisher(options: options)
                try publisher.ensureStream(project: project, options: options)
                let id = try publisher.publishStored(NATSSubjects.token(project: project, token: token), body: request)
                return fcmSendResponse(project: project, messageID: id).jsonBytes()
            }
            if let topic = message?["topic"]?.stringValue {
                let publisher = try NATSPublisher(options: options)
                if let answer = try publisher.request(NATSSubjects.topic(project: project, topic: topic), body: request) { return answer }
                let note = Array("herald: no daemon subscribed to '\(topic)' answered on NATS\n".utf8)
                _ = note.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
                return fcmSendResponse(project: project, messageID: "nats-\(UInt64.random(in: 1...UInt64.max))").jsonBytes()
            }
        } catch let failure as CommandFailure {
            throw failure
        } catch {
            throw CommandFailure(message: "herald: \(error)")
        }
        throw CommandFailure(message: "herald: over NATS a message goes to a token or a topic (a subject names one); this one has neither")
    }
}

/// The base URL of a daemon's HTTP receiver given as `HOST:PORT` (plain HTTP) or as an `http://` or `https://` URL
/// (without the trailing slash).
func daemonURL(_ endpoint: String) -> String {
    var url = endpoint.contains("://") ? endpoint : "http://\(endpoint)"
    while url.hasSuffix("/") { url.removeLast() }
    return url
}

/// One request and its answer over a stream connection on Herald's loop.
enum Exchange {
    /// Connects to `address`, writes `request`, and reads until `complete` says so or the peer ends the stream.
    static func run(
        _ request: [UInt8], with address: SocketAddress, on loop: EventLoop,
        complete: @escaping @Sendable ([UInt8]) -> Bool
    ) async throws -> [UInt8] {
        let connection = try await StreamConnection.connect(to: address, on: loop)
        return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[UInt8], any Error>) in
            loop.execute {
                var received: [UInt8] = []
                var finished = false
                func finish(_ result: Result<[UInt8], any Error>) {
                    guard !finished else { return }
                    finished = true
                    connection.close()
                    continuation.resume(with: result)
                }
                connection.onRead = { bytes in
                    received.append(contentsOf: bytes)
                    if complete(received) { finish(.success(received)) }
                }
                connection.onEnd = { finish(.success(received)) }
                connection.onClose = { error in
                    if let error { finish(.failure(error)) } else { finish(.success(received)) }
                }
                connection.write(request)
                connection.startReading()
            }
        }
    }
}
