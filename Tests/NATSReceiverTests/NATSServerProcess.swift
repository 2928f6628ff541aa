import CNATS
import Foundation
import HeraldTesting

/// A real `nats-server` with JetStream, on a loopback port of its own and a store directory of its own, started
/// and stopped by the test (and restarted on the same port and store, for the reconnect test).
final class NATSServerProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is touched by the test's task only, one call at a time.
    let port: Int
    let storeDirectory: String
    private var process: Process?
    private var log: PipeDrain?

    var url: String { "nats://127.0.0.1:\(port)" }

    /// Starts a server on a free loopback port with a fresh store under /tmp, and waits until it accepts.
    init() throws {
        port = try freeLoopbackPort()
        storeDirectory = "/tmp/herald-nats-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: storeDirectory, withIntermediateDirectories: true)
        try start()
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: storeDirectory)
    }

    /// Starts the server (again) on the same port and store, and waits until it accepts connections.
    func start() throws {
        precondition(process == nil, "the server is running")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["-js", "-a", "127.0.0.1", "-p", "\(port)", "-sd", storeDirectory]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        self.process = process
        log = PipeDrain(output.fileHandleForReading.fileDescriptor)
        let deadline = Date().addingTimeInterval(10)
        while !Self.accepts(port: port) {
            guard process.isRunning, Date() < deadline else {
                throw NATSTestError.serverDidNotStart(port: port, log: stopAndReadLog())
            }
            usleep(5_000)
        }
    }

    /// SIGTERM, and waits for the server to exit (it syncs its store first).
    func stop() {
        guard let process else { return }
        process.terminate()
        process.waitUntilExit()
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    /// SIGKILL, and waits.
    func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    private func stopAndReadLog() -> String {
        process?.terminate()
        process?.waitUntilExit()
        process = nil
        let text = log.map { String(decoding: $0.bytes(), as: UTF8.self) } ?? ""
        log = nil
        return text
    }

    static var executable: String {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].first { FileManager.default.isExecutableFile(atPath: $0) }
            ?? "/usr/sbin/nats-server"
    }

    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }
}

enum NATSTestError: Error, CustomStringConvertible {
    case serverDidNotStart(port: Int, log: String)
    case client(String)

    var description: String {
        switch self {
        case .serverDidNotStart(let port, let log): "nats-server did not start on port \(port): \(log)"
        case .client(let detail): "NATS test client: \(detail)"
        }
    }
}

/// A plain cnats connection (cnats's own threads, no event loop) that plays the sender: publishes to JetStream,
/// to core subjects, and makes requests.
final class NATSTestClient: @unchecked Sendable {
    // @unchecked Sendable: cnats connections and JetStream contexts are safe to use from any thread.
    private let connection: OpaquePointer
    private let jetStream: OpaquePointer

    init(url: String, reconnect: Bool = false) throws {
        var options: OpaquePointer?
        natsOptions_Create(&options)
        defer { natsOptions_Destroy(options) }
        natsOptions_SetURL(options, url)
        natsOptions_SetAllowReconnect(options, reconnect)
        natsOptions_SetMaxReconnect(options, -1)
        natsOptions_SetReconnectWait(options, 50)
        var connection: OpaquePointer?
        let status = natsConnection_Connect(&connection, options)
        guard status == NATS_OK, let connection else { throw NATSTestError.client("connect: \(String(cString: herald_nats_last_error(status)))") }
        self.connection = connection
        var jsOptions = jsOptions()
        jsOptions_Init(&jsOptions)
        var jetStream: OpaquePointer?
        natsConnection_JetStream(&jetStream, connection, &jsOptions)
        self.jetStream = jetStream!
    }

    deinit {
        jsCtx_Destroy(jetStream)
        natsConnection_Destroy(connection)
    }

    /// Publishes through JetStream and returns the stream sequence once the stream stored the message.
    @discardableResult
    func publishStored(_ subject: String, _ body: String, messageID: String? = nil, timeout: Int64 = 2000) throws -> UInt64 {
        var sequence: UInt64 = 0
        var code = jsErrCode(rawValue: 0)
        let bytes = Array(body.utf8)
        let status = bytes.withUnsafeBytes {
            herald_nats_publish_stored(jetStream, subject, $0.baseAddress, Int32($0.count), messageID, timeout, &sequence, &code)
        }
        guard status == NATS_OK else { throw NATSTestError.client("publish to \(subject): \(String(cString: herald_nats_last_error(status))) (\(code.rawValue))") }
        return sequence
    }

    /// Publishes on core NATS (no answer, no storage); with `flush`, waits until the server has it.
    func publish(_ subject: String, _ body: String, flush: Bool = true) throws {
        let status = natsConnection_PublishString(connection, subject, body)
        guard status == NATS_OK else { throw NATSTestError.client("publish to \(subject): \(String(cString: natsStatus_GetText(status)))") }
        if flush { natsConnection_FlushTimeout(connection, 2000) }
    }

    /// A core NATS request: the receiver's answer.
    func request(_ subject: String, _ body: String, timeout: Int64 = 2000) throws -> String {
        var reply: OpaquePointer?
        let status = natsConnection_RequestString(&reply, connection, subject, body, timeout)
        guard status == NATS_OK, let reply else { throw NATSTestError.client("request to \(subject): \(String(cString: natsStatus_GetText(status)))") }
        defer { natsMsg_Destroy(reply) }
        let length = Int(natsMsg_GetDataLength(reply))
        return String(decoding: UnsafeRawBufferPointer(start: natsMsg_GetData(reply), count: length), as: UTF8.self)
    }

    /// Messages left in `stream` (work-queue retention: stored and not yet acknowledged).
    func messagesInStream(_ stream: String) throws -> UInt64 {
        var info: UnsafeMutablePointer<jsStreamInfo>?
        var code = jsErrCode(rawValue: 0)
        let status = js_GetStreamInfo(&info, jetStream, stream, nil, &code)
        guard status == NATS_OK, let info else { throw NATSTestError.client("stream info: \(String(cString: natsStatus_GetText(status)))") }
        defer { jsStreamInfo_Destroy(info) }
        return info.pointee.State.Msgs
    }
}
