import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald serve runs a background-fetch command (ExecFetchWorker)")
struct ServeExecFetchTests {
    /// A script that saves its standard input and environment variable `MARK` beside itself, named after the
    /// message, then exits with the status the file `status` holds, or sleeps on `sleep`.
    static func writeScript(in directory: String) throws -> String {
        let path = "\(directory)/fetch.sh"
        try """
        #!/bin/sh
        cat > "$1/$HERALD_MESSAGE_ID.json"
        echo "$MARK" > "$1/$HERALD_MESSAGE_ID.mark"
        status=$(cat "$1/status")
        if [ "$status" = sleep ]; then exec sleep 60; fi
        if [ "$status" = wait ]; then
            while [ ! -e "$1/release" ]; do sleep 0.05; done
            exit 7
        fi
        exit "$status"

        """.write(toFile: path, atomically: true, encoding: .utf8)
        #expect(chmod(path, 0o755) == 0)
        return path
    }

    /// A daemon in `directory/data` running ``writeScript(in:)``'s script (in `directory/work`, its argument) as its
    /// fetch command, with `arguments` besides.
    static func daemonRunningScript(in directory: String, arguments: [String], environment: [String: String] = [:]) async throws -> (
        daemon: DaemonProcess, work: String
    ) {
        let work = "\(directory)/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let script = try writeScript(in: work)
        let daemon = try await DaemonProcess.start(
            directory: "\(directory)/data", arguments: ["--exec-fetch-command", script, "--exec-fetch-argument", work] + arguments,
            environment: environment)
        return (daemon, work)
    }

