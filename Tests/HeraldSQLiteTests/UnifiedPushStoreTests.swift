import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

/// The UnifiedPush distributor's tables in the store (migration v3-unifiedpush): registrations and waiting pushes.
@Suite("SQLiteStore: UnifiedPush registrations and pushes")
struct UnifiedPushStoreTests {
    static func registration(_ token: String, service: String = "org.example.App") -> UnifiedPushRegistration {
        UnifiedPushRegistration(
            endpointToken: "e-\(token)", service: service, token: token, description: "d", version: 2, vapid: nil, registeredAt: 1)
    }

    static func push(_ id: String, to token: String, topic: String? = nil) -> UnifiedPushMessage {
        UnifiedPushMessage(
            messageID: id, endpointToken: "e-\(token)", body: Array(id.utf8), topic: topic, urgency: "normal", expiresAt: 100, receivedAt: 1
        )
    }

    @Test("a store from before UnifiedPush (schema v2) is migrated: its inbox kept, no registrations; read-only it lists none")
    func migratesV2Store() throws {
        try withTemporaryDirectory { directory in
            do {
                let store = try SQLiteStore(directory: directory)
                let record = InboxRecord(
                    messageID: "m1", userInfo: Array(#"{"gcm.message_id":"m1"}"#.utf8), targetKind: "token", targetValue: "tok",
                    collapseKey: nil, priority: 10, expiration: nil, receivedAt: 1)
                try store.commit(StoreBatch(accepted: [record]), window: DeduplicationWindow(), now: 1)
                try store.execute(
                    sql: """
                        DROP TABLE unifiedpush_message;
                        DROP TABLE unifiedpush_registration;
                        DELETE FROM grdb_migrations WHERE identifier = 'v3-unifiedpush';
                        """)
            }
            #expect(try SQLiteStore.unifiedPushSnapshot(directory: directory).isEmpty)
            let store = try SQLiteStore(directory: directory)
            #expect(try store.load(window: DeduplicationWindow(), now: 2).pending.map(\.messageID) == ["m1"])
            #expect(try store.unifiedPushRegistrations().isEmpty)
            try store.saveUnifiedPushRegistration(Self.registration("a"))
            #expect(try SQLiteStore.unifiedPushSnapshot(directory: directory).map(\.token) == ["a"])
        }
    }

    @Test("group commits: a topic replaces a waiting push, finished ones go, a push for no registration is not kept")
    func commits() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.saveUnifiedPushRegistration(Self.registration("a"))
            try store.saveUnifiedPushRegistration(Self.registration("b", service: "org.example.Other"))
            let first = try store.commitUnifiedPush(
                adding: [Self.push("1", to: "a", topic: "t"), Self.push("2", to: "a"), Self.push("3", to: "b", topic: "t")], finishing: [],
                now: 1)
            #expect(first == [.kept(replaced: []), .kept(replaced: []), .kept(replaced: [])])
            let second = try store.commitUnifiedPush(
                adding: [Self.push("4", to: "a", topic: "t"), Self.push("5", to: "nobody")], finishing: ["2"], now: 2)
            #expect(second == [.kept(replaced: ["1"]), .unregistered])
            #expect(try store.unifiedPushMessages().map(\.messageID) == ["3", "4"])
            #expect(try store.unifiedPushMessages().first?.body == Array("3".utf8))
        }
    }

    @Test("deleting a registration deletes its pushes; dropping marks it for the next start")
    func deleteAndDrop() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.saveUnifiedPushRegistration(Self.registration("a"))
            try store.saveUnifiedPushRegistration(Self.registration("b"))
            _ = try store.commitUnifiedPush(adding: [Self.push("1", to: "a"), Self.push("2", to: "b")], finishing: [], now: 1)
            #expect(try store.deleteUnifiedPushRegistration(endpointToken: "e-a"))
            #expect(try !store.deleteUnifiedPushRegistration(endpointToken: "e-a"))
            #expect(try store.unifiedPushMessages().map(\.messageID) == ["2"])
            #expect(try store.dropUnifiedPushRegistration(endpointToken: "e-b"))
            #expect(try !store.dropUnifiedPushRegistration(endpointToken: "e-nope"))
            #expect(try store.unifiedPushRegistrations().map(\.dropped) == [true])
        }
    }

    @Test("a push offered again after it was handed over, expired or replaced is not kept again, within the window's count and age")
    func seenWindow() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.saveUnifiedPushRegistration(Self.registration("a"))
            let window = DeduplicationWindow(maximumCount: 3, maximumAge: .seconds(10))
            _ = try store.commitUnifiedPush(adding: [Self.push("1", to: "a", topic: "t")], finishing: [], window: window, now: 1_000)
            // "1" replaced by "2" (same topic), then "2" handed over: both remembered.
            _ = try store.commitUnifiedPush(adding: [Self.push("2", to: "a", topic: "t")], finishing: [], window: window, now: 1_001)
            _ = try store.commitUnifiedPush(adding: [], finishing: ["2"], window: window, now: 1_002)
            let again = try store.commitUnifiedPush(
                adding: [Self.push("1", to: "a"), Self.push("2", to: "a"), Self.push("3", to: "a")], finishing: [], window: window,
                now: 1_003)
            #expect(again == [.alreadySeen, .alreadySeen, .kept(replaced: [])])
            #expect(try store.unifiedPushMessages().map(\.messageID) == ["3"])
            // The window survives a restart (it is in the file).
            let reopened = try SQLiteStore(directory: directory)
            #expect(
                try reopened.commitUnifiedPush(adding: [Self.push("2", to: "a")], finishing: [], window: window, now: 1_004) == [
                    .alreadySeen
                ])
            // Count: three IDs at most — "3", "4" and "5" leaving push "1" out.
            _ = try reopened.commitUnifiedPush(
                adding: [Self.push("4", to: "a"), Self.push("5", to: "a")], finishing: ["3"], window: window, now: 1_005)
            _ = try reopened.commitUnifiedPush(adding: [], finishing: ["4", "5"], window: window, now: 1_006)
            let afterCount = try reopened.commitUnifiedPush(
                adding: [Self.push("1", to: "a"), Self.push("5", to: "a")], finishing: [], window: window, now: 1_007)
            #expect(afterCount == [.kept(replaced: []), .alreadySeen])
            // Age: ten seconds after they left, "3" to "5" are forgotten too.
            let afterAge = try reopened.commitUnifiedPush(
                adding: [Self.push("5", to: "a")], finishing: ["1"], window: window, now: 1_006 + 10_001)
            #expect(afterAge == [.kept(replaced: [])])
        }
    }
}
