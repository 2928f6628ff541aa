import Herald
public import HeraldHTTPReceiver

// The fleet's senders: credentials `herald senders ... --nats` writes to a key-value bucket, one JSON object per
// sender under its name, which every gateway watches (a KV watch): a change is taken as soon as the watch delivers
// it. A revoked sender stays in the bucket, marked revoked, so that `list` shows it.

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

    /// The senders of the watched copy of the senders bucket (``watchSenders(bucket:changed:)``), revoked ones
    /// included, as ``senders(bucket:)`` gives them; `nil` while the watch has not caught up (then ask the bucket).
    public func cachedSenders() -> [SenderCredential]? {
        cachedSenderEntries().map { entries in
            entries.keys.sorted().compactMap { key in entries[key].flatMap { try? SenderCredential(json: JSONParser.parse($0)) } }
        }
    }
}

extension NATSGateway {
    /// The fleet's senders (``NATSSubjects/sendersBucket(project:)``), as the gateway's HTTP endpoint takes them
    /// (its `senders` option): from the watched copy of the bucket, or, while the watch has not caught up, from the
    /// bucket itself (blocking for the round trips).
    public func senders() throws -> [SenderCredential] {
        let (publisher, context) = shared.withLock { ($0.publisher, $0.context) }
        guard let publisher, let context else { throw NATSReceiverError.notConnected }
        return try publisher.cachedSenders() ?? publisher.senders(bucket: NATSSubjects.sendersBucket(project: context.projectID))
    }

    /// The HTTP endpoint's `senders` option for this gateway: ``senders()``, read again each time the watch of the
    /// senders bucket delivers a change (a sender added or revoked, on any gateway or by `herald senders`), not on a
    /// timer. Give it to one endpoint: the changes are a single stream.
    public var senderOptions: SenderOptions {
        SenderOptions(changes: sendersChanges) { [self] in try senders() }
    }
}
