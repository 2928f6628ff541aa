import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald serve and herald send, as child processes", .serialized)
struct ServeTests {
    @Test("receives over HTTP and the socket; --echo lines are exactly as documented; SIGTERM exits 0 and removes the socket")
    func echoesWhatItHandles() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let tokenEvent = try #require(await daemon.event(), "no token line; log: \(daemon.log)")
            #expect(tokenEvent["event"] == "token")
            let token = try #require(tokenEvent["token"]?.stringValue)
            let fid = try #require(tokenEvent["installationID"]?.stringValue)
            #expect(token.hasPrefix(fid + ":"))
            #expect(tokenEvent.objectValue?.keys == ["event", "token", "installationID"])

            // A display notification with `herald send` over HTTP.
            let sent = try await runHerald([
                "send", "--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo",
                "--token", token, "--title", "Hi", "--body", "there", "--data", "k=v",
            ])
            #expect(sent.status == 0, "\(sent.error)")
            let name = try #require(try JSONParser.parse(Array(sent.output.utf8))["name"]?.stringValue)
            let id = String(name.split(separator: "/").last!)
            #expect(name == "projects/demo/messages/\(id)")
            let presented = try #require(await daemon.event())
            let expected: JSONValue = [
                "event": "willPresent", "messageID": .string(id), "options": ["list", "banner", "sound"],
                "userInfo": [
                    "aps": ["alert": ["title": "Hi", "body": "there"]], "k": "v", "gcm.message_id": .string(id), "from": "herald",
                ],
            ]
            #expect(presented == expected)
            #expect(presented.objectValue?.keys == ["event", "messageID", "options", "userInfo"])

            // A silent message over the socket.
            let silent = try await runHerald([
                "send", "--socket", daemon.socketPath, "--token", token, "--content-available", "--data", "sync=1",
            ])
            #expect(silent.status == 0, "\(silent.output) \(silent.error)")
            let fetched = try #require(await daemon.event())
            #expect(fetched["event"] == "backgroundFetch")
            #expect(fetched["result"] == "noData")
            #expect(fetched["userInfo"]?["aps"] == ["content-available": 1])
            #expect(fetched["userInfo"]?["sync"] == "1")

