import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldDaemon

/// `herald serve`'s settings come from one schema (each plugin's section): every setting through its flag, its
/// variable, the config file and `--print-config`, and bad values of every kind refused with where they came from.
@Suite("herald serve configuration: the schema")
struct ServeSchemaTests {
    /// A valid value, not the default, of every setting that is not a boolean (a boolean's sample is the opposite
    /// of its default). A setting added to the schema without a sample here fails ``everySettingHasASample``.
    static let samples: [String: String] = [
        "http": "127.0.0.1:9001", "auth-token-file": "/run/secrets/herald", "apns-keys": "ABC123:TEAM42:/keys/a.p8",
        "socket": "/tmp/herald-schema.sock", "project-id": "schema-project", "sender-id": "42", "data-dir": "/tmp/schema-data",
        "presenter": "none", "disable-plugins": "ImageAttachment", "desktop-app-name": "Weather", "desktop-app-icon": "weather-clear",
        "desktop-entry": "org.example.Weather",
        "log-level": "debug", "shutdown-grace": "7", "max-replays": "5", "max-in-flight": "64", "content-modifier-deadline": "12",
        "background-fetch-deadline": "45",
        "plugins": "/usr/lib/herald/a.so", "tls-cert": "/etc/herald/cert.pem", "tls-key": "/etc/herald/key.pem",
        "tls-client-ca": "/etc/herald/ca.pem", "tls-sni-certs": "/etc/herald/b.pem:/etc/herald/b-key.pem",
        "unifiedpush-endpoint-url": "https://push.example/up/", "unifiedpush-call-timeout": "20",
        "analytics-retention-days": "30",
        "metrics": "127.0.0.1:9464", "delivery-metrics": "/var/log/herald/delivery.jsonl", "exec-fetch-command": "/bin/true",
        "exec-fetch-arguments": "-x", "exec-fetch-environment": "A=b c", "exec-fetch-timeout": "9", "exec-fetch-concurrency": "2",
        "token-webhook-url": "https://app.example/token", "token-webhook-secret-file": "/run/secrets/webhook",
        "token-webhook-ca": "/etc/ssl/app.pem", "token-webhook-max-attempts": "4", "image-attachment-ca": "/etc/ssl/images.pem",
        "image-attachment-max-bytes": "1000", "nats-servers": "nats://a:4222", "nats-replicas": "3", "nats-credentials": "/c.creds",
        "nats-token-file": "/run/secrets/nats", "nats-user": "herald-fleet", "nats-password-file": "/run/secrets/nats-password",
        "nats-tls-ca": "/nats/ca.pem", "nats-tls-cert": "/nats/cert.pem",
        "nats-tls-key": "/nats/key.pem", "nats-stream": "STREAM", "nats-consumer": "consumer", "nats-topic-delivery": "stored",
        "nats-ack-wait": "5", "nats-max-ack-pending": "10", "nats-max-deliver": "5", "nats-stream-max-age-days": "2",
        "nats-stream-max-messages": "100", "nats-stream-max-bytes": "1000", "nats-max-held-messages": "10",
        "nats-ping-interval": "3", "nats-max-pings-out": "4",
    ]

    /// The sample's text (as a flag or variable gives it) and the value it is.
    static func sample(_ setting: ServeOption) -> (text: String, value: SettingValue) {
        if setting.kind == .boolean {
            let flag = setting.defaultValue != .boolean(true)
            return ("\(flag)", .boolean(flag))
        }
        let text = samples[setting.key] ?? ""
        switch setting.kind {
        case .integer: return (text, .integer(Int(text) ?? 0))
        case .list: return (text, .list([text]))
        default: return (text, .string(text))
        }
    }

    /// The sample as the config file writes it.
    static func yaml(_ setting: ServeOption) -> String {
        let (text, value) = sample(setting)
        switch value {
        case .list: return "[\"\(text)\"]"
        case .string: return "\"\(text)\""
        default: return text
        }
    }

