import Foundation
import Herald
import HeraldTesting
import Testing

@Suite("The EchoReceiver and LoopEcho examples, as child processes")
struct ExamplesTests {
    @Test("EchoReceiver with no arguments feeds its samples through the bus, prints what the handlers see, exits 0")
    func echoReceiverSamples() async throws {
        let run = try await runBuiltExecutable("EchoReceiver", [])
        #expect(run.status == 0, "\(run.error)")
        let output = run.output
        let token = try #require(output.split(separator: "\n").first { $0.hasPrefix("Firebase registration token: ") })
        #expect(token.contains(":"), "\(token)")
        #expect(output.components(separatedBy: "accepted: projects/herald/messages/").count - 1 == 4, "\(output)")
        #expect(output.components(separatedBy: "refused: ").count - 1 == 1, "\(output)")
        #expect(output.contains("willPresent userInfo: "), "the notifications reach willPresent")
        #expect(output.contains("customValue"), "with their data")
        #expect(output.contains("background fetch userInfo: "), "the silent message wakes the fetch worker")
        #expect(output.contains("Lisbon"))
        #expect(output.contains("message userInfo: "), "the data message reaches the message handler")
        #expect(output.contains("digest"))
        #expect(output.contains("--- the person opens the first notification"))
        #expect(output.contains("didReceive response com.apple.UNNotificationDefaultActionIdentifier"), "\(output)")
    }

    @Test("EchoReceiver --listen takes send bodies on its Unix socket until SIGTERM, then removes the socket and exits 0")
    func echoReceiverListens() async throws {
        try await withTemporaryDirectory(prefix: "herald-echo-receiver") { directory in
            let socket = "\(directory)/herald.sock"
            let child = try ExampleProcess("EchoReceiver", ["--listen", socket])
            var ready = false
            while !ready, let line = await child.line() { ready = line == "listening; SIGINT or SIGTERM stops" }
            try #require(ready, "never said it listens")
            let client = try TestSocketClient(.unix(path: socket))
            client.send(#"{"message": {"topic": "weather", "data": {"city": "Porto"}}}"# + "\n")
            let answer = client.readLines(1).first ?? ""
            #expect(answer.contains(#""name":"projects/herald/messages/"#), "\(answer)")
            #expect(await child.terminate() == 0)
            #expect(!FileManager.default.fileExists(atPath: socket))
            let output = child.remainingOutput()
            #expect(output.contains("message userInfo: "), "\(output)")
            #expect(output.contains("Porto"))
            #expect(output.contains("shutting down"))
        }
    }

    @Test(
        "LoopEcho echoes over TCP and its Unix socket on the port and path it is given; SIGTERM stops it cleanly",
        arguments: [SIGTERM, SIGINT])
    func loopEcho(signal: Int32) async throws {
        try await withTemporaryDirectory(prefix: "herald-loop-echo") { directory in
            let socket = "\(directory)/loop-echo.sock"
            let child = try ExampleProcess("LoopEcho", ["0", socket])
            let tcpLine = try #require(await child.line(), "no output")
            let port = try #require(
                tcpLine.hasPrefix("listening on 127.0.0.1:") ? Int(tcpLine.split(separator: ":").last ?? "") : nil, "\(tcpLine)")
            #expect(port != 0)
            #expect(await child.line() == "listening on unix:\(socket)")

            for address in [SocketAddress.tcp(host: "127.0.0.1", port: port), .unix(path: socket)] {
                let client = try TestSocketClient(address)
                client.send("hello over \(address)\n")
                #expect(client.readLines(1) == ["hello over \(address)"])
                client.halfClose()
                #expect(client.readsEndOfFile(), "the echo closes once the peer is done")
            }
            // A connection still open when the signal comes is closed by the shutdown.
            let open = try TestSocketClient(.tcp(host: "127.0.0.1", port: port))
            open.send("still here\n")
            #expect(open.readLines(1) == ["still here"])

            #expect(await child.terminate(with: signal) == 0)
            #expect(open.readsEndOfFile())
            #expect(!FileManager.default.fileExists(atPath: socket), "the socket file is removed")
            let output = child.remainingOutput()
            #expect(output.contains("signal \(signal): shutting down"), "\(output)")
            #expect(output.contains("stopped: 0 handles left open"), "\(output)")
        }
    }
}

/// An example executable built beside the test bundle, running as a child process: its standard output read line
/// by line (10 s at most per line), its standard error collected.
final class ExampleProcess {
    let process = Process()
    private let output = Pipe()
    private let errors: PipeDrain
    private let lines: LineReader

    init(_ name: String, _ arguments: [String]) throws {
        process.executableURL = buildProductsDirectory.appendingPathComponent(name)
        process.arguments = arguments
        process.standardOutput = output
        let errorPipe = Pipe()
        process.standardError = errorPipe
        lines = LineReader(output.fileHandleForReading.fileDescriptor)
        try runWithNoSignalsBlocked(process)
        errors = PipeDrain(errorPipe.fileHandleForReading.fileDescriptor)
    }

    /// The next line of standard output, or `nil` at end of file or after 10 s without one.
    func line() async -> String? { await lines.line() }

    /// Sends `signal` and waits for the exit status.
    func terminate(with signal: Int32 = SIGTERM) async -> Int32 {
        kill(process.processIdentifier, signal)
        await waitUntilExitWithoutSpinning(process)
        return process.terminationStatus
    }

    /// The standard output not read yet and the standard error, once the process has exited.
    func remainingOutput() -> String {
        let rest = PipeDrain(output.fileHandleForReading.fileDescriptor, initial: lines.takeBuffered()).bytes()
        return String(decoding: rest, as: UTF8.self) + String(decoding: errors.bytes(), as: UTF8.self)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            waitUntilExitWithoutSpinning(process)
        }
    }
}