            // A data message straight over the socket, as any client would write it.
            let client = try TestSocketClient(.unix(path: daemon.socketPath))
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "7"}}}"# + "\n")
            #expect(client.readLines(1).first?.contains("projects/demo/messages/") == true)
            let data = try #require(await daemon.event())
            #expect(data["event"] == "message")
            #expect(data["userInfo"]?["n"] == "7")

            // Someone else's token: refused to the sender, a `dropped` line for the daemon's reader.
            let stranger = try await runHerald([
                "send", "--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo", "--token", "not-ours", "--data", "a=b",
            ])
            #expect(stranger.status == 1)
            #expect(stranger.output.contains("UNREGISTERED"))
            let dropped = try #require(await daemon.event())
            #expect(dropped["event"] == "dropped")
            #expect(dropped["reason"] == "not_targeted")

            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
            #expect(daemon.log.contains("stopping") && daemon.log.contains("stopped"))
        }
    }

    @Test("a restart keeps the token and the topics")
    func restartKeepsIdentity() async throws {
        try await withTemporaryDirectory { directory in
            let first = try await DaemonProcess.start(directory: directory)
            let token = try #require(await first.event()?["token"]?.stringValue)
            let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: first.httpPort))
            client.send(
                "POST /v1/projects/demo/registrations/\(token)/topicSubscriptions?topic_name=weather HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
            )
            #expect(
                String(decoding: client.read { String(decoding: $0, as: UTF8.self).contains("\r\n\r\n") }, as: UTF8.self).hasPrefix(
                    "HTTP/1.1 200"))
            #expect(await first.terminate() == 0)

            let second = try await DaemonProcess.start(directory: directory)
            #expect(await second.event()?["token"]?.stringValue == token)
            let sent = try await runHerald(["send", "--socket", second.socketPath, "--topic", "weather", "--data", "sky=clear"])
            #expect(sent.status == 0, "\(sent.output)")
            let event = try #require(await second.event())
            #expect(event["event"] == "message")
            #expect(event["userInfo"]?["sky"] == "clear")
            #expect(event["userInfo"]?["from"] == "/topics/weather")
            #expect(await second.terminate() == 0)
        }
    }

    @Test("the bearer secret from --auth-token-file or HERALD_AUTH_TOKEN: missing and wrong are refused, right is accepted")
    func bearerSecret() async throws {
        try await withTemporaryDirectory { directory in
            let secretFile = "\(directory)/secret"
            try "s3cret\n".write(toFile: secretFile, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: ["--auth-token-file", secretFile])
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let address = ["--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo", "--token", token, "--data", "a=b"]

            let missing = try await runHerald(["send"] + address)
            #expect(missing.status == 1)
            #expect(missing.output.contains("UNAUTHENTICATED"))
            let wrong = try await runHerald(["send"] + address, environment: ["HERALD_AUTH_TOKEN": "guess"])
            #expect(wrong.status == 1)
            #expect(wrong.output.contains("UNAUTHENTICATED"))
            let fromFile = try await runHerald(["send", "--auth-token-file", secretFile] + address)
            #expect(fromFile.status == 0, "\(fromFile.output)")
            let fromEnvironment = try await runHerald(["send"] + address, environment: ["HERALD_AUTH_TOKEN": "s3cret"])
            #expect(fromEnvironment.status == 0, "\(fromEnvironment.output)")
            #expect(await daemon.event()?["event"] == "message")
            #expect(await daemon.event()?["event"] == "message")
            #expect(!daemon.log.contains("s3cret"), "the secret must never be logged")
            #expect(await daemon.terminate() == 0)
        }
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory, environment: ["HERALD_AUTH_TOKEN": "from-env"])
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let address = ["--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo", "--token", token, "--data", "a=b"]
            #expect(try await runHerald(["send"] + address).status == 1)
            #expect(try await runHerald(["send"] + address, environment: ["HERALD_AUTH_TOKEN": "from-env"]).status == 0)
            #expect(await daemon.terminate() == 0)
        }
    }

    @Test("SIGTERM under load: every message the daemon accepted is handled, once, by this run or the next")
    func terminateUnderLoad() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let events = daemon.collectRemainingLines()
            let client = try TestSocketClient(.unix(path: daemon.socketPath))
            let total = 2_000
            var text = ""
            for n in 0..<total { text += #"{"message": {"token": "\#(token)", "data": {"n": "\#(n)"}}}"# + "\n" }
            let bytes = Array(text.utf8)
            let fd = client.fd
            Thread {
                var offset = 0
                while offset < bytes.count {
                    let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if written <= 0 { return }
                    offset += written
                }
            }.start()
            // Stop it once some answers have come back, while the rest are still arriving.
            var answers = client.readLines(100)
            #expect(answers.count >= 100)
            kill(daemon.process.processIdentifier, SIGTERM)
            answers += client.readLines(total - answers.count)
            let accepted = Set(
                answers.compactMap { try? JSONParser.parse(Array($0.utf8))["name"]?.stringValue }.map {
                    String($0.split(separator: "/").last!)
                })
            #expect(accepted.count >= 100)
            for answer in answers where !answer.contains("\"name\"") {
                #expect(answer.contains("UNAVAILABLE"), "\(answer)")
            }
            await waitUntilExitWithoutSpinning(daemon.process)
            #expect(daemon.process.terminationStatus == 0, "\(daemon.log)")
            var handled = Self.handledIDs(events.lines())

            // Whatever the grace period did not finish, the next start replays from the inbox.
            let next = try await DaemonProcess.start(directory: directory)
            #expect(await next.event()?["event"] == "token")
            let replayed = next.collectRemainingLines()
            #expect(await next.terminate() == 0)
            handled += Self.handledIDs(replayed.lines())
            #expect(accepted.isSubset(of: Set(handled)), "\(accepted.subtracting(handled).count) accepted messages were never handled")
            #expect(handled.count == Set(handled).count, "a message was handled twice")
        }
    }

    static func handledIDs(_ lines: [String]) -> [String] {
        lines.compactMap { line in
            guard let event = try? JSONParser.parse(Array(line.utf8)), event["event"] == "message" else { return nil }
            return event["messageID"]?.stringValue
        }
    }

    @Test("--metrics serves Prometheus metrics and --delivery-metrics writes the JSON-lines export")
    func metricsAndExport() async throws {
        try await withTemporaryDirectory { directory in
            let metricsPort = try freeLoopbackPort()
            let export = "\(directory)/export/delivery.jsonl"
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/data",
                arguments: [
                    "--metrics", "127.0.0.1:\(metricsPort)", "--delivery-metrics", export,
                ])
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--title", "Hi", "--data", "k=v"])
            #expect(sent.status == 0)
            #expect(await daemon.event()?["event"] == "willPresent")
            let scraped = try await eventuallyValue { () -> String? in
                let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: metricsPort))
                client.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                let page = String(decoding: client.read { _ in false }, as: UTF8.self)
                return page.contains(#"herald_messages_received_total{type="DISPLAY_NOTIFICATION"} 1"#) ? page : nil
            }
            #expect(scraped != nil)
            #expect(await daemon.terminate() == 0)
            let lines = try String(contentsOfFile: export, encoding: .utf8).split(separator: "\n")
            let delivered = lines.compactMap { try? JSONParser.parse(Array($0.utf8)) }.filter { $0["event"] == "MESSAGE_DELIVERED" }
            #expect(delivered.count == 1)
            #expect(delivered.first?["message_type"] == "DISPLAY_NOTIFICATION")
        }
    }

    @Test("a second daemon on the same data directory is refused, naming the first one's pid")
    func secondDaemonRefused() async throws {
        try await withTemporaryDirectory { directory in
            let first = try await DaemonProcess.start(directory: directory)
            #expect(await first.event()?["event"] == "token")
            let second = try await runHerald(["serve", "--data-dir", directory, "--http", "none", "--socket", "none"])
            #expect(second.status == 1)
            #expect(second.error.contains("\(first.process.processIdentifier)"), "\(second.error)")
            #expect(await first.terminate() == 0)
            // Once the first has stopped, the directory is free again.
            let again = try await DaemonProcess.start(directory: directory)
            #expect(await again.event()?["event"] == "token")
            #expect(await again.terminate() == 0)
        }
    }

    @Test("bad flags and unreadable files stop the command with a clear message", argumentCheckingOnly)
    func badArguments() async throws {
        let badAddress = try await runHerald(["serve", "--http", "nonsense"])
        #expect(badAddress.status == 64)
        #expect(badAddress.error.contains("flag --http: 'nonsense' is not valid; allowed: HOST:PORT"), "\(badAddress.error)")
        let noTarget = try await runHerald(["send", "--data", "a=b"])
        #expect(noTarget.status == 64)
        #expect(noTarget.error.contains("exactly one target"))
        let badData = try await runHerald(["send", "--token", "t", "--data", "novalue"])
        #expect(badData.status == 64)
        let missingSecret = try await runHerald(["serve", "--auth-token-file", "/nonexistent/secret"])
        #expect(missingSecret.status == 1)
        #expect(missingSecret.error.contains("/nonexistent/secret"))
        let refused = try await runHerald(["send", "--http", "127.0.0.1:\(try freeLoopbackPort())", "--token", "t", "--data", "a=b"])
        #expect(refused.status == 1)
        #expect(refused.error.contains("ECONNREFUSED"))
    }

    @Test("herald send --file takes a send body or a bare message, from a file or standard input")
    func sendFromFile() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data")
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            let file = "\(directory)/message.json"
            try #"{"message": {"token": "\#(token)", "data": {"from_file": "yes"}}}"#.write(toFile: file, atomically: true, encoding: .utf8)
            #expect(try await runHerald(["send", "--socket", daemon.socketPath, "--file", file]).status == 0)
            #expect(await daemon.event()?["userInfo"]?["from_file"] == "yes")
            let bare = #"{"token": "\#(token)", "data": {"from_stdin": "yes"}}"#
            #expect(try await runHerald(["send", "--socket", daemon.socketPath, "--file", "-"], input: bare).status == 0)
            #expect(await daemon.event()?["userInfo"]?["from_stdin"] == "yes")
            let validated = try await runHerald(["send", "--socket", daemon.socketPath, "--file", "-", "--validate-only"], input: bare)
            #expect(validated.status == 0)
            #expect(await daemon.terminate() == 0)
            var rest: [String] = []
            while let line = await daemon.line() { rest.append(line) }
            #expect(rest.isEmpty, "validate_only delivers nothing: \(rest)")
        }
    }
}

@Suite("herald serve --plugin", .serialized)
struct ServePluginTests {
    @Test("a shared-object plugin loaded with --plugin answers willPresent; a bad path stops the start, naming it")
    func loadsThePlugin() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: ["--plugin", examplePlugin])
            let token = try #require(await daemon.event()?["token"]?.stringValue, "\(daemon.log)")
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token=\(token)", "--title", "Hi"])
            #expect(sent.status == 0)
            // The echo handler answers [list, banner, sound]; the plugin's [banner, sound] joins the union.
            #expect(await daemon.event()?["event"] == "willPresent")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            #expect(daemon.log.contains("example"), "the plugin is listed among the started plugins")

            let missing = try await runHerald([
                "serve", "--data-dir", "\(directory)/other", "--plugin", examplePlugin, "--plugin", "/nonexistent/libnothing.so",
            ])
            #expect(missing.status == 1)
            #expect(missing.error.contains("/nonexistent/libnothing.so"), "\(missing.error)")
        }
    }
}
