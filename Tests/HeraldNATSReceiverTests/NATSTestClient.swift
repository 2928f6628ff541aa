import HeraldNATSReceiver
import HeraldTesting

/// The sender's side in the tests: NATSPublisher with string bodies.
extension NATSPublisher {
    convenience init(url: String) throws {
        try self.init(options: NATSReceiver.Options(servers: [url]))
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
