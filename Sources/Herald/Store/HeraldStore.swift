/// Where an instance keeps what must survive a restart: its identity, its topics, the de-duplication window
/// and the durable inbox.
///
/// Calls are synchronous and may block (disk I/O); Herald makes them on its loop's blocking pool, never on the
/// loop thread, one at a time. `HeraldSQLite.SQLiteStore` is the embedded default; ``InMemoryStore`` keeps
/// everything in memory (for tests and hosts that want no disk).
public protocol HeraldStore: AnyObject, Sendable {
    /// Whether what is committed survives the process (a durable inbox makes sense only then).
    var isDurable: Bool { get }

    /// Everything the instance needs at start. Throws ``StoreError`` when the store cannot be read. A durable store
    /// counts this start for every pending entry (``StoredState/replays``) before it returns them.
    func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState

    /// ``load(window:now:)`` without counting this start: `nil` when the store does not count starts apart (the
    /// default), and Herald then calls ``load(window:now:)``. With a state, Herald counts the start for the entries it
    /// replays (``countStart(of:)``) once its plugins have started, just before the replay: a start that fails before
    /// (a port in use, a plugin that does not start) counts for no message. The state's ``StoredState/replays`` are
    /// then the starts counted before this one.
    func loadLeavingTheStartUncounted(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState?

    /// Counts a start for each of the pending entries `messageIDs` (those still pending; messages committed since the
    /// load are not among them), durably before it returns. Called only after
    /// ``loadLeavingTheStartUncounted(window:now:)`` gave a state. The default does nothing.
    func countStart(of messageIDs: [String]) throws(StoreError)

    /// Saves the identity (installation ID, token, device token).
    func save(identity: StoredIdentity) throws(StoreError)

    /// Subscribes or unsubscribes a topic.
    func setTopic(_ name: String, subscribed: Bool) throws(StoreError)

    /// Applies one group commit, durable before it returns when the store ``isDurable``: new inbox entries, their IDs
    /// added to the de-duplication window, entries finished (removed), and the window pruned to its limits.
    func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError)

    /// Deletes everything: identity, topics, inbox, window (the GDPR call).
    func deleteAll() throws(StoreError)

    /// The instance has stopped (called at the end of ``Herald/shutdown()``): the store lets go of the files it
    /// keeps open, so that another instance may open them (a restart within the process); a later call opens them
    /// again. The default does nothing.
    func close()
}

extension HeraldStore {
    /// Nothing to let go of.
    public func close() {}

    /// `nil`: the store counts the start in ``load(window:now:)``.
    public func loadLeavingTheStartUncounted(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState? { nil }

    /// Nothing to count: the store counts the start in ``load(window:now:)``.
    public func countStart(of messageIDs: [String]) throws(StoreError) {}
}

/// The identity kept in the store.
public struct StoredIdentity: Sendable, Hashable {
    public var installationID: String
    public var token: String?
    /// The transport address a receiver reported (socket path, NATS inbox, URL), associated with the token.
    public var deviceToken: String?
    /// When the instance's last token stopped being its token (``Herald/deleteToken()``), in milliseconds since 1970;
    /// `nil` while none has. A message to an earlier token of the same installation is then answered as APNs
    /// answers a token no longer valid (410 `Unregistered` with this `timestamp`).
    public var tokenRetiredAt: Int64?

    public init(installationID: String, token: String?, deviceToken: String? = nil, tokenRetiredAt: Int64? = nil) {
        self.installationID = installationID
        self.token = token
        self.deviceToken = deviceToken
        self.tokenRetiredAt = tokenRetiredAt
    }
}

/// What a store holds, read at start.
public struct StoredState: Sendable {
    public var identity: StoredIdentity?
    public var topics: Set<String>
    /// Message IDs in the de-duplication window, oldest first.
    public var seenMessageIDs: [String]
    /// Inbox entries accepted but not finished, in acceptance order.
    public var pending: [InboxRecord]
    /// For each pending entry (by message ID), how many starts found it pending, this one included: 1 at its first
    /// replay. A durable store counts the start in ``HeraldStore/load(window:now:)`` before it returns (from
    /// ``HeraldStore/loadLeavingTheStartUncounted(window:now:)``: this one not included); an entry past
    /// ``Herald/Configuration/maxReplays`` is quarantined instead of replayed. Missing: 1.
    public var replays: [String: Int]

    public init(
        identity: StoredIdentity? = nil, topics: Set<String> = [], seenMessageIDs: [String] = [], pending: [InboxRecord] = [],
        replays: [String: Int] = [:]
    ) {
        self.identity = identity
        self.topics = topics
        self.seenMessageIDs = seenMessageIDs
        self.pending = pending
        self.replays = replays
    }
}

/// The limits of the de-duplication window: it never holds more than `maximumCount` IDs nor IDs older than
/// `maximumAge`. A `maximumCount` of 0 turns it off (with the durable inbox, a message whose ID is still in the inbox
/// is a duplicate all the same).
public struct DeduplicationWindow: Sendable, Hashable {
    public var maximumCount: Int
    public var maximumAge: Duration

    public init(maximumCount: Int = 10_000, maximumAge: Duration = .seconds(24 * 3600)) {
        self.maximumCount = maximumCount
        self.maximumAge = maximumAge
    }

