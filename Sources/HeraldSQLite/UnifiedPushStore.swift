import Foundation
import GRDB
public import Herald

/// An app registered with the UnifiedPush distributor: where its pushes go and how it is told.
public struct UnifiedPushRegistration: Sendable, Hashable {
    /// The token Herald minted: the last segment of the endpoint URL the app's server POSTs to.
    public var endpointToken: String
    /// The app's D-Bus service name, where its Connector is.
    public var service: String
    /// The app's own token for this registration, given back with every call to its Connector.
    public var token: String
    /// What the app said the registration is for.
    public var description: String
    /// The Connector interface the app speaks: 1 (`org.unifiedpush.Connector1`) or 2 (`org.unifiedpush.Connector2`).
    public var version: Int
    /// The VAPID public key (RFC 8292) a version 2 registration carried, as the app gave it; `nil` without one.
    public var vapid: String?
    /// When it was registered, ms since 1970.
    public var registeredAt: Int64
    /// Dropped by `herald up unregister` while the daemon was stopped: the app is told at the next start.
    public var dropped: Bool

    public init(
        endpointToken: String, service: String, token: String, description: String, version: Int, vapid: String?, registeredAt: Int64,
        dropped: Bool = false
    ) {
        self.endpointToken = endpointToken
        self.service = service
        self.token = token
        self.description = description
        self.version = version
        self.vapid = vapid
        self.registeredAt = registeredAt
        self.dropped = dropped
    }
}

/// A push accepted on an endpoint and not yet handed to its app.
public struct UnifiedPushMessage: Sendable, Hashable {
    /// The message's ID, given to the app with it.
    public var messageID: String
    /// The registration it is for.
    public var endpointToken: String
    /// The request body as received (encrypted or not: it is the app's to read).
    public var body: [UInt8]
    /// RFC 8030's `Topic`: a newer push with the same topic replaces this one while it waits.
    public var topic: String?
    /// RFC 8030's `Urgency`: `very-low`, `low`, `normal` or `high`.
    public var urgency: String
    /// When it stops being worth delivering, ms since 1970 (its arrival plus its `TTL`).
    public var expiresAt: Int64
    /// When it arrived, ms since 1970.
    public var receivedAt: Int64

    public init(
        messageID: String, endpointToken: String, body: [UInt8], topic: String?, urgency: String, expiresAt: Int64, receivedAt: Int64
    ) {
        self.messageID = messageID
        self.endpointToken = endpointToken
        self.body = body
        self.topic = topic
        self.urgency = urgency
        self.expiresAt = expiresAt
        self.receivedAt = receivedAt
    }
}

