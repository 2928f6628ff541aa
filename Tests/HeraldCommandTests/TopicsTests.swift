import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("herald topics, against stopped and running daemons", .serialized)
struct TopicsTests {
    @Test("on a stopped daemon's directory: subscribe, list and unsubscribe write the store; the restarted daemon has the topics")
    func stoppedDaemon() async throws {
        try await withTemporaryDirectory { root in
            let directory = "\(root)/data"
            let first = try await runHerald(["topics", "subscribe", "--data-dir", directory, "weather"])
            #expect(first.status == 0, "\(first.error)")
            #expect(
                first.output == "subscribed to weather (in the store of the stopped daemon in \(directory); it applies at the next start)\n"
            )
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, "/topics/news"]).status == 0)
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, "alerts"]).status == 0)
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, "alerts"]).status == 0)
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "alerts\nnews\nweather\n")

            let removed = try await runHerald(["topics", "unsubscribe", "--data-dir", directory, "alerts"])
            #expect(removed.status == 0, "\(removed.error)")
            #expect(removed.output.hasPrefix("unsubscribed from alerts (in the store"))
            let absent = try await runHerald(["topics", "unsubscribe", "--data-dir", directory, "never"])
            #expect(absent.status == 0, "\(absent.error)")
            #expect(absent.output.hasPrefix("was not subscribed to never"))
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "news\nweather\n")

            // The daemon starts with those topics: a topic message is handled, not dropped.
            let daemon = try await DaemonProcess.start(directory: directory)
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--topic", "weather", "--data", "city=Oslo"])
            #expect(sent.status == 0, "\(sent.output) \(sent.error)")
            let handled = try #require(await daemon.event())
            #expect(handled["event"] == "message")
            #expect(handled["userInfo"]?["from"] == "/topics/weather")
            #expect(handled["userInfo"]?["city"] == "Oslo")
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "news\nweather\n")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("on a running daemon: a change goes through its HTTP receiver and takes effect at once; list shows it")
    func runningDaemon() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            let http = ["--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "demo"]

            let subscribed = try await runHerald(["topics", "subscribe", "--data-dir", directory] + http + ["storms"])
            #expect(subscribed.status == 0, "\(subscribed.error)")
            #expect(subscribed.output == "subscribed to storms (through the running daemon at 127.0.0.1:\(daemon.httpPort))\n")
            let sent = try await runHerald(["send", "--socket", daemon.socketPath, "--topic", "storms", "--data", "n=1"])
            #expect(sent.status == 0, "\(sent.output) \(sent.error)")
            let handled = try #require(await daemon.event())
            #expect(handled["event"] == "message")
            #expect(handled["userInfo"]?["n"] == "1")
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "storms\n")

            let unsubscribed = try await runHerald(["topics", "unsubscribe", "--data-dir", directory] + http + ["storms"])
            #expect(unsubscribed.status == 0, "\(unsubscribed.error)")
            #expect(unsubscribed.output.hasPrefix("unsubscribed from storms (through the running daemon"))
            #expect(try await runHerald(["send", "--socket", daemon.socketPath, "--topic", "storms", "--data", "n=2"]).status == 0)
            let dropped = try #require(await daemon.event())
            #expect(dropped["event"] == "dropped")
            #expect(dropped["reason"] == "not_targeted")
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "")

            // Every character FCM allows survives the trip through the URL.
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory] + http + ["--", "-a%2Fb.c~d_e"]).status == 0)
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "-a%2Fb.c~d_e\n")
            #expect(
                try await runHerald(["topics", "unsubscribe", "--data-dir", directory] + http + ["--", "/topics/-a%2Fb.c~d_e"]).output
                    .hasPrefix(
                        "unsubscribed from -a%2Fb.c~d_e"))
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "")

            // Another project, or a wrong secret: the daemon's refusal, exit status 1, nothing changed.
            let mismatch = try await runHerald([
                "topics", "subscribe", "--data-dir", directory, "--http", "127.0.0.1:\(daemon.httpPort)", "--project-id", "other", "x",
            ])
            #expect(mismatch.status == 1)
            #expect(mismatch.error.contains("refused the change with HTTP"), "\(mismatch.error)")
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("a running daemon that cannot be reached is never written behind its back")
    func unreachableDaemon() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--http", "none"])
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            let nobody = try freeLoopbackPort()
            let refused = try await runHerald(["topics", "subscribe", "--data-dir", directory, "--http", "127.0.0.1:\(nobody)", "storms"])
            #expect(refused.status == 1)
            #expect(refused.error.contains("\(daemon.process.processIdentifier)"), "\(refused.error)")
            #expect(refused.error.contains("keeps its topics in memory"), "\(refused.error)")
            #expect(try await runHerald(["topics", "list", "--data-dir", directory]).output == "")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("herald serve's data-directory lock tells herald topics where to reach it, or that it has no HTTP receiver")
    func lockFile() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            #expect(
                DataDirectoryLock.inspect(directory: directory)
                    == .held(
                        owner: .init(
                            pid: daemon.process.processIdentifier, http: "127.0.0.1:\(daemon.httpPort)", projectID: "demo",
                            socket: daemon.socketPath)))

            let subscribed = try await runHerald(["topics", "subscribe", "--data-dir", directory, "storms"])
            #expect(subscribed.status == 0, "\(subscribed.error)")
            #expect(subscribed.output.contains("through the running daemon at 127.0.0.1:\(daemon.httpPort)"))
            #expect(try await runHerald(["send", "--socket", daemon.socketPath, "--topic", "storms", "--data", "n=1"]).status == 0)
            #expect(await daemon.event()?["event"] == "message")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
            #expect(DataDirectoryLock.inspect(directory: directory) == .free)
        }
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--http", "none"])
            #expect(await daemon.event()?["event"] == "token", "\(daemon.log)")
            let refused = try await runHerald(["topics", "unsubscribe", "--data-dir", directory, "storms"])
            #expect(refused.status == 1)
            #expect(refused.error.contains("(pid \(daemon.process.processIdentifier)) has no HTTP receiver"), "\(refused.error)")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test("the lock: a second daemon is refused, naming the holder; a tool's shared hold delays a daemon's start")
    func lockRules() async throws {
        try await withTemporaryDirectory { directory in
            let owner = DataDirectoryLock.Owner(http: "127.0.0.1:1", projectID: "p", socket: nil)
            #expect(DataDirectoryLock.inspect(directory: directory) == .free)
            let hold = try #require(try DataDirectoryLock.shared(directory: directory))
            #expect(throws: DataDirectoryLockError.held(path: DataDirectoryLock.path(inDirectory: directory), owner: nil)) {
                try DataDirectoryLock.acquire(directory: directory, owner: owner, wait: .milliseconds(100))
            }
            // Another thread releases the hold once this one is about to wait for it; acquire can only return
            // after that release, which the thread records just before it.
            let acquiring = DispatchSemaphore(value: 0)
            let released = Locked(false)
            Thread {
                acquiring.wait()
                released.withLock { $0 = true }
                hold.release()
            }.start()
            acquiring.signal()
            let lock = try DataDirectoryLock.acquire(directory: directory, owner: owner, wait: .seconds(30))
            #expect(released.withLock { $0 }, "acquire returned while the hold was still there")
            #expect(DataDirectoryLock.inspect(directory: directory) == .held(owner: owner))
            // flock belongs to the open file, so a second daemon is refused even in this process.
            #expect(throws: DataDirectoryLockError.held(path: DataDirectoryLock.path(inDirectory: directory), owner: owner)) {
                try DataDirectoryLock.acquire(directory: directory, owner: owner, wait: .zero)
            }
            lock.release()
            // A child another test spawns at this moment holds a copy of the descriptor until its exec closes it
            // (O_CLOEXEC), and flock belongs to the open file: the lock is free once no such copy is left.
            #expect(await eventually { DataDirectoryLock.inspect(directory: directory) == .free })
        }
    }

    @Test("bad topic names and a missing store exit with a clear message", argumentCheckingOnly)
    func badInput() async throws {
        try await withTemporaryDirectory { directory in
            for name in ["bad name", "", "weather!", "/topics/", String(repeating: "a", count: 901)] {
                let result = try await runHerald(["topics", "subscribe", "--data-dir", directory, "--", name])
                #expect(result.status == 64, "\(name): \(result.error)")
                #expect(
                    result.error.contains("is not a topic name: FCM topic names are 1 to 900 characters of a-z, A-Z, 0-9 and - _ . ~ %"),
                    "\(result.error)")
            }
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, "--", "-dash_ok.~%20"]).status == 0)
            #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, String(repeating: "a", count: 900)]).status == 0)
            #expect(
                try await runHerald(["topics", "list", "--data-dir", directory]).output
                    == "-dash_ok.~%20\n\(String(repeating: "a", count: 900))\n")

            let missing = try await runHerald(["topics", "list", "--data-dir", "\(directory)/nothing"])
            #expect(missing.status == 1)
            #expect(
                missing.error.contains(
                    "herald: cannot open the Herald store at \(directory)/nothing/herald.sqlite: there is no Herald store here"),
                "\(missing.error)")
            let unsubscribe = try await runHerald(["topics", "unsubscribe", "--data-dir", "\(directory)/nothing", "weather"])
            #expect(unsubscribe.status == 1)
            #expect(unsubscribe.error.contains("there is no Herald store here"), "\(unsubscribe.error)")
            #expect(!FileManager.default.fileExists(atPath: "\(directory)/nothing"))
        }
    }
}
