import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("SQLiteStore: the service-account keys Herald issued")
struct ServiceAccountKeyTests {
    func key(_ id: String, name: String = "sender", at time: Int64 = 100) -> ServiceAccountKey {
        ServiceAccountKey(
            keyID: id, name: name, clientEmail: "\(name)@demo.iam.gserviceaccount.com",
            publicKeyPEM: "-----BEGIN PUBLIC KEY-----\n\(id)\n-----END PUBLIC KEY-----\n", createdAt: time)
    }

    @Test("added keys are listed oldest first by a read-only reader; revoking by ID or name marks them, once")
    func addListRevoke() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.addServiceAccountKey(key("b", name: "app", at: 200))
            try store.addServiceAccountKey(key("a", name: "app", at: 100))
            try store.addServiceAccountKey(key("c", name: "other", at: 300))
            #expect(
                try SQLiteStore.serviceAccountKeys(directory: directory) == [
                    key("a", name: "app"), key("b", name: "app", at: 200), key("c", name: "other", at: 300),
                ])
            #expect(try store.revokeServiceAccountKeys("app", now: 400) == ["a", "b"])
            #expect(try store.revokeServiceAccountKeys("app", now: 500) == [])
            #expect(try store.revokeServiceAccountKeys("c", now: 600) == ["c"])
            #expect(try store.revokeServiceAccountKeys("nothing", now: 700) == [])
            #expect(try SQLiteStore.serviceAccountKeys(directory: directory).map(\.revokedAt) == [400, 400, 600])
            // A key ID is issued once.
            #expect(throws: StoreError.self) { try store.addServiceAccountKey(key("a")) }
        }
    }

    @Test("a store from before the keys (schema v3) is migrated and has none; a reader of such a store finds none")
    func migratesV2Store() throws {
        try withTemporaryDirectory { directory in
            do {
                let store = try SQLiteStore(directory: directory)
                try store.execute(
                    sql: """
                        DROP TABLE service_account_key;
                        DROP TABLE sender;
                        DELETE FROM grdb_migrations WHERE identifier IN ('v4-service-account-keys', 'v5-senders');
                        """)
                #expect(try SQLiteStore.serviceAccountKeys(directory: directory).isEmpty)
            }
            let store = try SQLiteStore(directory: directory)
            #expect(try SQLiteStore.serviceAccountKeys(directory: directory).isEmpty)
            try store.addServiceAccountKey(key("a"))
            #expect(try SQLiteStore.serviceAccountKeys(directory: directory).count == 1)
        }
    }
}
