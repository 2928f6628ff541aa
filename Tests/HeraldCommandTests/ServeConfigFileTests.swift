import Foundation
import Herald
import HeraldTesting
import Testing

/// `herald serve --config` as a child process: the file's settings are the ones the daemon runs with, the environment
/// and flags override them, and a bad configuration stops the start.
@Suite("herald serve --config, as child processes", .serialized)
struct ServeConfigFileTests {
    @Test("a daemon runs on its config file: HTTP port, socket path, data directory, project, echo, plugins, metrics")
    func runsOnTheFile() async throws {
        try await withTemporaryDirectory { directory in
            let httpPort = try freeLoopbackPort()
            let metricsPort = try freeLoopbackPort()
            try FileManager.default.createDirectory(atPath: "\(directory)/run", withIntermediateDirectories: true)
            let file = "\(directory)/herald.yaml"
            try """
            # herald serve, configured by file only
            http: 127.0.0.1:\(httpPort)
            socket: \(directory)/run/custom.sock
            data-dir: \(directory)/state
            project-id: from-file
            echo: true
            log-level: debug
            analytics-store: false
            plugins:
              - \(examplePlugin)
            metrics: 127.0.0.1:\(metricsPort)
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let daemon = try await DaemonProcess.start(
                directory: "\(directory)/log", httpPort: httpPort, arguments: ["serve", "--config", file])
            let token = try #require(await daemon.event()?["token"]?.stringValue, "\(daemon.log)")

            let overHTTP = try await runHerald([
                "send", "--http", "127.0.0.1:\(httpPort)", "--project-id", "from-file", "--token", token, "--data", "via=http",
            ])
            #expect(overHTTP.status == 0, "\(overHTTP.output) \(overHTTP.error)")
            #expect(overHTTP.output.contains("projects/from-file/messages/"))
            #expect(await daemon.event()?["userInfo"]?["via"] == "http")
            let overSocket = try await runHerald(["send", "--socket", "\(directory)/run/custom.sock", "--token", token, "--title", "Hi"])
            #expect(overSocket.status == 0, "\(overSocket.output) \(overSocket.error)")
            #expect(await daemon.event()?["event"] == "willPresent")
            #expect(FileManager.default.fileExists(atPath: "\(directory)/state/herald.sqlite"))
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/state/analytics.sqlite"))
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/state/herald.sock"))
            let scraped = try await eventuallyValue { () -> String? in
                let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: metricsPort))
                client.send("GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                let page = String(decoding: client.read { _ in false }, as: UTF8.self)
                return page.hasPrefix("HTTP/1.1 200") ? page : nil
            }
            #expect(scraped != nil)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            #expect(daemon.log.contains("debug"), "log-level debug from the file")
            #expect(daemon.log.contains("example"), "the plugin from the file is loaded")
        }
    }

    @Test("precedence with a real daemon: the file's port, then the environment's, then the flag's", argumentCheckingOnly)
    func precedence() async throws {
        try await withTemporaryDirectory { directory in
            let ports = [try freeLoopbackPort(), try freeLoopbackPort(), try freeLoopbackPort()]
            let file = "\(directory)/herald.yaml"
            try "http: 127.0.0.1:\(ports[0])\ndata-dir: \(directory)/state\necho: true\nsocket: none\n"
                .write(toFile: file, atomically: true, encoding: .utf8)
            let environment = ["HERALD_HTTP": "127.0.0.1:\(ports[1])"]
            let runs: [(environment: [String: String], flags: [String], answers: Int)] = [
                ([:], [], ports[0]),
                (environment, [], ports[1]),
                (environment, ["--http", "127.0.0.1:\(ports[2])"], ports[2]),
            ]
            for run in runs {
                let daemon = try await DaemonProcess.start(
                    directory: "\(directory)/log", httpPort: run.answers, arguments: ["serve", "--config", file] + run.flags,
                    environment: run.environment)
                let token = try #require(await daemon.event()?["token"]?.stringValue, "\(daemon.log)")
                for port in ports {
                    let sent = try await runHerald(["send", "--http", "127.0.0.1:\(port)", "--token", token, "--data", "a=b"])
                    #expect(sent.status == (port == run.answers ? 0 : 1), "port \(port): \(sent.output) \(sent.error)")
                }
                #expect(await daemon.event()?["event"] == "message")
                #expect(await daemon.terminate() == 0, "\(daemon.log)")
            }
        }
    }

    @Test("--print-config shows the effective settings and their sources, and exits without starting")
    func printConfig() async throws {
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            try "project-id: from-file\nshutdown-grace: 3\ndata-dir: \(directory)/state\n".write(
                toFile: file, atomically: true, encoding: .utf8)
            let printed = try await runHerald(
                ["serve", "--config", file, "--shutdown-grace", "5", "--print-config"],
                environment: ["HERALD_SENDER_ID": "4242", "HERALD_SHUTDOWN_GRACE": "4", "HERALD_SHUTDOWN_GRACEE": "1"])
            #expect(printed.status == 0, "\(printed.error)")
            #expect(printed.output.contains("project-id: from-file  # config file \(file), line 1"))
            #expect(printed.output.contains("sender-id: 4242  # environment HERALD_SENDER_ID"))
            #expect(printed.output.contains("shutdown-grace: 5  # flag --shutdown-grace"))
            #expect(printed.output.contains("http: 127.0.0.1:8080  # default"))
            #expect(
                printed.error.contains(
                    "HERALD_SHUTDOWN_GRACEE is not a setting of herald serve and is ignored (did you mean HERALD_SHUTDOWN_GRACE?)"))
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/state"), "nothing started")
            // HERALD_CONFIG names the file when --config does not.
            let fromEnvironment = try await runHerald(["serve", "--print-config"], environment: ["HERALD_CONFIG": file])
            #expect(fromEnvironment.output.contains("project-id: from-file  # config file \(file), line 1"), "\(fromEnvironment.error)")
        }
    }

    @Test("each kind of bad configuration stops the start with exit status 64 and one line naming the source and key", argumentCheckingOnly)
    func badConfigurationStops() async throws {
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            let state = "\(directory)/state"
            let cases: [(yaml: String?, environment: [String: String], flags: [String], expected: String)] = [
                ("htp: 127.0.0.1:1\n", [:], [], "herald: config file \(file), line 1: unknown key 'htp' (did you mean 'http'?)"),
                (
                    "echo: true\nshutdown-grace: ten\n", [:], [],
                    "herald: config file \(file), line 2, key shutdown-grace: 'ten' is not valid; allowed: a whole number"
                ),
                ("analytics-retention-days: -1\n", [:], [], "line 1, key analytics-retention-days: '-1' is not valid"),
                ("http: localhost\n", [:], [], "line 1, key http: 'localhost' is not valid; allowed: HOST:PORT"),
                ("plugins: \(examplePlugin)\n", [:], [], "key plugins: '\(examplePlugin)' is not valid; allowed: a list of paths"),
                ("http: [127.0.0.1:1\n", [:], [], "herald: config file \(file), line 2, column 1: not valid YAML"),
                (nil, [:], [], "herald: cannot read the config file \(file): No such file or directory"),
                ("echo: true\n", ["HERALD_SHUTDOWN_GRACE": "soon"], [], "herald: environment HERALD_SHUTDOWN_GRACE: 'soon' is not valid"),
                ("echo: true\n", [:], ["--metrics", "9464"], "herald: flag --metrics: '9464' is not valid; allowed: HOST:PORT"),
                (
                    "categories:\n  message:\n    actions:\n      - {identifier: archive}\n", [:], [],
                    "herald: config file \(file), line 4, key categories.message.actions[0].title: is missing"
                ),
                (
                    "echo: true\n", [:], ["--presenter", "popup"],
                    "herald: flag --presenter: 'popup' is not valid; allowed: desktop, log or none"
                ),
            ]
            for bad in cases {
                try? FileManager.default.removeItem(atPath: file)
                if let yaml = bad.yaml { try yaml.write(toFile: file, atomically: true, encoding: .utf8) }
                let result = try await runHerald(
                    ["serve", "--config", file, "--data-dir", state] + bad.flags, environment: bad.environment)
                #expect(result.status == 64, "\(bad.expected): \(result.error)")
                #expect(result.error.hasPrefix("herald: ") && result.error.contains(bad.expected), "\(result.error)")
                #expect(result.error.filter { $0 == "\n" }.count == 1, "one line: \(result.error)")
                #expect(!FileManager.default.fileExists(atPath: state), "the daemon must not start: \(bad.expected)")
            }
        }
    }
}
