import Foundation
import Herald
import HeraldSQLite
import HeraldTesting
import Testing

/// Faults a daemon meets in production, each made real: a full file system and one the kernel turned read-only (in a
/// private mount namespace, so nothing outside the test sees them), a store deleted or damaged between runs, a
/// handler that crashes the process, and a process out of file descriptors. Every case runs `herald serve` as a child.
@Suite("Fault injection: herald serve under real faults", .serialized)
struct FaultInjectionTests {
    @Test(
        "disk full during inbox commits: senders are refused with 503 UNAVAILABLE, the daemon keeps running, every accepted message is handled, accepting resumes once there is room",
        .enabled(
            if: PrivateMount.available,
            "needs mount namespaces (root with CAP_SYS_ADMIN); SQLiteStoreTests' diskFull covers SQLITE_FULL everywhere"),
        .timeLimit(.minutes(2)))
    func diskFull() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let data = directory + "/data"
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
            let mount = try PrivateMount(["-t", "tmpfs", "-o", "size=16m", "tmpfs", data])
            let daemon = try await mount.daemon(logs: directory, data: data)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let handled = daemon.collectRemainingLines()
            var sender = NumberedSender(port: daemon.httpPort, token: token)

            for _ in 0..<20 { #expect(try sender.send() == 200) }
            // Fill the file system to the last byte, as another process writing logs would.
            let filler = mount.path(data + "/filler")
            #expect(fillUp(filler) == ENOSPC)
            var refused: [Int: String] = [:]
            for _ in 0..<2_000 where refused.isEmpty {
                let (status, body) = try sender.sendWithBody()
                if status != 200 { refused[sender.sent] = body }
                #expect(status == 200 || status == 503, "\(body)")
            }
            #expect(!refused.isEmpty, "no commit failed on a full file system")
            #expect(refused.values.allSatisfy { $0.contains("UNAVAILABLE") }, "\(refused)")
            for _ in 0..<5 {
                let (status, body) = try sender.sendWithBody()
                if status != 200 { refused[sender.sent] = body }
            }
            #expect(daemon.process.isRunning)
            #expect(daemon.log.contains("No space left on device") || daemon.log.contains("full"), "\(daemon.log)")

            // Room again: the next send is accepted.
            #expect(unlink(filler) == 0)
            #expect(try sender.send() == 200)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")

            // Every accepted message was handled, none of the refused ones.
            let numbers = handledNumbers(handled.lines())
            let accepted = Set(1...sender.sent).subtracting(refused.keys)
            #expect(accepted.isSubset(of: numbers), "missing: \(accepted.subtracting(numbers).sorted())")
            #expect(numbers.isDisjoint(with: refused.keys), "refused yet handled: \(numbers.intersection(refused.keys).sorted())")
        }
    }

    @Test(
        "a full file system with room in the inbox log's last block: a commit that fits there is kept without the zeros it would write ahead, one that does not is refused, and room is written again once there is space",
        .enabled(if: PrivateMount.available, "needs mount namespaces (root with CAP_SYS_ADMIN)"))
    func diskFullWithRoomInTheLastBlock() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-fault")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        let mount = try PrivateMount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", directory + "/data"])
        let path = mount.path(directory + "/data/inbox.log")
        let window = DeduplicationWindow(maximumCount: 100, maximumAge: .seconds(60))
        func record(_ id: String, size: Int) -> InboxRecord {
            InboxRecord(
                messageID: id, userInfo: Array(repeating: UInt8(ascii: "x"), count: size), targetKind: "token", targetValue: "t",
                collapseKey: nil, priority: 10, expiration: nil, receivedAt: 0)
        }
        do {
            let log = try InboxLog(path: path)
            // The header is in the file's first block (a page on tmpfs); the rest of the file system is taken.
            let filler = mount.path(directory + "/data/filler")
            #expect(fillUp(filler) == ENOSPC)
            try log.commit(accepted: [record("fits", size: 1000)], finished: [], window: window, now: 0)
            var status = stat()
            #expect(stat(path, &status) == 0 && Int(status.st_size) == log.size && log.fileEnd == log.size, "no room written ahead")
            let error = #expect(throws: StoreError.self) {
                try log.commit(accepted: [record("does-not-fit", size: 8192)], finished: [], window: window, now: 0)
            }
            guard case .writeFailed(_, let detail)? = error else {
                Issue.record("expected writeFailed, got \(String(describing: error))")
                return
            }
            #expect(detail.contains("No space left on device"), "\(detail)")
            #expect(unlink(filler) == 0)
            try log.commit(accepted: [record("after", size: 8192)], finished: ["fits"], window: window, now: 0)
            #expect(log.fileEnd == log.roomAhead, "room written ahead again")
        }
        let state = try InboxLog(path: path).load(window: window, now: 0)
        #expect(state.pending.map(\.messageID) == ["after"])
    }

    @Test(
        "a compaction that fails on a full disk does not fail the commit that asked for it: the commit is kept, the senders answered, and the compaction is done once there is space",
        .enabled(if: PrivateMount.available, "needs mount namespaces (root with CAP_SYS_ADMIN)"))
    func compactionOnAFullDisk() throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-fault")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/data", withIntermediateDirectories: true)
        let mount = try PrivateMount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", directory + "/data"])
        let path = mount.path(directory + "/data/inbox.log")
        let window = DeduplicationWindow(maximumCount: 0, maximumAge: .seconds(60))
        func record(_ id: String) -> InboxRecord {
            InboxRecord(
                messageID: id, userInfo: Array(repeating: UInt8(ascii: "x"), count: 2000), targetKind: "token", targetValue: "t",
                collapseKey: nil, priority: 10, expiration: nil, receivedAt: 0)
        }
        var last = ""
        do {
            let log = try InboxLog(path: path)
            // Each commit accepts a record and finishes the one before: the file grows, what is live stays one record.
            log.compactionThreshold = .max
            for index in 1...10 {
                try log.commit(accepted: [record("m\(index)")], finished: index > 1 ? ["m\(index - 1)"] : [], window: window, now: 0)
            }
            #expect(log.fileEnd == log.roomAhead, "room ahead for the commits below")
            let filler = mount.path(directory + "/data/filler")
            #expect(fillUp(filler) == ENOSPC)
            // Now due at every commit; the compacted file cannot be written.
            log.compactionThreshold = 4 << 10
            log.compactionFactor = 1
            let before = log.size
            try log.commit(accepted: [record("m11")], finished: ["m10"], window: window, now: 0)
            #expect(log.size > before, "the commit went into the room ahead")
            guard case .writeFailed(_, let detail)? = log.compactionFailure else {
                Issue.record("expected a failed compaction, got \(String(describing: log.compactionFailure))")
                return
            }
            #expect(detail.contains("No space left on device"), "\(detail)")
            #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))
            // The next commits are not slowed by an attempt each: none until the file has grown by 64 KiB.
            try log.commit(accepted: [record("m12")], finished: ["m11"], window: window, now: 0)
            #expect(log.compactionFailure != nil)
            #expect(unlink(filler) == 0)
            var index = 13
            while log.compactionFailure != nil, index < 100 {
                try log.commit(accepted: [record("m\(index)")], finished: ["m\(index - 1)"], window: window, now: 0)
                index += 1
            }
            #expect(log.compactionFailure == nil, "compacted once there was space")
            #expect(log.size < 8 << 10, "compacted to what is live: \(log.size) bytes")
            last = "m\(index - 1)"
        }
        let state = try InboxLog(path: path).load(window: window, now: 0)
        #expect(state.pending.map(\.messageID) == [last])
    }

    @Test(
        "the file system turns read-only under the daemon (an ext4 error, as errors=remount-ro does): senders are refused, the daemon keeps running, nothing accepted is lost",
        .enabled(
            if: PrivateMount.available && PrivateMount.loopDevicesAvailable,
            "needs mount namespaces and loop devices (root with CAP_SYS_ADMIN)"),
        .timeLimit(.minutes(2)))
    func readOnlyFileSystem() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let image = directory + "/data.ext4"
            let data = directory + "/data"
            try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
            #expect(FileManager.default.createFile(atPath: image, contents: nil))
            #expect(truncate(image, 32 << 20) == 0)
            let mkfs = try await runExecutable(URL(fileURLWithPath: "/sbin/mkfs.ext4"), ["-q", "-F", "-m", "0", image])
            try #require(mkfs.status == 0, "\(mkfs.error)")
            let mount = try PrivateMount(["-o", "loop,errors=remount-ro", image, data])
            let device = try #require(mount.source.split(separator: "/").last.map(String.init), "no loop device for \(image)")
            let daemon = try await mount.daemon(logs: directory, data: data)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let handled = daemon.collectRemainingLines()
            var sender = NumberedSender(port: daemon.httpPort, token: token)
            for _ in 0..<20 { #expect(try sender.send() == 200) }

            // What the kernel does on a metadata error with errors=remount-ro: the file system is read-only at once,
            // open files included (a remount would be refused while the store is open for writing).
            try "herald fault injection\n".write(toFile: "/sys/fs/ext4/\(device)/trigger_fs_error", atomically: false, encoding: .utf8)
            var refused: Set<Int> = []
            for _ in 0..<20 {
                let (status, body) = try sender.sendWithBody()
                if status != 200 {
                    refused.insert(sender.sent)
                    #expect(status == 503 && body.contains("UNAVAILABLE"), "\(status) \(body)")
                }
            }
            #expect(refused.count == 20, "accepted on a read-only file system: \(Set(21...40).subtracting(refused).sorted())")
            #expect(daemon.process.isRunning)
            #expect(await daemon.terminate() == 0, "\(daemon.log)")

            // The store as the file system kept it, on a disk that works: what was accepted and not finished is
            // replayed; together with the first run, every accepted message is handled.
            let copy = directory + "/copy"
            try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
            for file in ["herald.sqlite", "herald.sqlite-wal", "inbox.log"]
            where FileManager.default.fileExists(atPath: mount.path(data + "/" + file)) {
                try FileManager.default.copyItem(atPath: mount.path(data + "/" + file), toPath: copy + "/" + file)
            }
            var numbers = handledNumbers(handled.lines())
            let again = try await DaemonProcess.start(directory: copy, arguments: ["--socket", "none"])
            #expect(await echoedToken(again)?.token == token, "the identity survived")
            while !Set(1...20).isSubset(of: numbers), let line = await again.line() {
                numbers.formUnion(handledNumbers([line]))
            }
            #expect(await again.terminate() == 0, "\(again.log)")
            #expect(Set(1...20).isSubset(of: numbers), "missing: \(Set(1...20).subtracting(numbers).sorted())")
            #expect(numbers.isDisjoint(with: refused))
        }
    }

    @Test(
        "a store damaged between runs stops the start with one line naming the file, and exit status 1: the database file after a clean stop, the write-ahead log after a kill",
        arguments: [false, true])
    func damagedStore(killed: Bool) async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--socket", "none"])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            var sender = NumberedSender(port: daemon.httpPort, token: token)
            for _ in 0..<5 { #expect(try sender.send() == 200) }
            if killed {
                kill(daemon.process.processIdentifier, SIGKILL)
                await waitUntilExitWithoutSpinning(daemon.process)
            } else {
                #expect(await daemon.terminate() == 0)
                #expect(
                    !FileManager.default.fileExists(atPath: directory + "/herald.sqlite-wal")
                        || FileManager.default.contents(atPath: directory + "/herald.sqlite-wal")?.isEmpty == true,
                    "a clean stop leaves one self-contained file")
            }
            // Every byte of the file replaced (a bad disk block, a stray write).
            let path = directory + (killed ? "/herald.sqlite-wal" : "/herald.sqlite")
            let size = try #require(FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
            #expect(size > 0)
            try Data(repeating: 0x5A, count: size).write(to: URL(fileURLWithPath: path))
            let result = try await runHerald(["serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none", "--echo"])
            #expect(result.status == 1)
            #expect(result.output.isEmpty, "no identity was minted, nothing received: \(result.output)")
            #expect(result.error.split(separator: "\n").count == 1, "\(result.error)")
            #expect(result.error.contains(path) && result.error.contains("damaged"), "\(result.error)")
        }
    }

    @Test("a store deleted between runs stops the start, naming what is left: the write-ahead log of a killed run, or the analytics store")
    func deletedStore() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            // Killed with messages in its write-ahead log, then herald.sqlite deleted: SQLite alone would drop the log.
            let killed = try await DaemonProcess.start(directory: directory, arguments: ["--socket", "none"])
            let token = try #require(await echoedToken(killed)?.token, "\(killed.log)")
            var sender = NumberedSender(port: killed.httpPort, token: token)
            for _ in 0..<5 { #expect(try sender.send() == 200) }
            kill(killed.process.processIdentifier, SIGKILL)
            await waitUntilExitWithoutSpinning(killed.process)
            #expect(FileManager.default.fileExists(atPath: directory + "/herald.sqlite-wal"))
            try FileManager.default.removeItem(atPath: directory + "/herald.sqlite")
            let orphaned = try await runHerald(["serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none"])
            #expect(orphaned.status == 1)
            #expect(
                orphaned.error.contains(directory + "/herald.sqlite-wal") && orphaned.error.contains("deleted or moved"),
                "\(orphaned.error)")
            #expect(!orphaned.output.contains("registration token"), "no new identity was minted")

            // Stopped cleanly (no log left), then deleted: the analytics store of that run gives it away.
            try FileManager.default.removeItem(atPath: directory + "/herald.sqlite-wal")
            try? FileManager.default.removeItem(atPath: directory + "/herald.sqlite-shm")
            let missing = try await runHerald(["serve", "--data-dir", directory, "--http", "127.0.0.1:0", "--socket", "none"])
            #expect(missing.status == 1)
            #expect(
                missing.error.contains(directory + "/herald.sqlite is missing") && missing.error.contains("analytics.sqlite"),
                "\(missing.error)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/herald.sqlite"), "no new store was created")
        }
    }

    @Test(
        "a handler that crashes the process: the message was acknowledged, and the next start replays it to the handlers",
        .disabled(
            if: runningUnderThreadSanitizer,
            "under Thread Sanitizer the abort ends in the sanitizer's own failed check, and the child's end is at times never reported to Foundation's Process, which then waits for ever; the plain run covers it"
        ),
        .timeLimit(.minutes(1)))
    func handlerCrash() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let plugin = buildProductsDirectory.appendingPathComponent("libHeraldTestPlugin.so").path
            let flag = directory + "/crash-once"
            #expect(FileManager.default.createFile(atPath: flag, contents: nil))
            // No Swift backtrace either: under Address Sanitizer the backtracer's memory server trips ASan's own check
            // and the aborting daemon never ends.
            let environment = ["TEST_PLUGIN_CRASH_FLAG": flag, "SWIFT_BACKTRACE": "enable=no"]
            // No core file: the abort is the test.
            let noCore = ["prlimit", "--core=0", "--"]
            let daemon = try await DaemonProcess.start(
                directory: directory, arguments: ["--socket", "none", "--plugin", plugin], environment: environment, launcher: noCore)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            var sender = NumberedSender(port: daemon.httpPort, token: token)
            for _ in 0..<5 { #expect(try sender.send() == 200) }
            let crash = #"{"message": {"token": "\#(token)", "data": {"crash": "yes", "n": "99"}}}"#
            let answer = try httpRequest(port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: crash)
            #expect(answer.status == 200, "committed before the handler ran: \(answer.body)")
            // A bounded wait rather than waitUntilExit(): a test that fails here should say so, not hang.
            _ = await eventuallyValue { daemon.process.isRunning ? nil : true }
            try #require(!daemon.process.isRunning, "the daemon did not crash; log: \(daemon.log)")
            #expect(daemon.process.terminationReason == .uncaughtSignal && daemon.process.terminationStatus == SIGABRT, "\(daemon.log)")
            #expect(!FileManager.default.fileExists(atPath: flag))

            let restarted = try await DaemonProcess.start(
                directory: directory, arguments: ["--socket", "none", "--plugin", plugin], environment: environment, launcher: noCore)
            #expect(await echoedToken(restarted)?.token == token)
            let replay = try #require(
                await eventuallyValue { () -> JSONValue? in
                    guard let event = await restarted.event() else { return nil }
                    if event["userInfo"]?["crash"] == "yes" { return event }
                    return nil
                }, "the crashing message was not replayed; log: \(restarted.log)")
            #expect(replay["userInfo"]?["n"] == "99")
            #expect(await restarted.terminate() == 0, "\(restarted.log)")
        }
    }

    @Test(
        "a message whose handler crashes the process every time: replayed at the next starts up to max-replays, then quarantined, and the daemon serves again",
        .disabled(
            if: runningUnderThreadSanitizer,
            "as handlerCrash: under Thread Sanitizer a child's abort is at times never reported to Foundation's Process"),
        .timeLimit(.minutes(2)))
    func poisonMessageQuarantined() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let plugin = buildProductsDirectory.appendingPathComponent("libHeraldTestPlugin.so").path
            let environment = ["TEST_PLUGIN_CRASH_ALWAYS": "1", "SWIFT_BACKTRACE": "enable=no"]
            let arguments = ["--socket", "none", "--plugin", plugin, "--max-replays", "2"]
            func start() async throws -> DaemonProcess {
                try await DaemonProcess.start(
                    directory: directory, arguments: arguments, environment: environment, launcher: ["prlimit", "--core=0", "--"])
            }
            func crashed(_ daemon: DaemonProcess) async throws -> Bool {
                _ = await eventuallyValue { daemon.process.isRunning ? nil : true }
                return !daemon.process.isRunning && daemon.process.terminationStatus == SIGABRT
            }
            let daemon = try await start()
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let poison = #"{"message": {"token": "\#(token)", "data": {"crash": "yes", "n": "66"}}}"#
            let answer = try httpRequest(port: daemon.httpPort, "POST", "/v1/projects/demo/messages:send", body: poison)
            #expect(answer.status == 200, "\(answer.body)")
            try #require(try await crashed(daemon), "the daemon did not crash; log: \(daemon.log)")
            // Starts 1 and 2 replay it (and crash again); start 3 quarantines it.
            for attempt in 1...2 {
                let again = try await start()
                try #require(try await crashed(again), "start \(attempt) did not replay the poison message; log: \(again.log)")
            }
            let survivor = try await start()
            #expect(await echoedToken(survivor)?.token == token, "\(survivor.log)")
            var sender = NumberedSender(port: survivor.httpPort, token: token)
            #expect(try sender.send() == 200)
            // The quarantine's own `dropped` event comes before or after the token's, as the start goes: skipped.
            let event = await eventuallyValue { () -> JSONValue? in
                guard let event = await survivor.event(), event["userInfo"] != nil else { return nil }
                return event
            }
            #expect(event?["userInfo"]?["n"] == "1", "\(String(describing: event)); log: \(survivor.log)")
            // The replay ran at start, before the message above.
            #expect(survivor.log.contains("quarantined, not replayed again") && survivor.log.contains("starts=3"), "\(survivor.log)")
            #expect(survivor.process.isRunning)
            let name = try JSONParser.parse(Array(answer.body.utf8))["name"]?.stringValue ?? ""
            let id = String(name.split(separator: "/").last ?? "")

            // herald quarantine list (the daemon may run), and release (it must not).
            // The quarantine is written with the store's next group commit, which may follow the log line.
            let listed = try #require(
                await eventuallyValue { () -> (status: Int32, output: String, error: String)? in
                    let listed = try? await runHerald(["quarantine", "list", "--data-dir", directory])
                    return listed?.output.isEmpty == false ? listed : nil
                }, "nothing quarantined; log: \(survivor.log)")
            #expect(listed.status == 0, "\(listed.error)")
            let line = try JSONParser.parse(Array(listed.output.utf8))
            #expect(line["messageID"]?.stringValue == id && line["starts"] == .int(3) && line["userInfo"]?["n"] == "66", "\(listed.output)")
            #expect(line["target"]?["token"]?.stringValue == token)
            let whileRunning = try await runHerald(["quarantine", "release", "--data-dir", directory, id])
            #expect(
                whileRunning.status == 1 && whileRunning.error.contains("a daemon is running in \(directory): stop it first"),
                "\(whileRunning.error)")
            #expect(await survivor.terminate() == 0, "\(survivor.log)")

            let unknown = try await runHerald(["quarantine", "release", "--data-dir", directory, id, "no-such-id"])
            #expect(
                unknown.status == 1 && unknown.error.contains("not quarantined in \(directory): no-such-id; nothing was released"),
                "\(unknown.error)")
            do {
                let store = try SQLiteStore(directory: directory)
                #expect(try store.quarantine().map(\.record.messageID) == [id])
                #expect(try store.quarantine().first?.replays == 3)
            }
            let released = try await runHerald(["quarantine", "release", "--data-dir", directory, id])
            #expect(released.status == 0 && released.output.contains("released \(id)"), "\(released.error)")
            #expect(try await runHerald(["quarantine", "list", "--data-dir", directory]).output.isEmpty)

            // With the handler fixed (no crash), the next start replays it.
            let fixed = try await DaemonProcess.start(
                directory: directory, arguments: ["--socket", "none", "--plugin", plugin], environment: ["SWIFT_BACKTRACE": "enable=no"])
            let replayed = try #require(
                await eventuallyValue { () -> JSONValue? in
                    guard let event = await fixed.event() else { return nil }
                    // (Not `cond ? event : nil`: JSONValue takes the nil literal, as .null, which would end the wait.)
                    if event["userInfo"]?["n"] == "66" { return event }
                    return nil
                }, "the released message was not replayed; log: \(fixed.log)")
            #expect(replayed["messageID"]?.stringValue == id, "\(replayed)")
            #expect(await fixed.terminate() == 0, "\(fixed.log)")
        }
    }

    @Test(
        "out of file descriptors: connections past the limit are closed at once, one warning is logged, the loop does not spin, and accepting resumes when descriptors free up",
        .timeLimit(.minutes(1)))
    func fileDescriptorExhaustion() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            let daemon = try await DaemonProcess.start(directory: directory, arguments: ["--socket", "none"])
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            let pid = daemon.process.processIdentifier
            // Room for about 8 connections above what the daemon has open now (StreamServer keeps 16 back).
            let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
            let limit = open + StreamServer.reservedDescriptors + 8
            let prlimit = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/prlimit"), ["--pid", "\(pid)", "--nofile=\(limit):\(limit)"])
            try #require(prlimit.status == 0, "\(prlimit.error)")

            var clients: [TestSocketClient] = []
            for _ in 0..<40 { clients.append(try TestSocketClient(.tcp(host: "127.0.0.1", port: daemon.httpPort))) }
            let health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            var answered = 0
            var closed = 0
            for client in clients {
                client.send(health)
                let reply = client.read { $0.count >= 12 }
                if reply.starts(with: Array("HTTP/1.1 200".utf8)) { answered += 1 } else if reply.isEmpty { closed += 1 }
            }
            #expect(answered >= 1 && answered <= 10, "answered \(answered)")
            #expect(answered + closed == 40, "every client was answered or closed at once, none hangs")

            // Still out of descriptors and clients keep knocking: no spinning, no line per client.
            let before = cpuTicks(pid)
            var knocking: [TestSocketClient] = []
            for _ in 0..<40 { knocking.append(try TestSocketClient(.tcp(host: "127.0.0.1", port: daemon.httpPort))) }
            // A window of CPU time, not a wait for an outcome: the daemon must stay idle through it.
            try await Task.sleep(for: .seconds(1))
            let ticks = cpuTicks(pid) - before
            knocking.removeAll()
            #expect(ticks < 50, "the daemon used \(ticks) ticks (1/100 s) in a second: it spins")
            #expect(daemon.log.components(separatedBy: "accept failed").count - 1 == 1, "\(daemon.log)")
            #expect(daemon.log.contains("EMFILE") && daemon.log.contains("out of file descriptors"), "\(daemon.log)")

            // A connection that was accepted still works, messages included.
            var sender = NumberedSender(port: daemon.httpPort, token: token)
            clients.removeAll()
            let port = daemon.httpPort
            #expect(await eventually { (try? httpRequest(port: port, "GET", "/healthz").status) == 200 })
            #expect(try sender.send() == 200)
            #expect(daemon.log.contains("accepting connections again"), "\(daemon.log)")
            #expect(await daemon.event()?["userInfo"]?["n"] == "1")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")
        }
    }

    @Test(
        "without libnats (hidden in a private mount namespace) herald serve runs with NATS off, and with NATS configured it stops at start naming the missing library",
        .enabled(if: PrivateMount.available, "needs mount namespaces (root with CAP_SYS_ADMIN)"),
        .timeLimit(.minutes(1)))
    func withoutLibNATS() async throws {
        try await withTemporaryDirectory(prefix: "herald-fault") { directory in
            // libnats is loaded with dlopen when NATS is first used: an empty file in its place makes that fail.
            let libdir = try await runExecutable(URL(fileURLWithPath: "/usr/bin/pkg-config"), ["--variable=libdir", "libnats"])
            let library = URL(fileURLWithPath: libdir.output.trimmingCharacters(in: .whitespacesAndNewlines) + "/libnats.so")
                .resolvingSymlinksInPath().path
            try #require(FileManager.default.fileExists(atPath: library), "libnats-dev is installed by scripts/bootstrap")
            let mount = try PrivateMount(["--bind", "/dev/null", library])
            let data = directory + "/data"
            let daemon = try await mount.daemon(logs: directory, data: data)
            let token = try #require(await echoedToken(daemon)?.token, "\(daemon.log)")
            var sender = NumberedSender(port: daemon.httpPort, token: token)
            #expect(try sender.send() == 200)
            #expect(await daemon.event()?["userInfo"]?["n"] == "1")
            let maps = (try? String(contentsOfFile: "/proc/\(daemon.process.processIdentifier)/maps", encoding: .utf8)) ?? ""
            #expect(!maps.contains("libnats") && !maps.contains("libssl"), "NATS off maps neither libnats nor OpenSSL")
            #expect(await daemon.terminate() == 0, "\(daemon.log)")

            let refused = try await runExecutable(
                URL(fileURLWithPath: "/usr/bin/nsenter"),
                [
                    "-t", "\(mount.processIdentifier)", "-m", "--", heraldExecutable.path, "serve", "--data-dir", data,
                    "--http", "127.0.0.1:0", "--socket", "none", "--nats-server", "nats://127.0.0.1:1",
                ])
            #expect(refused.status != 0)
            #expect(
                refused.error.contains("NATS needs the NATS C client") && refused.error.contains("libnats.so.3.4")
                    && refused.error.contains("leave NATS off"), "\(refused.error)")
        }
    }
}

