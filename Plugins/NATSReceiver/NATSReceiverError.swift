/// What went wrong connecting or setting up NATS.
public enum NATSReceiverError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The NATS C client could not be loaded (it is loaded when NATS is first used): `detail` says why.
    case library(detail: String)
    case connect(servers: [String], detail: String)
    /// The NATS credentials of the configuration are incomplete or cannot be read: `detail` says which and why.
    case credentials(detail: String)
    case jetStream(operation: String, detail: String, code: Int)
    case subscribe(subject: String, detail: String)
    case notConnected
    case flush(detail: String)
    case request(subject: String, detail: String)

    public var description: String {
        switch self {
        case .library(let detail):
            "\(detail); install it (apt-get install libnats3.4) or leave NATS off"
        case .connect(let servers, let detail) where detail.lowercased().contains("authorization"):
            "cannot connect to NATS at \(NATSConnectionSettings.redacted(servers)): \(detail); check the NATS credentials (nats-credentials, nats-user and nats-password-file, nats-token-file, or a user in the server URL)"
        case .connect(let servers, let detail):
            "cannot connect to NATS at \(NATSConnectionSettings.redacted(servers)): \(detail); check that nats-server runs there (with -js for JetStream)"
        case .credentials(let detail): detail
        case .jetStream(let operation, let detail, let code):
            "cannot \(operation) in JetStream: \(detail)\(code != 0 ? " (JetStream error \(code))" : ""); check that the server runs with JetStream enabled"
        case .subscribe(let subject, let detail): "cannot subscribe to \(subject): \(detail)"
        case .notConnected: "the NATS receiver is not connected (not started, or stopped)"
        case .flush(let detail): "the NATS server did not confirm what was sent: \(detail)"
        case .request(let subject, let detail): "no answer on \(subject): \(detail)"
        }
    }
}