    /// Resolves `yaml` (when given) as the config file, with `environment` and `arguments` as flags.
    static func resolve(
        _ yaml: String? = nil, environment: [String: String] = [:], arguments: [String] = []
    ) throws -> (settings: ServeSettings, file: String) {
        let path = NSTemporaryDirectory() + "herald-schema-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).yaml"
        if let yaml { _ = FileManager.default.createFile(atPath: path, contents: Data(yaml.utf8)) }
        defer { if yaml != nil { try? FileManager.default.removeItem(atPath: path) } }
        let flags = try ServeOption.schema.parse(arguments: arguments).map { ($0.key, $0.value, $0.flag) }
        let settings = try ServeConfiguration.resolve(file: yaml == nil ? nil : path, environment: environment, flags: flags).settings
        return (settings, path)
    }

    /// The message resolving throws, `FILE` for the config file's path; `nil` when it does not throw.
    static func failure(_ yaml: String? = nil, environment: [String: String] = [:], arguments: [String] = []) -> String? {
        let path = NSTemporaryDirectory() + "herald-schema-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).yaml"
        if let yaml { _ = FileManager.default.createFile(atPath: path, contents: Data(yaml.utf8)) }
        defer { if yaml != nil { try? FileManager.default.removeItem(atPath: path) } }
        do {
            let flags = try ServeOption.schema.parse(arguments: arguments).map { ($0.key, $0.value, $0.flag) }
            _ = try ServeConfiguration.resolve(file: yaml == nil ? nil : path, environment: environment, flags: flags)
            return nil
        } catch let error as ConfigurationError {
            return error.message.replacingOccurrences(of: path, with: "FILE")
        } catch {
            return "\(error)"
        }
    }

    @Test("every setting of the schema has a sample, and its sample is allowed and not its default")
    func everySettingHasASample() {
        for setting in ServeOption.all {
            let (_, value) = Self.sample(setting)
            #expect(setting.kind == .boolean || Self.samples[setting.key] != nil, "no sample for \(setting.key)")
            #expect(setting.isAllowed(value), "\(setting.key)")
            #expect(value != setting.defaultValue, "\(setting.key)")
        }
        #expect(Set(Self.samples.keys).isSubset(of: Set(ServeOption.all.map(\.key))), "a sample of a setting that is gone")
    }

    @Test("every setting through its flag (--flag value, --flag=value, a boolean's --flag / --no-flag), its source the flag")
    func everySettingByFlag() throws {
        for setting in ServeOption.all {
            let (text, value) = Self.sample(setting)
            let forms: [[String]]
            if case .boolean(let on) = value {
                forms = [[on ? setting.flag : setting.negatedFlag], ["\(setting.flag)=\(on)"]]
            } else {
                forms = [[setting.flag, text], ["\(setting.flag)=\(text)"]]
            }
            for arguments in forms {
                let settings = try Self.resolve(arguments: arguments).settings
                #expect(settings.values[setting.key] == value, "\(arguments)")
                #expect(settings.sources[setting.key] == .flag(arguments[0].split(separator: "=")[0].description), "\(arguments)")
            }
        }
    }

    @Test("every setting through its HERALD_ variable and through the config file, each source recorded")
    func everySettingByEnvironmentAndFile() throws {
        for setting in ServeOption.all {
            let (text, value) = Self.sample(setting)
            let byEnvironment = try Self.resolve(environment: [setting.environmentName: text]).settings
            #expect(byEnvironment.values[setting.key] == value, "\(setting.environmentName)")
            #expect(byEnvironment.sources[setting.key] == .environment(setting.environmentName))
            let (byFile, file) = try Self.resolve("# one setting\n\(setting.key): \(Self.yaml(setting))\n")
            #expect(byFile.values[setting.key] == value, "\(setting.key)")
            #expect(byFile.sources[setting.key] == .file(path: file, line: 2))
        }
    }