// MARK: - Helpers

/// Sends data messages numbered 1, 2, 3 ... (`data.n`) with a 3,000-byte payload over HTTP, one connection each.
struct NumberedSender {
    let port: Int
    let token: String
    private(set) var sent = 0

    init(port: Int, token: String) {
        self.port = port
        self.token = token
    }

    mutating func send() throws -> Int { try sendWithBody().status }

    mutating func sendWithBody() throws -> (status: Int, body: String) {
        sent += 1
        let pad = String(repeating: "p", count: 3_000)
        let body = #"{"message": {"token": "\#(token)", "data": {"n": "\#(sent)", "pad": "\#(pad)"}}}"#
        return try httpRequest(port: port, "POST", "/v1/projects/demo/messages:send", body: body)
    }
}

/// The `data.n` of every `--echo` message line.
func handledNumbers(_ lines: [String]) -> Set<Int> {
    Set(
        lines.compactMap { line in
            (try? JSONParser.parse(Array(line.utf8)))?["userInfo"]?["n"]?.stringValue.flatMap { Int($0) }
        })
}

/// Writes zeros to `path` until a write fails; that write's errno.
func fillUp(_ path: String) -> Int32 {
    // Close-on-exec: a child that another test spawns meanwhile (libuv's `uv_spawn` keeps every descriptor without
    // it, as an exec fetch worker's child does) would otherwise hold the file open for as long as it runs, and its
    // space would not come back when the test removes it.
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { return errno }
    defer { close(fd) }
    let chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let written = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written < 0 { return errno }
        if written < chunk.count {
            // A short write: the next one fails with the reason.
            continue
        }
    }
}

