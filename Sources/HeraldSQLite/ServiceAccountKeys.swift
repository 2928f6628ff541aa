import GRDB
public import Herald

/// A service-account key Herald issued: its public half and what names it.
public struct ServiceAccountKey: Sendable, Hashable {
    /// The service-account file's `private_key_id`, which a JWT signed with the key carries as `kid`.
    public var keyID: String
    /// A name for people (`herald credentials create --name`).
    public var name: String
    /// The account's `client_email`: the JWT's `iss`.
    public var clientEmail: String
    /// The public key, SubjectPublicKeyInfo PEM.
    public var publicKeyPEM: String
    /// When it was issued, seconds since 1970.
    public var createdAt: Int64
    /// When it was revoked (seconds since 1970); `nil` while it is valid.
    public var revokedAt: Int64?
    /// What its access tokens may do: scope names, comma-separated (`send,manage-topics`); `nil`: everything.
    public var scopes: String?

    /// A key as issued (`revokedAt` `nil`) or as read back.
    public init(
        keyID: String, name: String, clientEmail: String, publicKeyPEM: String, createdAt: Int64, revokedAt: Int64? = nil,
        scopes: String? = nil
    ) {
        self.keyID = keyID
        self.name = name
        self.clientEmail = clientEmail
        self.publicKeyPEM = publicKeyPEM
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.scopes = scopes
    }
}

extension SQLiteStore {
    /// Keeps `key` (a new one: its ID must not be in the store). Any thread; a daemon may be running on the store.
    public func addServiceAccountKey(_ key: ServiceAccountKey) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO service_account_key (key_id, name, client_email, public_key, created_at, revoked_at, scopes)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [key.keyID, key.name, key.clientEmail, key.publicKeyPEM, key.createdAt, key.revokedAt, key.scopes])
        }
    }

    /// Revokes the keys whose ID or name is `identifier` at `now` (seconds since 1970); returns those revoked now
    /// (none when there is no such key or it already was).
    public func revokeServiceAccountKeys(_ identifier: String, now: Int64) throws(StoreError) -> [String] {
        var revoked: [String] = []
        try write { db in
            revoked = try String.fetchAll(
                db, sql: "SELECT key_id FROM service_account_key WHERE (key_id = ? OR name = ?) AND revoked_at IS NULL ORDER BY key_id",
                arguments: [identifier, identifier])
            try db.execute(
                sql: "UPDATE service_account_key SET revoked_at = ? WHERE (key_id = ? OR name = ?) AND revoked_at IS NULL",
                arguments: [now, identifier, identifier])
        }
        return revoked
    }

    /// The service-account keys of the store in `directory`, revoked ones included, oldest first; read through a
    /// read-only connection (a daemon may be running). Throws as ``snapshot(directory:)``.
    public static func serviceAccountKeys(directory: String) throws(StoreError) -> [ServiceAccountKey] {
        try readOnly(directory: directory) { db in
            guard try db.tableExists("service_account_key") else { return [] }
            // A store not yet migrated to scopes (a daemon of an earlier release has it open): every key has them all.
            let scopes = try db.columns(in: "service_account_key").contains { $0.name == "scopes" } ? "scopes" : "NULL"
            return try Row.fetchAll(
                db,
                sql: """
                    SELECT key_id, name, client_email, public_key, created_at, revoked_at, \(scopes)
                    FROM service_account_key ORDER BY created_at, key_id
                    """
            ).map { row in
                ServiceAccountKey(
                    keyID: try row.decode(atIndex: 0), name: try row.decode(atIndex: 1), clientEmail: try row.decode(atIndex: 2),
                    publicKeyPEM: try row.decode(atIndex: 3), createdAt: try row.decode(atIndex: 4), revokedAt: try row.decode(atIndex: 5),
                    scopes: try row.decode(atIndex: 6))
            }
        }
    }
}
