import Glibc
import Herald
import HeraldTesting
import Testing

@Suite("NATSServerProcess: a real nats-server on a port of its own")
struct NATSServerProcessTests {
    @Test("a port taken between its choice and the server's start is chosen again; a port given is not")
    func takenPortChosenAgain() throws {
        // A port another process could have taken just after it was found free: held here, listening.
        let (held, heldPort) = try boundLoopbackSocket()
        defer { close(held) }
        #expect(listen(held, 1) == 0)
        let choices = Locked([heldPort])
        let server = try NATSServerProcess(jetStream: false) {
            let next = choices.withLock { $0.isEmpty ? nil : $0.removeFirst() }
            return try next ?? freeLoopbackPort()
        }
        #expect(server.port != heldPort)
        #expect(
            try TestSocketClient(.tcp(host: "127.0.0.1", port: server.port)).read(until: { $0.count >= 4 }).starts(with: Array("INFO".utf8))
        )
        server.stop()
        // A port the test gives is the test's to keep: no other is tried.
        #expect(throws: NATSTestError.self) { try NATSServerProcess(jetStream: false, port: heldPort) }
    }
}
