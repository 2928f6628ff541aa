import Foundation
import Herald
import HeraldSocketReceiver
import HeraldTesting
import Testing

@testable import HeraldDaemon

/// The loader of `herald serve`'s settings, in process: precedence, and every kind of bad value.
@Suite("herald serve configuration: the loader")
struct ServeConfigurationTests {
    /// Calls `body` with the path of a temporary file holding `contents` (`nil`: no file), removed afterwards.
    func withConfigFile<T>(_ contents: Data?, _ body: (String?) throws -> T) rethrows -> T {
        guard let contents else { return try body(nil) }
        let path = NSTemporaryDirectory() + "herald-config-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).yaml"
        _ = FileManager.default.createFile(atPath: path, contents: contents)
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(path)
    }

    /// Resolves with `yaml` as the config file (when given), `environment` and `flags`.
    func resolve(
        _ yaml: String? = nil, environment: [String: String] = [:], flags: [(key: String, value: SettingValue, flag: String)] = []
    ) throws -> (settings: ServeSettings, warnings: [String], file: String) {
        try withConfigFile(yaml.map { Data($0.utf8) }) { file in
            let (settings, warnings) = try ServeConfiguration.resolve(file: file, environment: environment, flags: flags)
            return (settings, warnings, file ?? "")
        }
    }

    /// The message of the error resolving throws (`nil` when it does not), with `FILE` for the config file's path.
    func failure(_ yaml: String?, environment: [String: String] = [:], flags: [(key: String, value: SettingValue, flag: String)] = [])
        -> String?
    {
        failure(bytes: yaml.map { Data($0.utf8) }, environment: environment, flags: flags)
    }

    func failure(bytes: Data?, environment: [String: String] = [:], flags: [(key: String, value: SettingValue, flag: String)] = [])
        -> String?
    {
        withConfigFile(bytes) { file in
            do {
                _ = try ServeConfiguration.resolve(file: file, environment: environment, flags: flags)
                return nil
            } catch let error as ConfigurationError {
                return file.map { error.message.replacingOccurrences(of: $0, with: "FILE") } ?? error.message
            } catch {
                return "\(error)"
            }
        }
    }

    @Test("no file, no environment, no flags: the documented defaults, every source 'default'")
    func defaults() throws {
        let settings = try resolve().settings
        #expect(settings.http == "127.0.0.1:8080")
        #expect(settings.socket == "herald-data/herald.sock")
        #expect(settings.projectID == "herald")
        #expect(settings.senderID == "herald")
        #expect(settings.dataDirectory == "herald-data")
        #expect(settings.echo == false)
        #expect(settings.authTokenFile == nil)
        #expect(settings.logLevel == .info)
        #expect(settings.shutdownGrace == 10)
        #expect(settings.analyticsStore == true)
        #expect(settings.analyticsRetentionDays == 90)
        #expect(settings.plugins.isEmpty)
        #expect(settings.metrics == nil)
        #expect(settings.deliveryMetrics == nil)
        #expect(ServeOption.all.allSatisfy { settings.sources[$0.key] == .defaultValue })
        // An empty file, or one of comments only, changes nothing.
        #expect(try resolve("# nothing yet\n").settings.sources.values.allSatisfy { $0 == .defaultValue })
    }

