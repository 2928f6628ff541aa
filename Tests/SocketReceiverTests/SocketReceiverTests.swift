import Foundation
import Herald
import HeraldTesting
import SocketReceiver
import Testing

/// A blocking line client over a real socket, for tests.
final class LineClient {
    let fd: Int32

    init(_ address: SocketAddress) throws {
        switch address {
        case .unix(let path):
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { raw in
                let bytes = Array(path.utf8)
                raw.copyBytes(from: bytes.prefix(raw.count - 1))
            }
            let result = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
        case .tcp(_, let port):
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = UInt16(port).bigEndian
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard result == 0 else { throw POSIXError(.ECONNREFUSED) }
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(fd) }

    func send(_ text: String) {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { return }
            offset += written
        }
    }

    func halfClose() { shutdown(fd, Int32(SHUT_WR)) }

    /// Reads until `count` lines arrived, end of file, or the 10 s receive timeout.
    func readLines(_ count: Int) -> [String] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.filter({ $0 == UInt8(ascii: "\n") }).count < count {
            let read = recv(fd, &buffer, buffer.count, 0)
            if read <= 0 { break }
            data.append(contentsOf: buffer[0..<read])
        }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Whether the peer closed (a read returns end of file).
    func readsEndOfFile() -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) == 0
    }
}

final class Collector: MessageHandler, Sendable {
    let messages = Locked<[RemoteMessage]>([])
    func didReceive(_ message: RemoteMessage) async throws { messages.withLock { $0.append(message) } }
}

func withSocketHerald(
    options: (SocketAddress) -> SocketReceiver.Options = { SocketReceiver.Options(addresses: [$0]) },
    address: SocketAddress,
    _ body: (Herald, SocketReceiver, Collector, SocketAddress) async throws -> Void
) async throws {
    var configuration = Herald.Configuration(senderID: "1234567890")
    configuration.projectID = "demo"
    let herald = Herald(configuration: configuration)
    let receiver = SocketReceiver(options: options(address))
    let collector = Collector()
    try herald.register(receiver)
    try herald.register(collector)
    try await herald.start()
    let bound = try await receiver.listeningAddresses().first ?? address
    do {
        try await body(herald, receiver, collector, bound)
    } catch {
        await herald.shutdown()
        throw error
    }
    await herald.shutdown()
    #expect(herald.loop.statistics.liveHandles == 0)
}

func socketPath() -> String { "/tmp/herald-sock-\(getpid())-\(UInt32.random(in: 0...UInt32.max))" }

@Suite("SocketReceiver: JSON lines over Unix and TCP sockets", .serialized)
struct SocketReceiverTests {
    @Test("messages are answered in order with FCM names and Google-shaped errors", arguments: ["unix", "tcp"])
    func answersInOrder(kind: String) async throws {
        let address: SocketAddress = kind == "unix" ? .unix(path: socketPath()) : .tcp(host: "127.0.0.1", port: 0)
        try await withSocketHerald(address: address) { herald, _, collector, bound in
            let token = try await herald.token()
            let client = try LineClient(bound)
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n")
            client.send(#"{"message": {"token": "someone-else", "data": {"n": "2"}}}"# + "\r\n")
            client.send("not json\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "4"}}, "validate_only": true}"# + "\n")
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "5"}}}"# + "\n")
            let lines = client.readLines(5)
            #expect(lines.count == 5)
            let answers = lines.compactMap { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers[0]["name"]?.stringValue?.hasPrefix("projects/demo/messages/") == true)
            #expect(answers[1]["error"]?["code"] == 404)
            #expect(answers[1]["error"]?["status"] == "NOT_FOUND")
            #expect(answers[1]["error"]?["details"]?.arrayValue?.first?["errorCode"] == "UNREGISTERED")
            #expect(answers[2]["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(answers[3]["name"] != nil)
            #expect(answers[4]["name"] != nil)
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.map { $0.data["n"] } } == ["1", "5"])
        }
    }

    @Test("a half-closed client gets its answers, then end of file")
    func halfClosedClient() async throws {
        try await withSocketHerald(address: .unix(path: socketPath())) { herald, _, _, bound in
            let token = try await herald.token()
            let client = try LineClient(bound)
            client.send(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"# + "\n" + #"{"message": {"token": "\#(token)", "data": {"n": "2"}}}"#)
            client.halfClose()
            let lines = client.readLines(2)
            #expect(lines.count == 1, "the last line had no newline, so it is not a message")
            #expect(client.readsEndOfFile())
        }
    }

    @Test("an oversized line is refused with INVALID_ARGUMENT and the connection closed; the receiver goes on")
    func oversizedLine() async throws {
        let options: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.maximumLineBytes = 1024
            return options
        }
        try await withSocketHerald(options: options, address: .unix(path: socketPath())) { herald, _, collector, bound in
            let token = try await herald.token()
            let big = try LineClient(bound)
            big.send(String(repeating: "x", count: 5000))
            let lines = big.readLines(1)
            #expect(lines.first.flatMap { try? JSONParser.parse(Array($0.utf8)) }?["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(big.readsEndOfFile())
            let next = try LineClient(bound)
            next.send(#"{"message": {"token": "\#(token)", "data": {"n": "ok"}}}"# + "\n")
            #expect(next.readLines(1).first?.contains("projects/") == true)
            try await herald.waitUntilIdle()
            #expect(collector.messages.withLock { $0.count } == 1)
        }
    }

    @Test("a silent client is closed after the idle timeout")
    func idleClient() async throws {
        let options: (SocketAddress) -> SocketReceiver.Options = {
            var options = SocketReceiver.Options(addresses: [$0])
            options.idleTimeout = .milliseconds(100)
            return options
        }
        try await withSocketHerald(options: options, address: .unix(path: socketPath())) { _, _, _, bound in
            let client = try LineClient(bound)
            #expect(client.readsEndOfFile())
        }
    }

    @Test("a Unix socket path that already exists stops the start with EADDRINUSE")
    func pathExists() async throws {
        let path = socketPath()
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let herald = Herald()
        try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: path)])))
        await #expect(throws: HeraldError.self) { try await herald.start() }
        await herald.shutdown()
    }
}
