import Foundation
import HeraldEventLoop
import HeraldTesting
import Logging
import Testing

@testable import HeraldTLS

/// A TLS server for the tests: each connection answers every line it reads with a line describing its TLS session
/// (`alpn=... sni=... version=... peer=yes|no serial=...`; a `buffers` line's also with the room its memory BIOs have,
/// ` input=N output=N`), an `end` line with that answer and its close, and a `chain` line with that answer, then from
/// the answer's write completion a `chained` line and the close.
/// With `closeNotify` false it closes without ending its side with close_notify (at `end` and at the client's end),
/// as HTTP closes a connection whose client ended first.
final class TLSTestServer: Sendable {
    let loop: EventLoop
    let context: TLSServerContext
    let server: StreamServer
    let port: Int

    private init(loop: EventLoop, context: TLSServerContext, server: StreamServer) {
        self.loop = loop
        self.context = context
        self.server = server
        self.port = server.port ?? 0
    }

    static func start(
        on loop: EventLoop, context: TLSServerContext, protocols: [String] = ["h2", "http/1.1"], closeNotify: Bool = true
    ) async throws -> TLSTestServer {
        @Sendable func end(_ connection: StreamConnection) {
            if closeNotify { connection.shutdownWriting { _ in connection.close() } } else { connection.close() }
        }
        let server = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { connection in
            context.secure(connection, applicationProtocols: protocols, established: nil)
            var line: [UInt8] = []
            connection.onRead = { bytes in
                for byte in bytes {
                    guard byte == UInt8(ascii: "\n") else {
                        line.append(byte)
                        continue
                    }
                    let text = String(decoding: line, as: UTF8.self)
                    line = []
                    let tls = connection.tls
                    let answer =
                        "\(text) alpn=\(connection.applicationProtocol ?? "none") sni=\(tls?.serverName ?? "none")"
                        + " version=\(tls?.protocolVersion ?? "none") peer=\(tls?.peerCertificate == nil ? "no" : "yes")"
                        + " serial=\(tls?.certificate.serial ?? "none")"
                        + (text == "buffers" ? (connection.filter as? TLSStream).map(Self.room) ?? "" : "")
                        + "\n"
                    if text == "chain" {
                        // Its completion writes again and ends the connection (flushing what is gathered) at once: run
                        // while the answer's records are being sent, when the kernel takes them in one go.
                        connection.write(Array(answer.utf8)) { _ in
                            connection.write(Array("chained\n".utf8))
                            end(connection)
                        }
                        continue
                    }
                    connection.write(Array(answer.utf8))
                    if text == "end" { end(connection) }
                }
            }
            connection.onEnd = { end(connection) }
            connection.startReading()
        }
        return TLSTestServer(loop: loop, context: context, server: server)
    }

    /// ` input=N output=N`: the room `stream`'s memory BIOs have.
    static func room(_ stream: TLSStream) -> String {
        let room = stream.memoryBufferCapacities
        return " input=\(room.input) output=\(room.output)"
    }

    func close() async throws {
        try await loop.submit { self.server.close() }
    }
}

/// A test server (``TLSTestServer``) on a running loop of its own, with a CA and a server certificate made in a new
/// temporary directory; `body` gets the directory, the certificates, the context, the loop and the server, which is
/// closed after it.
func withTLSTestServer(
    closeNotify: Bool = true,
    _ body: (String, TestCertificates, TLSServerContext, EventLoop, TLSTestServer) async throws -> Void
) async throws {
    try await withTemporaryDirectory { directory in
        let (certificates, context) = try await makeContext(in: directory)
        try await withRunningLoop(name: "tls-test") { loop in
            let server = try await TLSTestServer.start(on: loop, context: context, closeNotify: closeNotify)
            try await body(directory, certificates, context, loop, server)
            try await server.close()
        }
    }
}

/// A CA and a server certificate (serial `serial`) in a new temporary directory, and a context serving it.
func makeContext(
    in directory: String, serial: String = "1001", clientCA: Bool = false, handshakeTimeout: Duration = .seconds(10),
    logger: Logger = Logger(label: "tls-test")
) async throws -> (TestCertificates, TLSServerContext) {
    let certificates = try await TestCertificates.make(in: directory)
    let (certificate, key) = try await certificates.issue(name: "server", serial: serial)
    var configuration = TLSServerContext.Configuration(
        certificateFile: certificate, keyFile: key, clientCAFile: clientCA ? certificates.caFile : nil)
    configuration.handshakeTimeout = handshakeTimeout
    return (certificates, try TLSServerContext(configuration: configuration, logger: logger))
}

/// `openssl s_client` to 127.0.0.1:`port` with `arguments`, the lines `input` sent after the handshake; waits for the
/// server to close (at most 20 s). Returns the exit status and what it printed (standard output and error).
func sClient(port: Int, _ arguments: [String], input: String = "hello\nend\n") async throws -> (status: Int32, output: String) {
    let result = try await runExecutable(
        URL(fileURLWithPath: "/usr/bin/timeout"),
        ["20", "openssl", "s_client", "-connect", "127.0.0.1:\(port)", "-ign_eof"] + arguments, input: input)
    return (result.status, result.output + result.error)
}
