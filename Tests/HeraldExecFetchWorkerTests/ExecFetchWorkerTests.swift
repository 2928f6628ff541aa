import Foundation
import Herald
import HeraldExecFetchWorker
import HeraldTesting
import Logging
import Testing

@Suite("ExecFetchWorker: a command per silent message, its exit status as the result", .serialized)
struct ExecFetchWorkerTests {
    /// The worker's timeout in the tests that check what a run did rather than when it ended: minutes, so that a
    /// machine stalled by other work (a sanitizer build beside the tests) cannot turn a status into `failed`.
    static let patient: Duration = .seconds(600)

    /// Exits with the message's `status` (a number), or kills itself with `SIGKILL` when it is `signal`.
    static let statusScript = """
        input=$(cat)
        status=$(printf '%s' "$input" | sed -n 's/.*"status":"\\([a-z0-9]*\\)".*/\\1/p')
        if [ "$status" = signal ]; then kill -KILL $$; fi
        exit "$status"
        """

    @Test("exit 0 is newData, 3 noData, any other status failed, a signal failed")
    func exitStatuses() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(Self.statusScript, named: "status.sh", in: directory)
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient))
        try await withWorker(worker) { herald, sink in
            var messages: [String: RemoteMessage] = [:]
            for status in ["0", "3", "1", "2", "75", "signal"] {
                messages[status] = try await deliverSilent(["status": status], to: herald)
            }
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: messages["0"]!, in: sink) == "newData")
            #expect(await fetchResult(of: messages["3"]!, in: sink) == "noData")
            for status in ["1", "2", "75", "signal"] {
                #expect(await fetchResult(of: messages[status]!, in: sink) == "failed", "status \(status)")
            }
        }
    }

    @Test("the status mapping is configurable")
    func customMapping() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(Self.statusScript, named: "status.sh", in: directory)
        let worker = ExecFetchWorker(
            options: .init(command: script, timeout: Self.patient, newDataStatuses: [0, 10], noDataStatuses: [1, 75]))
        try await withWorker(worker) { herald, sink in
            var messages: [String: RemoteMessage] = [:]
            for status in ["10", "1", "75", "3"] {
                messages[status] = try await deliverSilent(["status": status], to: herald)
            }
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: messages["10"]!, in: sink) == "newData")
            #expect(await fetchResult(of: messages["1"]!, in: sink) == "noData")
            #expect(await fetchResult(of: messages["75"]!, in: sink) == "noData")
            #expect(await fetchResult(of: messages["3"]!, in: sink) == "failed")
        }
    }

    @Test("standard input carries the message's userInfo as JSON; arguments, environment and working directory are set")
    func inputArgumentsEnvironment() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let work = "\(directory)/work"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let script = try writeScript(
            """
            cat > "$OUT/input-$HERALD_MESSAGE_ID.json"
            printf '%s\\n' "$@" > "$OUT/arguments"
            printf '%s\\n' "$HERALD_MESSAGE_ID|$EXTRA|$(pwd)" > "$OUT/environment"
            """, named: "capture.sh", in: directory)
        let worker = ExecFetchWorker(
            options: .init(
                command: script, arguments: ["one", "two words", "*"], environment: ["OUT": directory, "EXTRA": "extra value"],
                workingDirectory: work, timeout: Self.patient))
        try await withWorker(worker) { herald, sink in
            let message = try await deliverSilent(["city": "Lyon", "quote": "a \\\"quoted\\\" word"], to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "newData")
            let id = try #require(message.messageID)
            let input = try #require(readFile("\(directory)/input-\(id).json"))
            let parsed = try JSONParser.parse(Array(input.utf8))
            #expect(parsed == JSONValue.object(message.userInfo))
            #expect(parsed["city"]?.stringValue == "Lyon")
            #expect(parsed["quote"]?.stringValue == "a \"quoted\" word")
            #expect(parsed["gcm.message_id"]?.stringValue == id)
            #expect(readFile("\(directory)/arguments") == "one\ntwo words\n*\n", "arguments are passed as given, with no shell")
            #expect(readFile("\(directory)/environment") == "\(id)|extra value|\(work)\n")
        }
    }

    @Test("standard output and error reach the log line by line, with plugin and message_id metadata")
    func outputIsLogged() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(
            """
            cat > /dev/null
            echo "first line"
            echo "a warning" >&2
            printf 'second line\\r\\nno newline at the end'
            """, named: "chatty.sh", in: directory)
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient))
        try await withWorker(worker, logs: logs) { herald, sink in
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "newData")
            let id = try #require(message.messageID)
            let stdout = logs.entries(with: ["plugin": "exec-fetch", "message_id": id, "stream": "stdout"]).map(\.message)
            let stderr = logs.entries(with: ["plugin": "exec-fetch", "message_id": id, "stream": "stderr"]).map(\.message)
            #expect(stdout == ["first line", "second line", "no newline at the end"])
            #expect(stderr == ["a warning"])
            #expect(
                logs.entries(with: ["plugin": "exec-fetch", "message_id": id, "stream": "stdout"]).allSatisfy {
                    $0.level == .info && $0.metadata["pid"] != nil
                })
            let summary = logs.entries(with: ["plugin": "exec-fetch", "message_id": id, "result": "newData"])
            #expect(summary.count == 1 && summary.first?.metadata["exit_status"] == "0")
        }
    }

    @Test("captured output is capped per run; the command is not blocked by what is not logged")
    func outputCap() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        // 2,000 lines of 100 bytes: 200 kB, more than a pipe holds, so the worker must keep reading.
        let script = try writeScript(
            """
            cat > /dev/null
            line=$(printf '%099d' 0)
            i=0
            while [ $i -lt 2000 ]; do echo "$line"; i=$((i + 1)); done
            """, named: "flood.sh", in: directory)
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient, maxCapturedOutputBytes: 1_000))
        try await withWorker(worker, logs: logs) { herald, sink in
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "newData")
            let id = try #require(message.messageID)
            let lines = logs.entries(with: ["message_id": id, "stream": "stdout"]).map(\.message)
            #expect(lines.count == 10, "1,000 bytes of 100-byte lines (newline included)")
            #expect(lines.reduce(0) { $0 + $1.utf8.count + 1 } <= 1_000)
            #expect(logs.entries(with: ["message_id": id]).contains { $0.message.contains("max-captured-bytes") })
            let summary = try #require(logs.entries(with: ["message_id": id, "result": "newData"]).first)
            #expect(summary.metadata["discarded_output_bytes"] == "\(200_000 - 1_000)")
        }
    }

    @Test("a process the command leaves running does not hold the fetch: its output is read for a while, then let go")
    func leftoverProcess() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        // The background sleep inherits standard output and error, so they stay open after the script exits.
        let script = try writeScript(
            """
            cat > /dev/null
            sleep 600 &
            echo $! > "$0.child"
            echo "done"
            """, named: "leaves.sh", in: directory)
        defer { if let child = readNumber("\(script).child") { kill(child, SIGKILL) } }
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient))
        try await withWorker(worker, logs: logs) { herald, sink in
            let clock = ContinuousClock()
            let start = clock.now
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            // Well short of the leftover's 600 s even on a machine stalled by other work: the fetch did not wait for it.
            #expect(clock.now - start < .seconds(300))
            #expect(await fetchResult(of: message, in: sink) == "newData")
            let id = try #require(message.messageID)
            let lines = logs.entries(with: ["message_id": id])
            #expect(lines.contains { $0.message == "done" && $0.metadata["stream"] == "stdout" })
            #expect(lines.contains { $0.level == .warning && $0.message.contains("still held open") })
        }
    }

    @Test("a command past Herald's deadline is killed with its process group, reaped, and counted failed")
    func heraldDeadlineKills() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        // The script's own pid, and that of the `sleep` it waits for (in its process group).
        let script = try writeScript(
            """
            echo $$ > "$0.pid"
            sleep 600 &
            echo $! > "$0.child"
            wait
            """, named: "hang.sh", in: directory)
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient))
        try await withWorker(worker, deadline: .milliseconds(800), logs: logs) { herald, sink in
            let clock = ContinuousClock()
            let start = clock.now
            let message = try await deliverSilent(to: herald)
            #expect(await eventually { readNumber("\(script).child") != nil })
            let pid = try #require(readNumber("\(script).pid"))
            let child = try #require(readNumber("\(script).child"))
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "failed")
            // The deadline's task cancellation reaches the worker, which ends the command (SIGTERM is enough for sh).
            #expect(await eventually { processIsGone(pid) }, "the command is reaped: no zombie left")
            #expect(await eventually { processHasEnded(child) }, "what the command started is ended too")
            // Neither the sleep (600 s) nor the worker's timeout (600 s) ended it, even on a stalled machine.
            #expect(clock.now - start < .seconds(300))
            let id = try #require(message.messageID)
            #expect(
                logs.entries(with: ["message_id": id]).contains {
                    $0.message.contains("ending the command with SIGTERM: the fetch was cancelled")
                })
        }
    }

    @Test("a command past the worker's timeout that ignores SIGTERM gets SIGKILL after the grace period")
    func timeoutEscalatesToKill() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(
            """
            trap '' TERM
            echo $$ > "$0.pid"
            while :; do sleep 0.05; done
            """, named: "stubborn.sh", in: directory)
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: .milliseconds(300), killGracePeriod: .milliseconds(300)))
        try await withWorker(worker, logs: logs) { herald, sink in
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            // The worker's own timeout ended the run: fetch returned only after the child was reaped.
            let pid = try #require(readNumber("\(script).pid"))
            #expect(processIsGone(pid))
            #expect(await fetchResult(of: message, in: sink) == "failed")
            let id = try #require(message.messageID)
            let lines = logs.entries(with: ["message_id": id]).map(\.message)
            #expect(lines.contains { $0.contains("ran past the timeout (300ms)") })
            #expect(lines.contains { $0.contains("sending SIGKILL") })
            let summary = try #require(logs.entries(with: ["message_id": id, "result": "failed"]).first)
            #expect(summary.metadata["signal"] == "\(SIGKILL)" && summary.metadata["ended_by"] == "timeout")
        }
    }

    @Test("at most max-concurrent commands run at once; the others wait their turn")
    func concurrencyLimit() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        // Counts running copies under flock and keeps the highest count seen.
        let script = try writeScript(
            """
            cat > /dev/null
            cd "$(dirname "$0")"
            ( flock 9; n=$(( $(cat running 2>/dev/null || echo 0) + 1 )); echo $n > running
              if [ $n -gt $(cat most 2>/dev/null || echo 0) ]; then echo $n > most; fi ) 9> lock
            sleep 0.5
            ( flock 9; echo $(( $(cat running) - 1 )) > running; echo x >> finished ) 9> lock
            """, named: "count.sh", in: directory)
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient, maxConcurrent: 2))
        try await withWorker(worker) { herald, sink in
            var messages: [RemoteMessage] = []
            for _ in 0..<7 { messages.append(try await deliverSilent(to: herald)) }
            try await herald.waitUntilIdle()
            for message in messages {
                #expect(await fetchResult(of: message, in: sink) == "newData")
            }
            #expect(readNumber("\(directory)/most") == 2)
            #expect(readNumber("\(directory)/running") == 0)
            #expect(readFile("\(directory)/finished")?.split(separator: "\n").count == 7)
            #expect(worker.runningCommands.most == 2 && worker.runningCommands.now == 0)
        }
    }

    @Test("a fetch cancelled while waiting for its turn never starts its command and counts failed")
    func cancelledWhileWaiting() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        // It ignores SIGTERM, so the first run holds its place for the kill grace period after its deadline: the
        // second message's deadline passes while it waits.
        let script = try writeScript(
            """
            trap '' TERM
            echo $HERALD_MESSAGE_ID >> "$0.started"
            cat > /dev/null
            sleep 5
            """, named: "slow.sh", in: directory)
        let worker = ExecFetchWorker(options: .init(command: script, killGracePeriod: .seconds(1), maxConcurrent: 1))
        try await withWorker(worker, deadline: .milliseconds(700)) { herald, sink in
            let first = try await deliverSilent(to: herald)
            let second = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: first, in: sink) == "failed")
            #expect(await fetchResult(of: second, in: sink) == "failed")
            // Wait for the first run to be reaped (the worker's slot frees then), then look at who started.
            #expect(await eventually { worker.runningCommands.now == 0 })
            #expect(readFile("\(script).started") == "\(first.messageID!)\n")
        }
    }

    @Test("stopping Herald while a command runs ends it; shutdown leaves no process and no handle")
    func shutdownEndsCommands() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(
            """
            echo $$ > "$0.pid.$HERALD_MESSAGE_ID"
            exec sleep 60
            """, named: "long.sh", in: directory)
        let worker = ExecFetchWorker(options: .init(command: script, timeout: .seconds(120)))
        var pids: [Int32] = []
        try await withWorker(worker, shutdownGracePeriod: .milliseconds(200)) { herald, sink in
            var messages: [RemoteMessage] = []
            for _ in 0..<3 { messages.append(try await deliverSilent(to: herald)) }
            for message in messages {
                let path = "\(script).pid.\(message.messageID!)"
                #expect(await eventually { readNumber(path) != nil })
                pids.append(try #require(readNumber(path)))
            }
        }
        // withWorker shut the instance down: stop() waited for every child to be reaped.
        for pid in pids { #expect(processIsGone(pid), "pid \(pid)") }
    }

    @Test("the event loop shutting down under a running command kills it, reaps it and closes every handle")
    func loopShutdownEndsCommands() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript(
            """
            trap '' TERM
            echo $$ > "$0.pid"
            exec sleep 60
            """, named: "orphan.sh", in: directory)
        let loop = EventLoop(name: "exec-test")
        try loop.start()
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.shutdownGracePeriod = .milliseconds(200)
        configuration.analyticsDrainTimeout = .milliseconds(200)
        let herald = Herald(configuration: patientShutdown(configuration), loop: loop)
        let worker = ExecFetchWorker(options: .init(command: script, timeout: .seconds(120)))
        try herald.register(worker)
        try await herald.start()
        _ = try await deliverSilent(to: herald)
        #expect(await eventually { readNumber("\(script).pid") != nil })
        let pid = try #require(readNumber("\(script).pid"))
        // The host closes the loop without stopping Herald first: the process handle kills the child (no grace
        // period then) and stays open until libuv has reaped it.
        await loop.shutdownGracefully()
        #expect(loop.statistics.liveHandles == 0)
        #expect(processIsGone(pid))
        #expect(await eventually { worker.runningCommands.now == 0 })
        await herald.shutdown()
    }

    @Test("a missing command fails start with an error that names it")
    func missingCommand() async throws {
        let herald = Herald()
        try herald.register(ExecFetchWorker(options: .init(command: "/nonexistent/herald-fetch")))
        await #expect(
            throws: HeraldError.pluginFailedToStart(
                plugin: "exec-fetch", error: "exec-fetch: the command /nonexistent/herald-fetch does not exist")
        ) {
            try await herald.start()
        }
        #expect(herald.loop.statistics.liveHandles == 0)
    }

    @Test("a command that is not executable, a directory, a name not in PATH, or bad options fail start")
    func unusableCommands() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let plain = try writeScript("exit 0", named: "plain.sh", in: directory, mode: 0o644)
        let cases: [(ExecFetchWorker.Options, String)] = [
            (.init(command: plain), "the command \(plain) is not executable by this user"),
            (.init(command: directory), "the command \(directory) is not a program"),
            (.init(command: "herald-no-such-command-anywhere"), "the command herald-no-such-command-anywhere was not found in PATH"),
            (
                .init(command: "/bin/true", workingDirectory: "\(directory)/missing"),
                "the working directory \(directory)/missing cannot be used"
            ),
            (.init(command: "/bin/true", maxConcurrent: 0), "option max-concurrent = 0 is not allowed"),
            (.init(command: "/bin/true", newDataStatuses: [0, 3]), "a status cannot mean both new data and no data"),
            (.init(command: "/bin/true", noDataStatuses: [256]), "option no-data-status = 256 is not allowed"),
        ]
        for (options, expected) in cases {
            let herald = Herald()
            try herald.register(ExecFetchWorker(options: options))
            do {
                try await herald.start()
                Issue.record("start succeeded for \(options.command)")
                await herald.shutdown()
            } catch {
                #expect("\(error)".contains(expected), "\(error)")
            }
        }
    }

    @Test("a bare command name is found in PATH")
    func commandFromPath() async throws {
        let worker = ExecFetchWorker(options: .init(command: "true", timeout: Self.patient))
        try await withWorker(worker) { herald, sink in
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "newData")
        }
    }

    @Test("a command removed after start fails its fetch with an error naming it")
    func commandRemovedAfterStart() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-exec")
        defer { removeTemporaryDirectory(directory) }
        let script = try writeScript("exit 0", named: "vanishing.sh", in: directory)
        let logs = LogCollector()
        let worker = ExecFetchWorker(options: .init(command: script, timeout: Self.patient))
        try await withWorker(worker, logs: logs) { herald, sink in
            try FileManager.default.removeItem(atPath: script)
            let message = try await deliverSilent(to: herald)
            try await herald.waitUntilIdle()
            #expect(await fetchResult(of: message, in: sink) == "failed")
            let id = try #require(message.messageID)
            let errors = logs.entries(with: ["message_id": id]).filter { $0.level == .error }
            #expect(
                errors.contains { $0.message.contains("cannot run \(script)") && $0.message.contains("ENOENT") }, "\(errors.map(\.message))"
            )
        }
    }
}