/// What the UnifiedPush distributor keeps in the store: its registrations and the pushes waiting for their apps.
/// Each call is one transaction; any thread, blocking on disk I/O.
extension SQLiteStore {
    /// Every registration, oldest first (dropped ones included).
    public func unifiedPushRegistrations() throws(StoreError) -> [UnifiedPushRegistration] {
        do {
            return try database.read { db in try Self.readRegistrations(db) }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
    }

    /// Saves `registration`, replacing the one with its endpoint token.
    public func saveUnifiedPushRegistration(_ registration: UnifiedPushRegistration) throws(StoreError) {
        try write { db in
            try db.execute(
                sql: """
                    INSERT INTO unifiedpush_registration (endpoint_token, service, token, description, version, vapid, registered_at, dropped)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (endpoint_token) DO UPDATE SET description = excluded.description, vapid = excluded.vapid,
                        version = excluded.version, dropped = excluded.dropped
                    """,
                arguments: [
                    registration.endpointToken, registration.service, registration.token, registration.description, registration.version,
                    registration.vapid, registration.registeredAt, registration.dropped ? 1 : 0,
                ])
        }
    }

    /// Deletes the registration with `endpointToken` and its waiting pushes; whether there was one.
    @discardableResult
    public func deleteUnifiedPushRegistration(endpointToken: String) throws(StoreError) -> Bool {
        var deleted = false
        try write { db in
            try db.execute(sql: "DELETE FROM unifiedpush_registration WHERE endpoint_token = ?", arguments: [endpointToken])
            deleted = db.changesCount > 0
        }
        return deleted
    }

    /// Marks the registration with `endpointToken` dropped (for a daemon that is stopped); whether there was one.
    public func dropUnifiedPushRegistration(endpointToken: String) throws(StoreError) -> Bool {
        var dropped = false
        try write { db in
            try db.execute(sql: "UPDATE unifiedpush_registration SET dropped = 1 WHERE endpoint_token = ?", arguments: [endpointToken])
            dropped = db.changesCount > 0
        }
        return dropped
    }

    /// What became of a push a ``commitUnifiedPush(adding:finishing:window:now:)`` was given.
    public enum UnifiedPushOutcome: Sendable, Equatable {
        /// Kept until a later commit finishes it; `replaced` are the IDs of the waiting pushes it replaced (same
        /// registration and topic), now deleted.
        case kept(replaced: [String])
        /// Not kept: its registration is gone.
        case unregistered
        /// Not kept: its ID left the store within the window (handed over, expired or replaced) — an offer again of
        /// a push already dealt with.
        case alreadySeen
    }

    /// One group commit of the distributor: forgets the pushes `finishing` (handed over, or expired), remembering
    /// their IDs in the window, then keeps each of `adding`, in order, until a later commit finishes it. A waiting
    /// push with the same registration and topic as an added one is replaced (deleted, its ID remembered). The window
    /// is pruned to `window`'s count and age at `now` (ms since 1970). Returns what became of each added push.
    public func commitUnifiedPush(
        adding: [UnifiedPushMessage], finishing: [String], window: DeduplicationWindow = DeduplicationWindow(), now: Int64
    ) throws(StoreError) -> [UnifiedPushOutcome] {
        var results: [UnifiedPushOutcome] = []
        try write { db in
            results = []
            func remember(_ messageID: String) throws {
                try db.execute(
                    sql: "INSERT OR IGNORE INTO unifiedpush_seen (message_id, seen_at) VALUES (?, ?)", arguments: [messageID, now])
            }
            for messageID in finishing {
                try db.execute(sql: "DELETE FROM unifiedpush_message WHERE message_id = ?", arguments: [messageID])
                try remember(messageID)
            }
            for message in adding {
                let registered = try Bool.fetchOne(
                    db, sql: "SELECT count(*) > 0 FROM unifiedpush_registration WHERE endpoint_token = ?",
                    arguments: [message.endpointToken])
                guard registered == true else {
                    results.append(.unregistered)
                    continue
                }
                let seen = try Bool.fetchOne(
                    db, sql: "SELECT count(*) > 0 FROM unifiedpush_seen WHERE message_id = ? AND seen_at >= ?",
                    arguments: [message.messageID, window.oldestKept(now: now)])
                guard seen != true else {
                    results.append(.alreadySeen)
                    continue
                }
                var replaced: [String] = []
                if let topic = message.topic {
                    replaced = try String.fetchAll(
                        db, sql: "SELECT message_id FROM unifiedpush_message WHERE endpoint_token = ? AND topic = ?",
                        arguments: [message.endpointToken, topic])
                    try db.execute(
                        sql: "DELETE FROM unifiedpush_message WHERE endpoint_token = ? AND topic = ?",
                        arguments: [message.endpointToken, topic])
                    for old in replaced { try remember(old) }
                }
                try db.execute(
                    sql: """
                        INSERT INTO unifiedpush_message (message_id, endpoint_token, body, topic, urgency, expires_at, received_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        message.messageID, message.endpointToken, Data(message.body), message.topic, message.urgency, message.expiresAt,
                        message.receivedAt,
                    ])
                results.append(.kept(replaced: replaced))
            }
            try db.execute(
                sql: """
                    DELETE FROM unifiedpush_seen
                    WHERE seen_at < ? OR seq <= (SELECT max(seq) FROM unifiedpush_seen) - ?
                    """,
                arguments: [window.oldestKept(now: now), window.maximumCount])
        }
        return results
    }

    /// The pushes waiting, in acceptance order.
    public func unifiedPushMessages() throws(StoreError) -> [UnifiedPushMessage] {
        do {
            return try database.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT message_id, endpoint_token, body, topic, urgency, expires_at, received_at
                        FROM unifiedpush_message ORDER BY seq
                        """
                ).map { row in
                    let body: Data = try row.decode(atIndex: 2)
                    return UnifiedPushMessage(
                        messageID: try row.decode(atIndex: 0), endpointToken: try row.decode(atIndex: 1), body: [UInt8](body),
                        topic: try row.decode(atIndex: 3), urgency: try row.decode(atIndex: 4), expiresAt: try row.decode(atIndex: 5),
                        receivedAt: try row.decode(atIndex: 6))
                }
            }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
    }

    /// The registrations of the store in `directory`, read through a read-only connection (the daemon may be running);
    /// a store from before UnifiedPush has none. Throws as ``snapshot(directory:)``.
    public static func unifiedPushSnapshot(directory: String) throws(StoreError) -> [UnifiedPushRegistration] {
        try readOnly(directory: directory) { db in
            guard try db.tableExists("unifiedpush_registration") else { return [] }
            return try readRegistrations(db)
        }
    }

    private static func readRegistrations(_ db: Database) throws -> [UnifiedPushRegistration] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT endpoint_token, service, token, description, version, vapid, registered_at, dropped
                FROM unifiedpush_registration ORDER BY registered_at, endpoint_token
                """
        ).map { row in
            UnifiedPushRegistration(
                endpointToken: try row.decode(atIndex: 0), service: try row.decode(atIndex: 1), token: try row.decode(atIndex: 2),
                description: try row.decode(atIndex: 3), version: try row.decode(atIndex: 4), vapid: try row.decode(atIndex: 5),
                registeredAt: try row.decode(atIndex: 6), dropped: try row.decode(atIndex: 7) as Int64 != 0)
        }
    }
}