    /// The oldest acceptance time (ms since 1970) still inside the window at `now`.
    public func oldestKept(now: Int64) -> Int64 {
        now - maximumAge.nanosecondsClamped / 1_000_000
    }
}

/// One group commit.
public struct StoreBatch: Sendable {
    /// Messages accepted since the last commit.
    public var accepted: [InboxRecord] = []
    /// IDs of messages whose handlers have finished (or that were dropped at replay).
    public var finished: [String] = []
    /// IDs of pending messages to move out of the inbox into the store's quarantine, kept for inspection
    /// (``Herald/Configuration/maxReplays``). A store without a quarantine removes them like finished ones.
    public var quarantined: [String] = []

    public init(accepted: [InboxRecord] = [], finished: [String] = [], quarantined: [String] = []) {
        self.accepted = accepted
        self.finished = finished
        self.quarantined = quarantined
    }

    public var isEmpty: Bool { accepted.isEmpty && finished.isEmpty && quarantined.isEmpty }
}

/// A message as the inbox keeps it: `userInfo` as JSON bytes and the delivery metadata in columns.
public struct InboxRecord: Sendable, Hashable {
    public var messageID: String
    public var userInfo: [UInt8]
    public var targetKind: String
    public var targetValue: String
    public var collapseKey: String?
    public var priority: Int
    public var expiration: Int64?
    public var receivedAt: Int64
    /// Whether the de-duplication window keeps this message's ID: `false` for an ID made on receipt (an FCM v1
    /// send's, whose body cannot carry one), which no retry can repeat. A commit adds to the window only the IDs
    /// of records that keep theirs. Not stored with the record: one read back has the default.
    public var deduplicates: Bool = true
}

// The initializers are in an extension, so that the struct keeps its memberwise initializer, which builds the record
// in place: one written in the struct's body assigned each field to a `self` on the stack and then copied it out
// (a retain and a release of every field of every message the inbox takes).
extension InboxRecord {
    public init(
        messageID: String, userInfo: [UInt8], targetKind: String, targetValue: String, collapseKey: String?,
        priority: Int, expiration: Int64?, receivedAt: Int64
    ) {
        self.init(
            messageID: messageID, userInfo: userInfo, targetKind: targetKind, targetValue: targetValue, collapseKey: collapseKey,
            priority: priority, expiration: expiration, receivedAt: receivedAt, deduplicates: true)
    }

    /// The record for `message`, whose ID is `messageID`.
    public init(_ message: RemoteMessage, messageID: String) {
        self.init(borrowing: message, messageID: messageID)
    }

    /// ``init(_:messageID:)`` borrowing the message: the bus reads it here and then moves it on (an initializer's
    /// argument is otherwise its own, so the caller's would be copied).
    package init(borrowing message: borrowing RemoteMessage, messageID: String, deduplicates: Bool = true) {
        let kind: String
        let value: String
        switch message.target {
        case .token(let token): (kind, value) = ("token", token)
        case .installation(let fid): (kind, value) = ("fid", fid)
        case .topic(let name): (kind, value) = ("topic", name)
        case .condition(let condition): (kind, value) = ("condition", condition)
        }
        self.init(
            messageID: messageID, userInfo: message.userInfo.jsonBytes(), targetKind: kind, targetValue: value,
            collapseKey: message.collapseKey, priority: message.priority.rawValue, expiration: message.expiration,
            receivedAt: message.receivedAt, deduplicates: deduplicates)
    }

    /// The message back, flagged as a replay. Throws ``StoreError/corrupt(path:detail:)`` for a record that does not read.
    public func message(path: String) throws(StoreError) -> RemoteMessage {
        guard case .object(let userInfo)? = try? JSONParser.parse(userInfo) else {
            throw .corrupt(path: path, detail: "inbox entry \(messageID) holds no JSON object")
        }
        let target: MessageTarget
        switch targetKind {
        case "token": target = .token(targetValue)
        case "fid": target = .installation(targetValue)
        case "topic": target = .topic(targetValue)
        case "condition": target = .condition(targetValue)
        default: throw .corrupt(path: path, detail: "inbox entry \(messageID) has unknown target kind '\(targetKind)'")
        }
        return RemoteMessage(
            userInfo: userInfo, target: target, collapseKey: collapseKey, priority: MessagePriority(rawValue: priority) ?? .high,
            expiration: expiration, receivedAt: receivedAt, isReplay: true
        )
    }
}

/// Why the store failed, with the file and what to do.
public enum StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The data directory or database file cannot be created or opened.
    case cannotOpen(path: String, detail: String)
    /// The file is not a Herald store, or is damaged.
    case corrupt(path: String, detail: String)
    /// Writing failed (disk full, read-only file system, I/O error).
    case writeFailed(path: String, detail: String)
    /// The file was written by a newer Herald with a schema this one does not know.
    case newerSchema(path: String, found: String)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let detail):
            "cannot open the Herald store at \(path): \(detail). Check that the directory exists and is writable by this user, or choose another with --data-dir."
        case .corrupt(let path, let detail):
            "the Herald store at \(path) is damaged or not a Herald store: \(detail). Move it aside (a new store is created) or restore it from a backup."
        case .writeFailed(let path, let detail):
            "cannot write to the Herald store at \(path): \(detail). Free disk space or make the file system writable; messages were refused, none accepted was lost."
        case .newerSchema(let path, let found):
            "the Herald store at \(path) was written by a newer Herald (schema \(found)); run that version or move the store aside."
        }
    }
}
