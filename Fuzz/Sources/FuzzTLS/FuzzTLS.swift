import Foundation
import FuzzSupport
import HeraldEventLoop
import HeraldTLS
import HeraldTesting

/// The TLS record path of a listener: the input (after its first byte, in the chunks the first byte picks) is a
/// client's first flight, read by a server-side TLS connection (HeraldTLS's memory BIOs, the handshake, the choice
/// of a certificate by SNI, its failure and timeout paths) behind a Unix socket. Whatever the bytes, the server must
/// end the connection once the client half-closes, and keep serving. The certificates are made once per process
/// with the openssl command.
final class TLSHarness: Sendable {
    let loop = EventLoop(name: "fuzz-tls")
    let path = "/tmp/herald-fuzz-tls-\(getpid()).sock"

    init() {
        let directory = try! makeTemporaryDirectory(prefix: "herald-fuzz-tls")
        let certificates = try! TestCertificates(in: directory)
        // The default certificate does not have the seeds' SNI name (localhost); the second one does, so that a
        // ClientHello with it moves to another context in the servername callback, and one without it stays.
        let (certificate, key) = try! certificates.issueServer(name: "server", serial: "F022", dnsNames: ["default.example.test"])
        let sni = try! certificates.issue(name: "sni", serial: "F023")
        var configuration = TLSServerContext.Configuration(certificateFile: certificate, keyFile: key)
        configuration.sniCertificates = [CertificateFiles(certificateFile: sni.certificate, keyFile: sni.key)]
        configuration.handshakeTimeout = .seconds(5)
        let context = try! TLSServerContext(configuration: configuration)
        try! loop.start()
        unlink(path)
        let address = SocketAddress.unix(path: path)
        _ = blocking { [loop] in
            try await StreamServer.listen(on: loop, at: address) { connection in
                context.secure(connection, applicationProtocols: ["h2", "http/1.1"], established: nil)
                connection.onRead = { bytes in connection.write(bytes) }
                connection.onEnd = { connection.shutdownWriting { _ in connection.close() } }
                connection.startReading()
            }
        }
    }

    /// Sends the chunks on a new connection, half-closes, and reads until the server ends it (20 s at most).
    func exchange(_ chunks: [[UInt8]]) {
        let client = try! TestSocketClient(.unix(path: path))
        for chunk in chunks {
            var sent: Int
            // Again when interrupted: libFuzzer's timeout alarm is a signal every few seconds.
            repeat {
                sent = chunk.withUnsafeBytes { send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            } while sent < 0 && errno == EINTR
            if sent < 0 { break }
        }
        client.halfClose()
        _ = client.read { _ in false }
        guard client.readsClosed() else { fatalError("the TLS connection was not ended after the client's half-close") }
    }
}

let harness = TLSHarness()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    harness.exchange(FuzzInput.chunked(FuzzInput.bytes(start, count)))
    return 0
}

@_cdecl("FuzzTLS_main")
public func fuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> CInt {
    fuzzerMain(argc, argv, fuzz)
}