    /// Sends a silent message and waits for the command's result line in the daemon's log.
    static func fetch(_ daemon: DaemonProcess, token: String, status: String, work: String, expecting result: String) async throws
        -> String
    {
        try status.write(toFile: "\(work)/status", atomically: true, encoding: .utf8)
        let before = daemon.log.components(separatedBy: "result=\(result)").count
        let sent = try await runHerald([
            "send", "--socket", daemon.socketPath, "--token", token, "--content-available", "--data", "s=\(status)",
        ])
        #expect(sent.status == 0, "\(sent.error)")
        let name = try #require(try JSONParser.parse(Array(sent.output.utf8))["name"]?.stringValue)
        #expect(
            await eventuallyValue { daemon.log.components(separatedBy: "result=\(result)").count > before ? true : nil } == true,
            "no result=\(result): \(daemon.log)"
        )
        return String(name.split(separator: "/").last!)
    }

    @Test("exit 0 is new data, 3 no data, 7 failed; the message on standard input, the environment set; a timeout ends it, failed")
    func runsTheCommand() async throws {
        try await withTemporaryDirectory { directory in
            let (daemon, work) = try await Self.daemonRunningScript(
                in: directory, arguments: ["--exec-fetch-timeout", "1", "--exec-fetch-concurrency", "2"],
                environment: ["HERALD_EXEC_FETCH_ENVIRONMENT": "MARK=from-the-config"])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")

            let id = try await Self.fetch(daemon, token: token, status: "0", work: work, expecting: "newData")
            let input = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: "\(work)/\(id).json"))))
            #expect(input["aps"] == ["content-available": 1])
            #expect(input["s"] == "0")
            #expect(try String(contentsOfFile: "\(work)/\(id).mark", encoding: .utf8) == "from-the-config\n")

            _ = try await Self.fetch(daemon, token: token, status: "3", work: work, expecting: "noData")
            _ = try await Self.fetch(daemon, token: token, status: "7", work: work, expecting: "failed")
            #expect(daemon.log.contains("exit_status=7"))

            let before = daemon.log.components(separatedBy: "ended_by=timeout").count
            _ = try await Self.fetch(daemon, token: token, status: "sleep", work: work, expecting: "failed")
            #expect(daemon.log.components(separatedBy: "ended_by=timeout").count > before, "\(daemon.log)")

            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "SIGHUP applies the file's new exec-fetch-concurrency and exec-fetch-timeout (in its ExecFetchWorker section): a waiting fetch starts beside the running one, the next run ends at the new timeout; the log names what was applied and what needs a restart"
    )
    func liveSettingsOnReload() async throws {
        try await withTemporaryDirectory { directory in
            let work = "\(directory)/work"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            // Each run says it started, then holds its place until it is ended.
            let script = "\(work)/hold.sh"
            try "#!/bin/sh\n: > \"$1/$HERALD_MESSAGE_ID.started\"\nexec sleep 600\n".write(
                toFile: script, atomically: true, encoding: .utf8)
            #expect(chmod(script, 0o755) == 0)
            let file = "\(directory)/herald.yaml"
            func configure(concurrency: Int, timeout: Int, maxReplays: Int) throws {
                try """
                log-level: debug
                shutdown-grace: 0  # the commands still running are ended at once at the stop
                max-replays: \(maxReplays)
                background-fetch-deadline: 3600  # the first run is ended by the stop only, however slow the machine
                ExecFetchWorker:
                  exec-fetch-command: \(script)
                  exec-fetch-arguments: [\(work)]
                  exec-fetch-concurrency: \(concurrency)
                  exec-fetch-timeout: \(timeout)
                """.write(toFile: file, atomically: true, encoding: .utf8)
            }
            try configure(concurrency: 1, timeout: 600, maxReplays: 3)
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: ["--config", file])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            func send() async throws -> String {
                let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--token", token, "--content-available"])
                #expect(sent.status == 0, "\(sent.error)")
                let name = try #require(try JSONParser.parse(Array(sent.output.utf8))["name"]?.stringValue)
                return String(name.split(separator: "/").last!)
            }
            func started(_ id: String) -> Bool { FileManager.default.fileExists(atPath: "\(work)/\(id).started") }
            func logged(_ text: String) async -> Bool { await eventuallyValue { daemon.log.contains(text) ? true : nil } == true }

            let first = try await send()
            #expect(await eventuallyValue { started(first) ? true : nil } == true, "\(daemon.log)")
            let second = try await send()
            #expect(await logged("waiting for a turn"), "one command at a time: \(daemon.log)")
            #expect(!started(second))

            try configure(concurrency: 2, timeout: 600, maxReplays: 5)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(await eventuallyValue { started(second) ? true : nil } == true, "\(daemon.log)")
            #expect(!daemon.log.contains("result="), "the first command still runs beside it: \(daemon.log)")
            #expect(await logged(#"applied=["exec-fetch-concurrency"] needsRestart=["max-replays"]"#), "\(daemon.log)")

            // Runs started after a reload take its timeout; those running keep theirs.
            try configure(concurrency: 3, timeout: 1, maxReplays: 5)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(
                await logged(#"applied=["exec-fetch-timeout", "exec-fetch-concurrency"] needsRestart=["max-replays"]"#), "\(daemon.log)")
            let third = try await send()
            #expect(await logged("ended_by=timeout"), "\(daemon.log)")
            let timedOut = daemon.log.split(separator: "\n").filter { $0.contains("ended_by=timeout") }
            #expect(timedOut.count == 1 && timedOut[0].contains(third), "\(daemon.log)")
            #expect(started(third))
            #expect(!daemon.log.contains("is not shorter than background-fetch-deadline"), "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "background-fetch-deadline ends a run still going at it (cancelled, failed) before a longer exec-fetch-timeout; the start and a reload that sets such a timeout warn that it is not the shorter"
    )
    func deadlineBeforeTimeout() async throws {
        try await withTemporaryDirectory { directory in
            let work = "\(directory)/work"
            try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
            let script = try Self.writeScript(in: work)
            let file = "\(directory)/herald.yaml"
            func configure(timeout: Int) throws {
                try """
                background-fetch-deadline: 1
                exec-fetch-command: \(script)
                exec-fetch-arguments: [\(work)]
                exec-fetch-timeout: \(timeout)
                """.write(toFile: file, atomically: true, encoding: .utf8)
            }
            try configure(timeout: 25)
            let daemon = try await DaemonProcess.start(directory: "\(directory)/data", arguments: ["--config", file])
            let warning = "exec-fetch-timeout is not shorter than background-fetch-deadline"
            #expect(await eventuallyValue { daemon.log.contains(warning) ? true : nil } == true, "\(daemon.log)")
            #expect(daemon.log.contains("background_fetch_deadline=1s exec_fetch_timeout=25s"), "\(daemon.log)")
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")

            try configure(timeout: 20)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(
                await eventuallyValue { daemon.log.contains("background_fetch_deadline=1s exec_fetch_timeout=20s") ? true : nil } == true,
                "\(daemon.log)")

            _ = try await Self.fetch(daemon, token: token, status: "sleep", work: work, expecting: "failed")
            #expect(daemon.log.contains("background fetch ran past its deadline"), "\(daemon.log)")
            #expect(daemon.log.contains("ended_by=cancelled"), "\(daemon.log)")
            #expect(!daemon.log.contains("ended_by=timeout"), "\(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("the settings from a config file, shown by --print-config with their lines")
    func configFile() async throws {
        try await withTemporaryDirectory { directory in
            let file = "\(directory)/herald.yaml"
            try """
            exec-fetch-command: /bin/true
            exec-fetch-arguments: [--cache, /var/cache/weather]
            exec-fetch-environment: [API=https://api.example.com]
            exec-fetch-timeout: 20

            """.write(toFile: file, atomically: true, encoding: .utf8)
            let printed = try await runHerald(["serve", "--config", file, "--exec-fetch-concurrency", "2", "--print-config"])
            #expect(printed.status == 0, "\(printed.error)")
            #expect(printed.output.contains("exec-fetch-command: /bin/true  # config file \(file), line 1"), "\(printed.output)")
            #expect(printed.output.contains("--cache"), "\(printed.output)")
            #expect(printed.output.contains("API=https://api.example.com"), "\(printed.output)")
            #expect(printed.output.contains("exec-fetch-timeout: 20  # config file \(file), line 4"), "\(printed.output)")
            #expect(printed.output.contains("exec-fetch-concurrency: 2  # flag --exec-fetch-concurrency"), "\(printed.output)")
        }
    }

    @Test("bad background-fetch settings stop the start with a message naming the setting")
    func badSettings() async throws {
        let zero = try await runHerald(["serve", "--exec-fetch-command", "/bin/true", "--exec-fetch-timeout", "0"])
        #expect(zero.status == 64)
        #expect(
            zero.error.contains("flag --exec-fetch-timeout: '0' is not valid; allowed: a whole number of seconds from 1 to 3600"),
            "\(zero.error)")
        let noEquals = try await runHerald(
            ["serve", "--exec-fetch-command", "/bin/true"], environment: ["HERALD_EXEC_FETCH_ENVIRONMENT": "NOVALUE"])
        #expect(noEquals.status == 64)
        #expect(noEquals.error.contains("environment HERALD_EXEC_FETCH_ENVIRONMENT"), "\(noEquals.error)")
        #expect(noEquals.error.contains("NAME=value"), "\(noEquals.error)")
        let concurrency = try await runHerald(["serve", "--exec-fetch-command", "/bin/true", "--exec-fetch-concurrency", "0"])
        #expect(concurrency.status == 64)
        #expect(concurrency.error.contains("--exec-fetch-concurrency"), "\(concurrency.error)")
    }

    @Test("a command that does not exist stops the start, naming it")
    func missingCommand() async throws {
        try await withTemporaryDirectory { directory in
            let missing = try await runHerald([
                "serve", "--http", "127.0.0.1:0", "--socket", "none", "--data-dir", directory,
                "--exec-fetch-command", "/nonexistent/fetch-command",
            ])
            #expect(missing.status != 0)
            #expect(missing.error.contains("/nonexistent/fetch-command"), "\(missing.error)")
        }
    }

    @Test(
        "max-in-flight bounds the messages accepted and not yet handled: two silent messages whose fetches run fill a limit of 2 (the log says so, with the limit), a third send waits until they end and is then handled"
    )
    func maxInFlight() async throws {
        try await withTemporaryDirectory { directory in
            // Each fetch waits until the test releases it (failed, exit 7): its message stays in flight until then,
            // however long the sends take to arrive.
            let (daemon, work) = try await Self.daemonRunningScript(
                in: directory,
                arguments: [
                    "--max-in-flight", "2", "--exec-fetch-timeout", "60", "--exec-fetch-concurrency", "2",
                    "--background-fetch-deadline", "120",
                ])
            let (token, _) = try #require(await echoedToken(daemon), "\(daemon.log)")
            try "wait".write(toFile: "\(work)/status", atomically: true, encoding: .utf8)
            let socket = daemon.socketPath
            let send = { @Sendable (n: Int) in
                try await runHerald(["send", "--socket", socket, "--token", token, "--content-available", "--data", "n=\(n)"])
            }
            for n in 1...2 {
                let sent = try await send(n)
                #expect(sent.status == 0, "\(sent.error)")
            }
            #expect(
                await eventuallyValue { daemon.log.contains("bus full: pausing receivers") && daemon.log.contains("limit=2") ? true : nil }
                    == true,
                "\(daemon.log)")
            // Sent while the bus is full: read once the fetches have ended and the bus has room again.
            let pending = Task { try await send(3) }
            try "".write(toFile: "\(work)/release", atomically: true, encoding: .utf8)
            let third = try await pending.value
            #expect(third.status == 0, "\(third.error)")
            #expect(
                await eventuallyValue { daemon.log.components(separatedBy: "result=failed").count == 4 ? true : nil } == true,
                "three fetches ended: \(daemon.log)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }
}