    @Test("every setting in --print-config: its value (credentials in a URL hidden) and its source, reading back the same")
    func everySettingPrinted() throws {
        var arguments: [String] = []
        for setting in ServeOption.all {
            let (text, value) = Self.sample(setting)
            if case .boolean(let on) = value {
                arguments.append(on ? setting.flag : setting.negatedFlag)
            } else {
                arguments += [setting.flag, text]
            }
        }
        let settings = try Self.resolve(arguments: arguments).settings
        let printed = settings.rendered(environment: [:])
        let lines = printed.split(separator: "\n").map { $0.drop { $0 == " " } }
        for setting in ServeOption.all {
            let line = lines.first { $0.hasPrefix("\(setting.key): ") }
            #expect(
                line?.hasSuffix(
                    "# flag \(setting.kind == .boolean && Self.sample(setting).value == .boolean(false) ? setting.negatedFlag : setting.flag)"
                ) == true, "\(printed)")
        }
        let again = try Self.resolve(printed).settings
        for setting in ServeOption.all { #expect(again.values[setting.key] == settings.values[setting.key], "\(setting.key)") }
        let withPassword = try Self.resolve(arguments: ["--nats-server", "nats://user:hunter2@a:4222"]).settings
        #expect(!withPassword.rendered(environment: [:]).contains("hunter2"))
    }

    @Test("every plugin's setting in its section of the file (TokenWebhook: and the key below), read as at the top level")
    func everySettingInItsSection() throws {
        var checked = 0
        for section in ServeOption.schema.sections {
            guard let name = section.fileSection else { continue }
            for setting in section.settings {
                let (settings, file) = try Self.resolve("# a section\n\(name):\n  \(setting.key): \(Self.yaml(setting))\n")
                #expect(settings.values[setting.key] == Self.sample(setting).value, "\(name).\(setting.key)")
                #expect(settings.sources[setting.key] == .file(path: file, line: 3))
                checked += 1
            }
        }
        #expect(checked == ServeOption.all.count - ServeOption.daemonSection.settings.count)
        // The daemon's own settings have no section; flat keys and sections mix; a section with every key commented
        // out is empty.
        #expect(ServeOption.daemonSection.fileSection == nil)
        let mixed = try Self.resolve(
            """
            log-level: debug
            token-webhook-url: https://app.example/token
            ExecFetchWorker:
              exec-fetch-command: /bin/true
              exec-fetch-timeout: 9
            NATSReceiver:
              # nats-servers: [nats://a:4222]
            """
        ).settings
        #expect(mixed.values["log-level"] == .string("debug"))
        #expect(mixed.values["token-webhook-url"] == .string("https://app.example/token"))
        #expect(mixed.values["exec-fetch-timeout"] == .integer(9))
        #expect(mixed.execFetchOptions?.command == "/bin/true")
        #expect(mixed.natsServers.isEmpty)
    }