    @Test("precedence: file < environment < flag, key by key, each source recorded")
    func precedence() throws {
        let yaml = """
            http: 127.0.0.1:9001      # file only
            project-id: from-file     # file and environment
            shutdown-grace: 3         # file, environment and flag
            plugins: [/a.so, /b.so]
            echo: true
            """
        let (settings, _, file) = try resolve(
            yaml, environment: ["HERALD_PROJECT_ID": "from-env", "HERALD_SHUTDOWN_GRACE": "4", "HERALD_DATA_DIR": "/tmp/env-data"],
            flags: [("shutdown-grace", .integer(5), "--shutdown-grace"), ("echo", .boolean(false), "--no-echo")])
        #expect(settings.http == "127.0.0.1:9001")
        #expect(settings.sources["http"] == .file(path: file, line: 1))
        #expect(settings.projectID == "from-env")
        #expect(settings.sources["project-id"] == .environment("HERALD_PROJECT_ID"))
        #expect(settings.shutdownGrace == 5)
        #expect(settings.sources["shutdown-grace"] == .flag("--shutdown-grace"))
        #expect(settings.plugins == ["/a.so", "/b.so"])
        #expect(settings.echo == false)
        #expect(settings.sources["echo"] == .flag("--no-echo"))
        // The default socket follows the data directory, wherever that came from.
        #expect(settings.socket == "/tmp/env-data/herald.sock")
        // Lists are replaced, not merged: the environment's list wins over the file's.
        #expect(try resolve(yaml, environment: ["HERALD_PLUGINS": "/c.so:/d.so"]).settings.plugins == ["/c.so", "/d.so"])
        #expect(try resolve(yaml, flags: [("plugins", .list(["/e.so"]), "--plugin")]).settings.plugins == ["/e.so"])
        // Booleans from the environment.
        #expect(try resolve(yaml, environment: ["HERALD_ECHO": "no"]).settings.echo == false)
        #expect(try resolve(environment: ["HERALD_ANALYTICS_STORE": "0"]).settings.analyticsStore == false)
        // An empty variable counts as not set.
        #expect(try resolve(yaml, environment: ["HERALD_PROJECT_ID": ""]).settings.projectID == "from-file")
    }

    @Test("fcm-proxy from the file, HERALD_FCM_PROXY and --fcm-proxy; off by default")
    func fcmProxySetting() throws {
        #expect(try resolve().settings.fcmProxy == false)
        #expect(try resolve("fcm-proxy: true\n").settings.fcmProxy == true)
        #expect(try resolve(environment: ["HERALD_FCM_PROXY": "true"]).settings.fcmProxy == true)
        #expect(try resolve("fcm-proxy: true\n", flags: [("fcm-proxy", .boolean(false), "--no-fcm-proxy")]).settings.fcmProxy == false)
        #expect(failure("fcm-proxy: maybe\n")?.contains("fcm-proxy") == true)
    }

    @Test("YAML scalars as people write them: a number where a string is expected, yes/no booleans, quoted values")
    func scalars() throws {
        let settings = try resolve(
            """
            sender-id: 1234567890
            project-id: "0042"
            analytics-store: no
            log-level: 'debug'
            delivery-metrics: /var/log/herald/delivery.jsonl
            socket: unix:/run/herald.sock
            """
        ).settings
        #expect(settings.senderID == "1234567890")
        #expect(settings.projectID == "0042")
        #expect(settings.analyticsStore == false)
        #expect(settings.logLevel == .debug)
        #expect(settings.deliveryMetrics == "/var/log/herald/delivery.jsonl")
        #expect(settings.socket == "unix:/run/herald.sock")
        // A socket setting is a Unix path (with or without a '/', or unix:PATH) or TCP's HOST:PORT.
        #expect(SocketReceiver.Settings.address("127.0.0.1:9000") == .tcp(host: "127.0.0.1", port: 9000))
        #expect(SocketReceiver.Settings.address("herald.sock") == .unix(path: "herald.sock"))
        #expect(SocketReceiver.Settings.address("/run/herald.sock") == .unix(path: "/run/herald.sock"))
        #expect(SocketReceiver.Settings.address("a:b") == nil)
    }