/// User plus system CPU time of process `pid`, in clock ticks (1/100 s).
func cpuTicks(_ pid: Int32) -> Int {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let end = stat.lastIndex(of: ")")
    else { return 0 }
    let fields = stat[stat.index(after: end)...].split(separator: " ")
    return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
}

/// A file system mounted in a private mount namespace: a holder process (`unshare -m`) mounts it and sleeps. A
/// daemon started through ``launcher`` (`nsenter`) sees the mount; the test reaches it at ``path(_:)``
/// (`/proc/PID/root/...`); nothing outside sees it, and it goes away with the holder.
final class PrivateMount {
    private let process = Process()
    private let output = Pipe()
    /// The mounted source as the kernel names it (`tmpfs`, `/dev/loop3`).
    private(set) var source = ""

    /// Whether this machine lets the test mount in a private namespace (root with CAP_SYS_ADMIN, as CI runs).
    static let available: Bool = {
        let probe = try? runExecutable(
            URL(fileURLWithPath: "/usr/bin/unshare"),
            ["-m", "--propagation", "private", "/bin/sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"])
        return probe?.status == 0
    }()

    /// Whether loop devices can be set up (a loop-mounted ext4 image).
    static let loopDevicesAvailable: Bool =
        FileManager.default.fileExists(atPath: "/dev/loop-control")
        && FileManager.default.isExecutableFile(atPath: "/sbin/mkfs.ext4")

