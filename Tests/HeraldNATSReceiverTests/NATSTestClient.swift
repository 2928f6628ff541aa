import HeraldNATSReceiver
import HeraldTesting

/// The sender's side in the tests: NATSPublisher with string bodies.
extension NATSPublisher {
    /// A JetStream request may wait 30 s for its answer, not the 5 s of a publisher's default: while the whole suite
    /// runs, dozens of servers and instances start at once on a few cores, and a test's read of a stream or bucket
    /// answered late is not what it tests.
    convenience init(url: String) throws {
        try self.init(options: NATSReceiver.Options(servers: [url]), timeout: .seconds(30))
    }

    @discardableResult
    func publishStored(_ subject: String, _ body: String, messageID: String? = nil) throws -> String {
        try publishStored(subject, body: Array(body.utf8), messageID: messageID)
    }

    func publish(_ subject: String, _ body: String, flush: Bool = true) throws {
        try publish(subject, body: Array(body.utf8), flush: flush)
    }

    func request(_ subject: String, _ body: String) throws -> String {
        guard let answer = try request(subject, body: Array(body.utf8)) else { throw NATSTestError.client("no responders on \(subject)") }
        return String(decoding: answer, as: UTF8.self)
    }
}
