import GRDB
public import Herald

/// A sender's credential as the store keeps it (`herald senders add`): never the secret, only its SHA-256.
public struct StoredSender: Sendable, Hashable {
    /// The sender's name.
    public var name: String
    /// The SHA-256 of its secret, lower-case hex.
    public var secretHash: String
    /// Its scopes: names, comma-separated (`send,send-topics`).
    public var scopes: String
    /// Requests per second allowed on average; `nil`: no limit.
    public var rate: Double?
    /// Requests allowed at once after a pause (the token bucket's size); `nil`: the rate rounded up.
    public var burst: Int?
    /// When it was made, seconds since 1970.
    public var createdAt: Int64
    /// When it was revoked, seconds since 1970; `nil` while it is valid.
    public var revokedAt: Int64?

    /// A sender as made (`revokedAt` `nil`) or as read back.
    public init(
        name: String, secretHash: String, scopes: String, rate: Double? = nil, burst: Int? = nil, createdAt: Int64, revokedAt: Int64? = nil
    ) {
        self.name = name
        self.secretHash = secretHash
        self.scopes = scopes
        self.rate = rate
        self.burst = burst
        self.createdAt = createdAt
        self.revokedAt = revokedAt
    }
}

extension SQLiteStore {
    /// Keeps `sender`, a new one: a sender of the same name, revoked or not, is refused (a `StoreError`). Any
    /// thread; a daemon may be running on the store.
    public func addSender(_ sender: StoredSender) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO sender (name, secret_hash, scopes, rate, burst, created_at, revoked_at)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    sender.name, sender.secretHash, sender.scopes, sender.rate, sender.burst, sender.createdAt, sender.revokedAt,
                ])
        }
    }

    /// Revokes the sender `name` at `now` (seconds since 1970); whether it was valid until now.
    public func revokeSender(_ name: String, now: Int64) throws(StoreError) -> Bool {
        var revoked = false
        try write { db in
            try db.execute(sql: "UPDATE sender SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL", arguments: [now, name])
            revoked = db.changesCount > 0
        }
        return revoked
    }

    /// The senders of the store in `directory`, revoked ones included, oldest first; read through a read-only
    /// connection (a daemon may be running). Throws as ``snapshot(directory:)``.
    public static func senders(directory: String) throws(StoreError) -> [StoredSender] {
        try readOnly(directory: directory) { db in
            guard try db.tableExists("sender") else { return [] }
            return try Row.fetchAll(
                db, sql: "SELECT name, secret_hash, scopes, rate, burst, created_at, revoked_at FROM sender ORDER BY created_at, name"
            ).map { row in
                StoredSender(
                    name: try row.decode(atIndex: 0), secretHash: try row.decode(atIndex: 1), scopes: try row.decode(atIndex: 2),
                    rate: try row.decode(atIndex: 3), burst: try row.decode(atIndex: 4), createdAt: try row.decode(atIndex: 5),
                    revokedAt: try row.decode(atIndex: 6))
            }
        }
    }
}