    /// Runs `mount arguments...` in a new private mount namespace; the last argument is the mount point.
    init(_ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        process.arguments =
            [
                "-m", "--propagation", "private", "/bin/sh", "-c",
                #"mount "$@" && eval "findmnt -n -o SOURCE \"\${$#}\"" && exec sleep 3600"#, "sh",
            ] + arguments
        process.standardOutput = output
        process.standardError = output
        try runWithNoSignalsBlocked(process)
        let reply = PipeLine(output.fileHandleForReading.fileDescriptor).next()
        guard let reply, !reply.isEmpty, process.isRunning else {
            throw MountError(description: "cannot mount \(arguments): \(reply ?? "no answer")")
        }
        source = reply
    }

    /// The holder process, whose mount namespace this is.
    var processIdentifier: Int32 { process.processIdentifier }

    /// The command line that runs a program inside the namespace.
    var launcher: [String] { ["nsenter", "-t", "\(process.processIdentifier)", "-m", "--"] }

    /// Where the test reaches `path` of the namespace.
    func path(_ path: String) -> String { "/proc/\(process.processIdentifier)/root\(path)" }

    /// `herald serve --echo` inside the namespace with its data directory at `data`, HTTP only; its log in `logs`.
    func daemon(logs: String, data: String) async throws -> DaemonProcess {
        let port = try freeLoopbackPort()
        return try await DaemonProcess.start(
            directory: logs, httpPort: port,
            arguments: ["serve", "--http", "127.0.0.1:\(port)", "--data-dir", data, "--project-id", "demo", "--echo", "--socket", "none"],
            launcher: launcher)
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        waitUntilExitWithoutSpinning(process)
    }
}

/// Reads one line from a pipe, waiting at most 10 s.
private struct PipeLine {
    let fd: Int32

    init(_ fd: Int32) { self.fd = fd }

    func next() -> String? {
        var bytes: [UInt8] = []
        while true {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 10_000) > 0 else { return nil }
            var byte: UInt8 = 0
            guard read(fd, &byte, 1) == 1 else { return bytes.isEmpty ? nil : String(decoding: bytes, as: UTF8.self) }
            if byte == UInt8(ascii: "\n") { return String(decoding: bytes, as: UTF8.self) }
            bytes.append(byte)
        }
    }
}

/// A mount the holder could not make.
struct MountError: Error, CustomStringConvertible {
    let description: String
}
