import Herald
public import HeraldHTTPReceiver

// The fleet's senders: credentials `herald senders ... --nats` writes to a key-value bucket, one JSON object per
// sender under its name, which every gateway reads again every few seconds. A revoked sender stays in the bucket,
// marked revoked, so that `list` shows it.

extension NATSSubjects {
    /// The key-value bucket of the fleet's senders: `HERALD_<PROJECT>_SENDERS`.
    public static func sendersBucket(project: String) -> String { streamName(project: project) + "_SENDERS" }
}

extension NATSPublisher {
    /// Writes `sender` under its name in `bucket` (made when missing, with `replicas`).
    public func putSender(_ sender: SenderCredential, bucket: String, replicas: Int) throws {
        try put(String(decoding: sender.json.jsonBytes(), as: UTF8.self), key: sender.name, bucket: bucket, replicas: replicas)
    }

    /// The senders `bucket` holds, revoked ones included (none when there is no bucket); an entry that is not a
    /// sender's credential is left out.
    public func senders(bucket: String) throws -> [SenderCredential] {
        try keys(bucket: bucket).sorted().compactMap { key in
            try value(key: key, bucket: bucket).flatMap { try? SenderCredential(json: JSONParser.parse($0)) }
        }
    }
}

extension NATSGateway {
    /// The fleet's senders (``NATSSubjects/sendersBucket(project:)``), as the gateway's HTTP endpoint takes them
    /// (its `senders` option). Blocks for the round trips.
    public func senders() throws -> [SenderCredential] {
        let (publisher, context) = shared.withLock { ($0.publisher, $0.context) }
        guard let publisher, let context else { throw NATSReceiverError.notConnected }
        return try publisher.senders(bucket: NATSSubjects.sendersBucket(project: context.projectID))
    }
}