    @Test(
        "sections: a key given both ways names both lines; a key in the wrong section names its section; a typo, a bad value, not a mapping"
    )
    func sectionErrors() {
        #expect(
            Self.failure("token-webhook-url: http://a/\nTokenWebhook:\n  token-webhook-url: http://b/\n")
                == "herald: config file FILE, line 3, key TokenWebhook.token-webhook-url: given twice, also at line 1 (token-webhook-url); keep one"
        )
        #expect(
            Self.failure("TokenWebhook:\n  token-webhook-max-attempts: 3\ntoken-webhook-max-attempts: 4\n")
                == "herald: config file FILE, line 3, key token-webhook-max-attempts: given twice, also at line 2 (TokenWebhook.token-webhook-max-attempts); keep one"
        )
        let tokenWebhookKeys = "token-webhook-url, token-webhook-secret-file, token-webhook-ca, token-webhook-max-attempts"
        #expect(
            Self.failure("TokenWebhook:\n  nats-user: fleet\n")
                == "herald: config file FILE, line 2, key TokenWebhook.nats-user: unknown key 'nats-user' in section TokenWebhook: it belongs in section NATSReceiver; the keys of TokenWebhook are \(tokenWebhookKeys)"
        )
        #expect(
            Self.failure("TokenWebhook:\n  log-level: debug\n")?.contains(
                "unknown key 'log-level' in section TokenWebhook: it belongs at the top level;")
                == true)
        #expect(
            Self.failure("TokenWebhook:\n  token-webhook-ulr: http://a/\n")?.contains(
                "unknown key 'token-webhook-ulr' in section TokenWebhook (did you mean 'token-webhook-url'?);") == true)
        #expect(
            Self.failure("TokenWebhook:\n  nats-usr: fleet\n")?.contains(
                "unknown key 'nats-usr' in section TokenWebhook (did you mean 'nats-user', in section NATSReceiver?);") == true)
        #expect(
            Self.failure("ExecFetchWorker:\n  exec-fetch-timeout: ten\n")
                == "herald: config file FILE, line 2, key ExecFetchWorker.exec-fetch-timeout: 'ten' is not valid; allowed: a whole number of seconds from 1 to 3600"
        )
        #expect(
            Self.failure("DesktopPresenter:\n  desktop-app-name: ''\n")?.hasPrefix(
                "herald: config file FILE, line 2, key DesktopPresenter.desktop-app-name: '' is not valid") == true)
        #expect(
            Self.failure("TokenWebhook: https://app.example/token\n")
                == "herald: config file FILE, line 1, key TokenWebhook: 'https://app.example/token' is not valid; allowed: a mapping of TokenWebhook's keys to their values (\(tokenWebhookKeys))"
        )
        #expect(
            Self.failure("token-webhook:\n  token-webhook-url: http://a/\n")?.hasPrefix(
                "herald: config file FILE, line 1: unknown key 'token-webhook' (did you mean 'TokenWebhook'?); the keys are project-id,")
                == true)
        #expect(Self.failure("TokenWebhok: {}\n")?.contains("unknown key 'TokenWebhok' (did you mean 'TokenWebhook'?)") == true)
        #expect(Self.failure("TokenWebhook: {}\nTokenWebhook: {}\n")?.contains("the key TokenWebhook is given more than once") == true)
    }

    @Test("--print-config writes each plugin's settings in its section, the daemon's at the top level, and reads back the same")
    func printedInSections() throws {
        let settings = try Self.resolve("token-webhook-url: https://app.example/token\nlog-level: debug\n").settings
        let printed = settings.rendered(environment: [:])
        let lines = printed.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.hasPrefix("log-level: debug  # config file ") }, "\(printed)")
        let header = try #require(lines.firstIndex { $0.hasPrefix("TokenWebhook:  # ") }, "\(printed)")
        #expect(lines[header + 1].hasPrefix("  token-webhook-url: https://app.example/token  # config file "), "\(printed)")
        for section in ServeOption.schema.sections {
            for setting in section.settings {
                let line = try #require(
                    lines.first { $0.drop { $0 == " " }.drop { $0 == "#" }.drop { $0 == " " }.hasPrefix("\(setting.key): ") })
                #expect(line.hasPrefix("  ") == (section.fileSection != nil), "\(line)")
            }
        }
        // The default socket is printed as the path it stands for, which reads back as set.
        var again = try Self.resolve(printed).settings.values
        again["socket"] = nil
        #expect(again == settings.values)
    }

    @Test("lists: a flag repeated adds items in order; the environment splits at the setting's separator")
    func lists() throws {
        let settings = try Self.resolve(arguments: ["--plugin", "/a.so", "--echo", "--plugin=/b.so", "--exec-fetch-argument", "-v"])
            .settings
        #expect(settings.plugins == ["/a.so", "/b.so"])
        #expect(settings.sources["plugins"] == .flag("--plugin"))
        #expect(settings.values["exec-fetch-arguments"] == .list(["-v"]))
        #expect(
            try Self.resolve(environment: ["HERALD_EXEC_FETCH_ENVIRONMENT": "A=1,B=2"]).settings.values["exec-fetch-environment"]
                == .list(["A=1", "B=2"]))
        #expect(try Self.resolve(environment: ["HERALD_PLUGINS": "/a.so:/b.so"]).settings.plugins == ["/a.so", "/b.so"])
        // A negative number is a value, not a flag.
        #expect(try Self.resolve(arguments: ["--nats-max-deliver", "-1"]).settings.values["nats-max-deliver"] == .integer(-1))
    }

    /// Values no setting of the kind allows.
    static func badValues(_ setting: ServeOption) -> [String] {
        switch setting.kind {
        case .integer(let range): ["ten", "2.5"] + (range.upperBound < Int.max ? ["\(range.upperBound + 1)"] : [])
        case .boolean: ["maybe"]
        case .oneOf: ["loud"]
        case .string, .list: ["", "no such thing|"].filter { !setting.accepts($0) }
        }
    }

    @Test("a slip in a one-of setting's value is answered with the nearest word, from the flag, the variable and the file")
    func oneOfSuggestion() throws {
        for (key, slip, nearest) in [("presenter", "desktp", "desktop"), ("log-level", "warnin", "warning")] {
            let setting = try #require(ServeOption.all.first { $0.key == key })
            let suffix = "'\(slip)' is not valid; allowed: \(setting.allowed) (did you mean '\(nearest)'?)"
            #expect(Self.failure(arguments: ["\(setting.flag)=\(slip)"]) == "herald: flag \(setting.flag): \(suffix)")
            #expect(
                Self.failure(environment: [setting.environmentName: slip]) == "herald: environment \(setting.environmentName): \(suffix)")
            #expect(Self.failure("\(key): \(slip)\n") == "herald: config file FILE, line 1, key \(key): \(suffix)")
        }
    }

    @Test("a bad value of every setting is refused from the flag, the variable and the file, naming where and what is allowed")
    func badValuesRefused() throws {
        var checked = 0
        for setting in ServeOption.all {
            for bad in Self.badValues(setting) {
                checked += 1
                let flag = Self.failure(arguments: ["\(setting.flag)=\(bad)"])
                #expect(flag == "herald: flag \(setting.flag): '\(bad)' is not valid; allowed: \(setting.allowed)", "\(setting.key)")
                let file = Self.failure("\(setting.key): \"\(bad)\"\n")
                #expect(
                    file == "herald: config file FILE, line 1, key \(setting.key): '\(bad)' is not valid; allowed: \(setting.allowed)",
                    "\(file ?? "accepted")")
                // An empty variable counts as not set.
                guard !bad.isEmpty else { continue }
                #expect(
                    Self.failure(environment: [setting.environmentName: bad])
                        == "herald: environment \(setting.environmentName): '\(bad)' is not valid; allowed: \(setting.allowed)")
            }
        }
        #expect(checked > ServeOption.all.count)
    }

    @Test("unknown flags and keys: refused with the nearest known one; a value missing or given to --no-flag")
    func unknownFlags() {
        #expect(Self.failure(arguments: ["--htp", "127.0.0.1:1"]) == "herald: unknown flag '--htp' (did you mean '--http'?); see --help")
        #expect(Self.failure(arguments: ["--data-directory=x"]) == "herald: unknown flag '--data-directory'; see --help")
        #expect(Self.failure(arguments: ["--no-ecko"]) == "herald: unknown flag '--no-ecko' (did you mean '--no-echo'?); see --help")
        #expect(Self.failure(arguments: ["--no-http"])?.hasPrefix("herald: unknown flag '--no-http'") == true)
        #expect(
            Self.failure(arguments: ["--shutdown-grace"])
                == "herald: flag --shutdown-grace: a value is missing; allowed: a whole number of seconds from 0 to 86400")
        #expect(Self.failure(arguments: ["stray"]) == "herald: unexpected argument 'stray'")
        #expect(Self.failure("nats-server: [nats://a:1]\n")?.contains("unknown key 'nats-server' (did you mean 'nats-servers'?)") == true)
    }

    @Test("the settings reload applies live are the ones the schema marks live")
    func liveKeys() {
        #expect(
            ServeOption.all.filter(\.isLive).map(\.key) == [
                "log-level", "exec-fetch-timeout", "exec-fetch-concurrency", "token-webhook-max-attempts",
            ])
    }

    @Test("each bundled plugin's section is in the schema, keys and flags unique")
    func sections() {
        let names = ServeOption.schema.sections.map(\.name)
        for name in [
            "HTTPReceiver", "SocketReceiver", "herald serve", "DesktopPresenter", "EchoHandler", "UnifiedPush", "AnalyticsStore",
            "PrometheusMetrics",
            "JSONLExport", "ExecFetchWorker", "TokenWebhook", "ImageAttachment", "NATSReceiver",
        ] {
            #expect(names.contains(name), "\(name)")
        }
        #expect(Set(ServeOption.all.map(\.key)).count == ServeOption.all.count)
        #expect(Set(ServeOption.all.map(\.environmentName)).count == ServeOption.all.count)
    }

    @Test("plugin-settings: each dynamic plugin's section as JSON, kept through --print-config; a path plugins does not name refused")
    func pluginSettings() throws {
        let yaml = """
            plugins: [/usr/lib/herald/libweather.so, /b.so]
            plugin-settings:
              /usr/lib/herald/libweather.so:
                cache: /var/lib/weather.json
                interval: 600
                ratio: 0.5
                enabled: yes
                quoted: "600"
                nothing: ~
                units: [metric, 3]
                nested: {a: {b: true}}
            """
        let settings = try Self.resolve(yaml).settings
        let section = try #require(settings.pluginSettings.first)
        #expect(section.path == "/usr/lib/herald/libweather.so")
        #expect(
            JSONValue.object(section.settings).jsonString()
                == #"{"cache":"/var/lib/weather.json","interval":600,"ratio":0.5,"enabled":true,"quoted":"600","nothing":null,"units":["metric",3],"nested":{"a":{"b":true}}}"#
        )
        let printed = settings.rendered(environment: [:])
        #expect(printed.contains("plugin-settings:\n  /usr/lib/herald/libweather.so: {"), "\(printed)")
        #expect(try Self.resolve(printed).settings.pluginSettings.map(\.settings) == settings.pluginSettings.map(\.settings))
        // The plugins may come from a flag: the check is made once every source is read.
        #expect(
            Self.failure("plugin-settings:\n  /a.so: {x: 1}\n", arguments: ["--plugin", "/a.so"]) == nil)
        #expect(
            Self.failure("plugins: [/usr/lib/herald/libweather.so]\nplugin-settings:\n  /usr/lib/herald/libwether.so: {x: 1}\n")
                == "herald: config file FILE, line 3, key plugin-settings./usr/lib/herald/libwether.so: not a plugin plugins names (did you mean '/usr/lib/herald/libweather.so'?)"
        )
        #expect(
            Self.failure("plugins: [/a.so]\nplugin-settings:\n  /a.so: [x]\n")
                == "herald: config file FILE, line 3, key plugin-settings./a.so: must be a mapping of the plugin's settings")
        #expect(
            Self.failure("plugin-settings: [/a.so]\n")
                == "herald: config file FILE, line 1, key plugin-settings: must be a mapping of plugin paths (as plugins names them) to their settings"
        )
        #expect(
            Self.failure("plugins: [/a.so]\nplugin-settings:\n  /a.so: {1: x, '1': y}\n")?.contains("the key 1 is given more than once")
                == true)
    }

    @Test("a secret setting's value is never printed: --print-config says it is set; the help and the reference say it is a secret")
    func secrets() {
        let secret = ServeOption("api-key", .string, default: nil, "none", allowed: "a key", help: "An API key.", secret: true)
        let schema = ConfigurationSchema([ConfigurationSection(name: "Example", summary: "An example.", settings: [secret])])
        var settings = ServeSettings(schema: schema)
        settings.set(secret, .string("hunter2"), from: .environment("HERALD_API_KEY"))
        let printed = settings.rendered(environment: [:])
        #expect(printed.contains("# api-key: set, not shown (a secret)  # environment HERALD_API_KEY"), "\(printed)")
        #expect(!printed.contains("hunter2"))
        #expect(schema.helpText().contains("; a secret."))
        #expect(schema.markdownReference(title: "T", introduction: "I").contains("An API key. (a secret: never printed)"))
    }
}