    /// A config file and what its error must say (`FILE` is the file's path).
    static let badFiles: [(yaml: String, expected: [String])] = [
        // Unknown keys, with the nearest known key suggested.
        (
            "http: 127.0.0.1:1\nhtp: 127.0.0.1:2\n",
            ["herald: config file FILE, line 2: unknown key 'htp' (did you mean 'http'?)", "the keys are project-id, sender-id"]
        ),
        ("plugin: [/a.so]\n", ["line 1: unknown key 'plugin' (did you mean 'plugins'?)"]),
        ("colour: blue\n", ["line 1: unknown key 'colour';"]),
        // Wrong types.
        (
            "shutdown-grace: ten\n",
            ["herald: config file FILE, line 1, key shutdown-grace: 'ten' is not valid; allowed: a whole number of seconds from 0 to 86400"]
        ),
        ("shutdown-grace: 2.5\n", ["key shutdown-grace: '2.5' is not valid"]),
        ("echo: maybe\n", ["key echo: 'maybe' is not valid; allowed: true or false"]),
        ("plugins: /a.so\n", ["key plugins: '/a.so' is not valid; allowed: a list of paths"]),
        ("plugins: [[/a.so]]\n", ["key plugins: a list is not valid"]),
        ("plugins: [/a.so, ~]\n", ["key plugins: a list is not valid"]),
        ("http: [127.0.0.1:1]\n", ["key http: a list is not valid"]),
        ("http:\n  host: 127.0.0.1\n  port: 1\n", ["line 1, key http: a mapping is not valid"]),
        ("project-id:\n", ["line 1, key project-id: an empty value is not valid; allowed: a non-empty project ID"]),
        ("project-id: ''\n", ["key project-id: '' is not valid"]),
        // Out of range.
        (
            "analytics-retention-days: -1\n",
            ["key analytics-retention-days: '-1' is not valid; allowed: a whole number of days from 0 (keep everything) to 36500"]
        ),
        ("shutdown-grace: 100000\n", ["key shutdown-grace: '100000' is not valid"]),
        ("shutdown-grace: 99999999999999999999\n", ["key shutdown-grace: '99999999999999999999' is not valid"]),
        // Bad addresses and names.
        ("http: localhost\n", ["key http: 'localhost' is not valid; allowed: HOST:PORT"]),
        ("http: 127.0.0.1:70000\n", ["key http: '127.0.0.1:70000' is not valid"]),
        ("metrics: 9464\n", ["key metrics: '9464' is not valid; allowed: HOST:PORT"]),
        ("socket: 'a:b:c'\n", ["key socket: 'a:b:c' is not valid; allowed: a path, unix:PATH, HOST:PORT, or none"]),
        ("log-level: loud\n", ["key log-level: 'loud' is not valid; allowed: trace, debug, info, notice, warning, error, critical"]),
        // Categories.
        ("categories: [a]\n", ["line 1, key categories: must be a mapping of category identifiers"]),
        ("categories:\n  m: [a]\n", ["line 2, key categories.m: must be a mapping with actions"]),
        (
            "categories:\n  m:\n    dismiss: true\n",
            ["line 3, key categories.m: unknown key 'dismiss'; the keys are custom-dismiss-action, actions"]
        ),
        (
            "categories:\n  m:\n    custom-dismiss-action: sometimes\n",
            ["line 3, key categories.m.custom-dismiss-action: 'sometimes' is not valid; allowed: true or false"]
        ),
        ("categories:\n  m:\n    actions: archive\n", ["line 3, key categories.m.actions: must be a list of actions"]),
        ("categories:\n  m:\n    actions:\n      - {title: Archive}\n", ["line 4, key categories.m.actions[0].identifier: is missing"]),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: ''}\n",
            ["line 4, key categories.m.actions[0].title: '' is not valid; allowed: a non-empty string"]
        ),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: A, colour: red}\n",
            ["line 4, key categories.m.actions[0]: unknown key 'colour'"]
        ),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: A, destructive: very}\n",
            ["key categories.m.actions[0].destructive: 'very' is not valid"]
        ),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: A, text-input: Send}\n",
            ["key categories.m.actions[0].text-input: must be a mapping"]
        ),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: A, text-input: {hint: x}}\n",
            ["key categories.m.actions[0].text-input: unknown key 'hint'"]
        ),
        (
            "categories:\n  m:\n    actions:\n      - {identifier: a, title: A}\n      - {identifier: a, title: B}\n",
            ["line 3, key categories.m.actions: the action identifier 'a' is given more than once"]
        ),
        // Malformed files.
        ("http: [127.0.0.1:1\n", ["herald: config file FILE, line 2, column 1: not valid YAML:"]),
        ("http: a\n  b: c\n", ["herald: config file FILE, line 2", "not valid YAML"]),
        ("echo: true\necho: false\n", ["herald: config file FILE, line 1: the key echo is given more than once"]),
        ("- http\n- socket\n", ["herald: config file FILE: the top level must be a mapping"]),
        ("just words\n", ["herald: config file FILE: the top level must be a mapping"]),
        ("? [a, b]\n: c\n", ["herald: config file FILE, line 1: a key must be a plain name"]),
    ]

    @Test("categories and their actions from the config file, every option")
    func categories() throws {
        let yaml = """
            echo: true
            categories:
              message:
                custom-dismiss-action: yes
                actions:
                  - {identifier: archive, title: Archive, destructive: true, authentication-required: true}
                  - {identifier: open, title: Open, foreground: true}
                  - identifier: reply
                    title: Reply
                    text-input: {button-title: Send, placeholder: Your answer}
                  - {identifier: note, title: Note, text-input: }
              plain:
                actions: []
            """
        let settings = try resolve(yaml).settings
        #expect(settings.echo)
        #expect(
            settings.categories == [
                NotificationCategory(
                    identifier: "message",
                    actions: [
                        NotificationAction(identifier: "archive", title: "Archive", options: [.destructive, .authenticationRequired]),
                        NotificationAction(identifier: "open", title: "Open", options: .foreground),
                        NotificationAction(
                            identifier: "reply", title: "Reply", textInputPlaceholder: "Your answer", textInputButtonTitle: "Send"),
                        NotificationAction(identifier: "note", title: "Note", textInputPlaceholder: ""),
                    ],
                    options: .customDismissAction),
                NotificationCategory(identifier: "plain", actions: []),
            ])
    }

    @Test("a bad config file names the file, the line, the key, the value and what is allowed", arguments: 0..<badFiles.count)
    func badFile(_ index: Int) throws {
        let (yaml, expected) = Self.badFiles[index]
        let message = try #require(failure(yaml), "\(yaml) was accepted")
        for part in expected { #expect(message.contains(part), "\(message)") }
        #expect(!message.contains("\n"), "one line: \(message)")
    }

    @Test("a missing, unreadable or non-UTF-8 config file stops the start, naming it")
    func unreadableFile() throws {
        do {
            _ = try ServeConfiguration.resolve(file: "/nonexistent/herald.yaml", environment: [:], flags: [])
            Issue.record("a missing file was accepted")
        } catch let error as ConfigurationError {
            #expect(error.message == "herald: cannot read the config file /nonexistent/herald.yaml: No such file or directory")
        }
        do {
            _ = try ServeConfiguration.resolve(file: NSTemporaryDirectory(), environment: [:], flags: [])
            Issue.record("a directory was accepted")
        } catch let error as ConfigurationError {
            #expect(error.message.contains("cannot read the config file \(NSTemporaryDirectory())"), "\(error.message)")
        }
        // "http: " and a byte that is never UTF-8.
        #expect(failure(bytes: Data("http: ".utf8) + [0xFF, 0x0A]) == "herald: config file FILE: not UTF-8 text")
    }

    @Test("a bad environment variable names the variable, the value and what is allowed")
    func badEnvironment() throws {
        #expect(
            failure(nil, environment: ["HERALD_SHUTDOWN_GRACE": "ten"])
                == "herald: environment HERALD_SHUTDOWN_GRACE: 'ten' is not valid; allowed: a whole number of seconds from 0 to 86400")
        #expect(
            failure(nil, environment: ["HERALD_ECHO": "maybe"])
                == "herald: environment HERALD_ECHO: 'maybe' is not valid; allowed: true or false")
        #expect(
            failure(nil, environment: ["HERALD_HTTP": "nonsense"])?.hasPrefix(
                "herald: environment HERALD_HTTP: 'nonsense' is not valid; allowed: HOST:PORT") == true)
        #expect(
            failure(nil, environment: ["HERALD_ANALYTICS_RETENTION_DAYS": "-3"])?.hasPrefix(
                "herald: environment HERALD_ANALYTICS_RETENTION_DAYS: '-3'") == true)
        // The environment is checked even when a flag overrides it: a bad value is a mistake either way.
        #expect(failure(nil, environment: ["HERALD_LOG_LEVEL": "loud"], flags: [("log-level", .string("debug"), "--log-level")]) != nil)
    }

    @Test("a bad flag value names the flag, the value and what is allowed")
    func badFlag() throws {
        #expect(
            failure(nil, flags: [("http", .string("nonsense"), "--http")])?.hasPrefix(
                "herald: flag --http: 'nonsense' is not valid; allowed: HOST:PORT") == true)
        #expect(
            failure(nil, flags: [("shutdown-grace", .integer(-1), "--shutdown-grace")])
                == "herald: flag --shutdown-grace: '-1' is not valid; allowed: a whole number of seconds from 0 to 86400")
        #expect(
            failure(nil, flags: [("plugins", .list(["/a.so", ""]), "--plugin")])
                == "herald: flag --plugin: '' is not valid; allowed: \(ServeOption.plugins.allowed)")
        #expect(failure(nil, flags: [("log-level", .string("loud"), "--log-level")])?.hasPrefix("herald: flag --log-level: 'loud'") == true)
    }

    @Test("an unknown HERALD_ variable is a warning with the nearest name, not an error; the secret and HERALD_CONFIG are known")
    func unknownEnvironment() throws {
        let warnings = try resolve(environment: ["HERALD_HTTPS": "x", "HERALD_AUTH_TOKEN": "s", "HERALD_CONFIG": "/x", "PATH": "/bin"])
            .warnings
        #expect(warnings == ["environment HERALD_HTTPS is not a setting of herald serve and is ignored (did you mean HERALD_HTTP?)"])
    }

    @Test("--print-config's output is a config file that reads back to the same settings")
    func renderedReadsBack() throws {
        let (settings, _, _) = try resolve(
            """
            http: none
            project-id: "has space: and colon"
            plugins: [/a.so, "/b c.so"]
            analytics-retention-days: 0
            categories:
              "chat: direct":
                custom-dismiss-action: true
                actions:
                  - {identifier: reply, title: "Reply, now", text-input: {button-title: Send, placeholder: "Say: hi"}}
                  - {identifier: note, title: Note, text-input: }
                  - {identifier: delete, title: Delete, destructive: true, authentication-required: true, foreground: true}
              empty:
                actions: []
            """, environment: ["HERALD_SENDER_ID": "123", "HERALD_AUTH_TOKEN": "secret"], flags: [("echo", .boolean(true), "--echo")])
        let text = settings.rendered(environment: ["HERALD_AUTH_TOKEN": "secret"])
        #expect(text.contains("http: none  # config file"))
        #expect(text.contains("sender-id: 123  # environment HERALD_SENDER_ID"))
        #expect(text.contains("echo: true  # flag --echo"))
        #expect(text.contains("socket: herald-data/herald.sock  # default (herald.sock in data-dir)"))
        #expect(text.contains("# auth-token-file: not set; the bearer secret comes from HERALD_AUTH_TOKEN"))
        #expect(!text.contains("secret\n") && !text.hasSuffix("secret"), "the secret itself is never printed")
        let again = try resolve(text).settings
        for option in ServeOption.all where option.key != "socket" {
            #expect(again.values[option.key] == settings.values[option.key], "\(option.key)")
        }
        #expect(again.socket == settings.socket)
        #expect(again.categories == settings.categories)
        #expect(settings.categories.count == 2)
    }

    @Test("the edit distance and the suggestion")
    func suggestions() {
        #expect(ConfigurationSchema.editDistance("kitten", "sitting") == 3)
        #expect(ConfigurationSchema.editDistance("", "abc") == 3)
        #expect(ConfigurationSchema.nearest(to: "data-directory", among: ServeOption.all.map(\.key)) == nil)
        #expect(ConfigurationSchema.nearest(to: "datadir", among: ServeOption.all.map(\.key)) == "data-dir")
        #expect(ConfigurationSchema.nearest(to: "loglevel", among: ServeOption.all.map(\.key)) == "log-level")
    }

    @Test(
        "NATS servers repeatable and comma-separated; replicas 3 with three servers unless set; stored topic delivery; bad values refused")
    func natsCluster() throws {
        let three = try resolve(flags: [("nats-servers", .list(["nats://a:4222,nats://b:4222", "nats://c:4222"]), "--nats-server")])
            .settings
        #expect(three.natsServers == ["nats://a:4222", "nats://b:4222", "nats://c:4222"])
        #expect(try three.natsOptions(authToken: nil)?.effectiveReplicas == 3)
        let one = try resolve("nats-servers: [nats://a:4222]\nnats-topic-delivery: stored").settings.natsOptions(authToken: nil)
        #expect(one?.effectiveReplicas == 1)
        #expect(one?.topicDelivery == .stored)
        let set = try resolve("nats-servers: [nats://a:4222, nats://b:4222, nats://c:4222]\nnats-replicas: 1").settings
        #expect(try set.natsOptions(authToken: nil)?.effectiveReplicas == 1)
        #expect(failure("nats-replicas: 7")?.contains("nats-replicas") == true)
        #expect(failure(nil, flags: [("nats-servers", .list(["nats://a:4222,http://b"]), "--nats-server")]) != nil)
    }
}
