import Testing

@testable import HeraldNATSReceiver

@Suite("NATS server URLs in logs and errors")
struct NATSRedactionTests {
    @Test("a user and password in a server URL are replaced by ***; URLs without them are unchanged")
    func redacted() {
        #expect(NATSConnectionSettings.redacted("nats://alice:s3cret@nats.example:4222") == "nats://***@nats.example:4222")
        #expect(NATSConnectionSettings.redacted("tls://token@10.0.0.1:4222/path@x") == "tls://***@10.0.0.1:4222/path@x")
        #expect(NATSConnectionSettings.redacted("nats://a@b:c@host:1") == "nats://***@host:1")
        #expect(NATSConnectionSettings.redacted("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222")
        #expect(NATSConnectionSettings.redacted("127.0.0.1:4222") == "127.0.0.1:4222")
        #expect(NATSConnectionSettings.redacted(["nats://u:p@h:1", "nats://h:2"]) == "nats://***@h:1, nats://h:2")
        let error = NATSReceiverError.connect(servers: ["nats://u:pw@h:1"], detail: "no servers")
        #expect(!error.description.contains("pw") && error.description.contains("nats://***@h:1"))
    }
}
