import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldDaemon

/// The schema as the `herald` binary uses it: flags parsed from it, `--help` and `--print-config` derived from it,
/// errors naming their source, and the committed settings reference in step with it.
@Suite("herald serve configuration: the schema, in the binary")
struct ServeSchemaCommandTests {
    @Test("a representative set by flag, variable and file, through --print-config with each source")
    func printConfig() async throws {
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            try """
            TokenWebhook:
              token-webhook-url: https://app.example/token
            nats-servers:
              - nats://user:hunter2@a:4222
              - nats://b:4222
            image-attachment-max-bytes: 2048
            presenter: none
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let run = try await runHerald(
                [
                    "serve", "--config", file, "--print-config", "--http=127.0.0.1:0", "--shutdown-grace", "3", "--no-analytics-store",
                    "--plugin", "/a.so", "--plugin=/b.so", "--nats-max-deliver", "-1", "--exec-fetch-command", "/bin/true",
                    "--exec-fetch-argument", "-v", "--exec-fetch-argument", "two words", "--echo", "--presenter=log",
                ],
                environment: ["HERALD_LOG_LEVEL": "debug", "HERALD_EXEC_FETCH_ENVIRONMENT": "A=1,B=2", "HERALD_NATS_ACK_WAIT": "9"])
            #expect(run.status == 0, "\(run.error)")
            let lines = run.output.split(separator: "\n").map { String($0.drop { $0 == " " }) }
            for expected in [
                "http: 127.0.0.1:0  # flag --http", "shutdown-grace: 3  # flag --shutdown-grace",
                "analytics-store: false  # flag --no-analytics-store", "plugins: [/a.so, /b.so]  # flag --plugin",
                "nats-max-deliver: -1  # flag --nats-max-deliver", "exec-fetch-command: /bin/true  # flag --exec-fetch-command",
                "exec-fetch-arguments: [\"-v\", \"two words\"]  # flag --exec-fetch-argument", "echo: true  # flag --echo",
                "presenter: log  # flag --presenter", "log-level: debug  # environment HERALD_LOG_LEVEL",
                "exec-fetch-environment: [\"A=1\", \"B=2\"]  # environment HERALD_EXEC_FETCH_ENVIRONMENT",
                "nats-ack-wait: 9  # environment HERALD_NATS_ACK_WAIT",
                "token-webhook-url: https://app.example/token  # config file \(file), line 2",
                "image-attachment-max-bytes: 2048  # config file \(file), line 6", "sender-id: herald  # default",
            ] {
                #expect(lines.contains(expected), "\(expected) in \(run.output)")
            }
            #expect(lines.contains { $0.hasPrefix("nats-servers: [") && $0.hasSuffix("# config file \(file), line 3") })
            // Printed in sections: each plugin's settings indented under its name.
            #expect(
                run.output.contains("\nTokenWebhook:  # The registration token POSTed to the app server.\n  token-webhook-url: "),
                "\(run.output)")
            #expect(run.output.contains("\nlog-level: debug  # environment HERALD_LOG_LEVEL\n"), "\(run.output)")
            #expect(!run.output.contains("hunter2"), "a password in a server URL is never printed")
        }
    }

    @Test("an unknown flag, a bad value, an unknown key: exit 64, one line naming the source, the nearest name", argumentCheckingOnly)
    func errors() async throws {
        let unknown = try await runHerald(["serve", "--htp", "127.0.0.1:0", "--print-config"])
        #expect(unknown.status == 64)
        #expect(unknown.error == "herald: unknown flag '--htp' (did you mean '--http'?); see --help\n")
        let bad = try await runHerald(["serve", "--print-config", "--max-replays", "0"])
        #expect(bad.status == 64)
        #expect(bad.error == "herald: flag --max-replays: '0' is not valid; allowed: a whole number from 1 to 1000\n")
        let boolean = try await runHerald(["serve", "--print-config", "--gateway=perhaps"])
        #expect(boolean.error == "herald: flag --gateway: 'perhaps' is not valid; allowed: true or false\n")
        let variable = try await runHerald(["serve", "--print-config"], environment: ["HERALD_PRESENTER": "screen"])
        #expect(variable.status == 64)
        #expect(variable.error == "herald: environment HERALD_PRESENTER: 'screen' is not valid; allowed: desktop, log or none\n")
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            try "echo: true\nexec-fetch-timeout: 9999\n".write(toFile: file, atomically: true, encoding: .utf8)
            let range = try await runHerald(["serve", "--config", file, "--print-config"])
            #expect(range.status == 64)
            #expect(
                range.error
                    == "herald: config file \(file), line 2, key exec-fetch-timeout: '9999' is not valid; allowed: a whole number of seconds from 1 to 3600\n"
            )
            try "token-webhook-urls: https://x\n".write(toFile: file, atomically: true, encoding: .utf8)
            let key = try await runHerald(["serve", "--config", file, "--print-config"])
            #expect(key.status == 64)
            #expect(
                key.error.hasPrefix(
                    "herald: config file \(file), line 1: unknown key 'token-webhook-urls' (did you mean 'token-webhook-url'?)"))
        }
    }

    @Test("--help lists every setting: its flag, its variable, its default, each plugin's section")
    func help() async throws {
        let run = try await runHerald(["serve", "--help"])
        #expect(run.status == 0)
        for flag in ["--http <host:port>", "--no-echo", "--nats-server <url> (repeatable)", "--exec-fetch-env <name=value> (repeatable)"] {
            #expect(run.output.contains(flag), "\(flag)")
        }
        for name in ["HERALD_TOKEN_WEBHOOK_MAX_ATTEMPTS", "HERALD_IMAGE_ATTACHMENT_CA", "HERALD_NATS_PING_INTERVAL", "HERALD_DATA_DIR"] {
            #expect(run.output.contains(name), "\(name)")
        }
        for section in ["HTTPReceiver:", "NATSReceiver:", "ExecFetchWorker:", "TokenWebhook:", "herald serve:"] {
            #expect(run.output.contains(section), "\(section)")
        }
    }

    /// What bash's completion of `herald` offers for `line` (the cursor at its end), with the script the binary
    /// generates loaded, as the bash-completion package runs it.
    static func bashCompletions(_ script: String, _ line: String) async throws -> [String] {
        let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        let run = try await runExecutable(
            URL(fileURLWithPath: "/usr/bin/bash"),
            [
                "-c",
                """
                source "$1"; shift
                COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; shift
                COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
                _herald herald "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
                printf '%s\\n' "${COMPREPLY[@]}"
                """,
                "complete", script, line,
            ] + words)
        #expect(run.status == 0, "\(run.error)")
        return run.output.split(separator: "\n").map(String.init)
    }

    @Test("the completion scripts name every setting of serve's schema, with its values: bash completes them as a shell would")
    func completions() async throws {
        let bash = try await runHerald(["--generate-completion-script", "bash"])
        #expect(bash.status == 0, "\(bash.error)")
        let serve = try #require(bash.output.range(of: "\n_herald_serve() {\n"), "\(bash.output)")
        let function = bash.output[serve.lowerBound...].components(separatedBy: "\n}\n")[0]
        let words = Set(function.split { " ()|'\n".contains($0) })
        for setting in ServeOption.all {
            #expect(words.contains(Substring(setting.flag)), "\(setting.flag)")
            if setting.kind == .boolean { #expect(words.contains(Substring(setting.negatedFlag)), "\(setting.negatedFlag)") }
        }
        try await withTemporaryDirectory { directory in
            let script = "\(directory)/herald.bash"
            try bash.output.write(toFile: script, atomically: true, encoding: .utf8)
            try "".write(toFile: "\(directory)/cert.pem", atomically: true, encoding: .utf8)
            #expect(try await Self.bashCompletions(script, "herald serve --presen") == ["--presenter"])
            #expect(try await Self.bashCompletions(script, "herald serve --no-ech") == ["--no-echo"])
            #expect(
                Set(try await Self.bashCompletions(script, "herald serve --exec-fetch-c")) == [
                    "--exec-fetch-command", "--exec-fetch-concurrency",
                ])
            #expect(try await Self.bashCompletions(script, "herald serve --presenter ") == ["desktop", "log", "none"])
            #expect(try await Self.bashCompletions(script, "herald serve --log-level w") == ["warning"])
            #expect(try await Self.bashCompletions(script, "herald serve --tls-cert \(directory)/ce") == ["\(directory)/cert.pem"])
            // A setting's value is not taken for a subcommand or a flag: the next word is a flag again.
            #expect(try await Self.bashCompletions(script, "herald serve --http 127.0.0.1:1 --sock") == ["--socket"])
            // swift-argument-parser's own completions are still there.
            #expect(try await Self.bashCompletions(script, "herald serve --print-c") == ["--print-config"])
            #expect(try await Self.bashCompletions(script, "herald to") == ["token", "topics"])
        }
        let zsh = try await runHerald(["--generate-completion-script", "zsh"])
        #expect(zsh.status == 0, "\(zsh.error)")
        for setting in ServeOption.all {
            let spec = setting.kind == .list ? "'*\(setting.flag)[" : setting.kind == .boolean ? ")\(setting.flag)[" : "'\(setting.flag)["
            #expect(zsh.output.contains(spec), "\(setting.flag)")
        }
        #expect(zsh.output.contains(":level:(trace debug info notice warning error critical)'"), "\(zsh.output)")
        #expect(zsh.output.contains("'(--no-echo)--echo[Write one JSON object per line on standard output for every handled event]'"))
        let fish = try await runHerald(["--generate-completion-script", "fish"])
        #expect(fish.status == 0, "\(fish.error)")
        for setting in ServeOption.all { #expect(fish.output.contains(" -l '\(setting.flag.dropFirst(2))' "), "\(setting.flag)") }
        #expect(fish.output.contains("-l 'presenter' -d 'Where notifications are shown"), "\(fish.output)")
        #expect(fish.output.contains("-rfka 'desktop log none'"), "\(fish.output)")
        #expect(fish.output.contains(" 'presenter=' "), "serve's parser knows the flag takes a value: \(fish.output)")
        // A shell it does not know is still swift-argument-parser's error.
        #expect(try await runHerald(["--generate-completion-script", "tcsh"]).status != 0)
    }

    @Test("the committed settings reference is what the schema generates (herald serve --print-reference)")
    func referenceIsCurrent() async throws {
        let run = try await runHerald(["serve", "--print-reference"])
        #expect(run.status == 0)
        let committed = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/operators/settings.md"), encoding: .utf8)
        #expect(
            committed == run.output,
            "docs/operators/settings.md is stale: regenerate it with `herald serve --print-reference > docs/operators/settings.md`")
    }

    @Test("a dynamic plugin gets its plugin-settings section as its configuration: the test plugin refuses to load when it says so")
    func dynamicPluginSettings() async throws {
        try await withTemporaryDirectory { directory in
            let plugin = buildProductsDirectory.appendingPathComponent("libHeraldTestPlugin.so").path
            let file = "\(directory)/herald.yaml"
            try """
            plugins: [\(plugin)]
            plugin-settings:
              \(plugin): {fail_init: 7}
            """.write(toFile: file, atomically: true, encoding: .utf8)
            let arguments = ["serve", "--config", file, "--data-dir", "\(directory)/data", "--http", "127.0.0.1:0", "--socket", "none"]
            let refused = try await runHerald(arguments)
            #expect(refused.status != 0)
            #expect(refused.error.contains(plugin) && refused.error.contains("7"), "\(refused.error)")
            let printed = try await runHerald(arguments + ["--print-config"])
            #expect(printed.output.contains("\(plugin): {\"fail_init\": 7}  # config file \(file), line 3"), "\(printed.output)")
        }
    }

    @Test("disable-plugins: the bundled plugins it names do not start, whatever their own settings say")
    func disabledPlugins() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(
                directory: directory,
                arguments: ["--socket", "none", "--disable-plugin", "ImageAttachment", "--disable-plugin=AnalyticsStore"])
            #expect(await daemon.event() != nil, "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            let started = daemon.log.split(separator: "\n").first { $0.contains("herald started") }
            #expect(started?.contains("\"http\"") == true, "\(daemon.log)")
            #expect(started?.contains("image-attachment") == false, "\(daemon.log)")
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/analytics.sqlite"))
        }
        let unknown = try await runHerald(["serve", "--print-config", "--disable-plugin", "ImageAttachments"])
        #expect(unknown.status == 64)
        #expect(
            unknown.error.hasPrefix(
                "herald: flag --disable-plugin: 'ImageAttachments' is not valid; allowed: a list of bundled plugins' names: HTTPReceiver, ")
        )
    }
}
