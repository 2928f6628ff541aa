import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldSQLite

@Suite("SQLiteStore: senders, and the scopes of service-account keys")
struct SenderStoreTests {
    func sender(_ name: String, at time: Int64 = 100) -> StoredSender {
        StoredSender(
            name: name, secretHash: String(repeating: String(name.prefix(1)), count: 64), scopes: "send,send-topics", rate: 2.5, burst: 4,
            createdAt: time)
    }

    @Test("added senders are listed oldest first by a read-only reader; revoked once; a name is taken once, revoked or not")
    func addListRevoke() throws {
        try withTemporaryDirectory { directory in
            let store = try SQLiteStore(directory: directory)
            try store.addSender(sender("b", at: 200))
            try store.addSender(StoredSender(name: "a", secretHash: String(repeating: "0", count: 64), scopes: "send", createdAt: 100))
            #expect(
                try SQLiteStore.senders(directory: directory) == [
                    StoredSender(name: "a", secretHash: String(repeating: "0", count: 64), scopes: "send", createdAt: 100),
                    sender("b", at: 200),
                ])
            #expect(try store.revokeSender("b", now: 300))
            #expect(try !store.revokeSender("b", now: 400))
            #expect(try !store.revokeSender("nobody", now: 400))
            #expect(try SQLiteStore.senders(directory: directory).map(\.revokedAt) == [nil, 300])
            #expect(throws: StoreError.self) { try store.addSender(sender("b", at: 500)) }
        }
    }

    @Test("a store from before senders (schema v4) is migrated: its keys have every scope (nil), new keys keep theirs")
    func migratesV4Store() throws {
        try withTemporaryDirectory { directory in
            let key = ServiceAccountKey(keyID: "k", name: "n", clientEmail: "n@demo", publicKeyPEM: "pem", createdAt: 1)
            do {
                let store = try SQLiteStore(directory: directory)
                try store.execute(
                    sql: """
                        DROP TABLE sender;
                        ALTER TABLE service_account_key DROP COLUMN scopes;
                        DELETE FROM grdb_migrations WHERE identifier = 'v5-senders';
                        INSERT INTO service_account_key (key_id, name, client_email, public_key, created_at) VALUES ('k', 'n', 'n@demo', 'pem', 1);
                        """)
                // A reader of the store as an earlier release left it.
                #expect(try SQLiteStore.serviceAccountKeys(directory: directory) == [key])
                #expect(try SQLiteStore.senders(directory: directory).isEmpty)
            }
            let store = try SQLiteStore(directory: directory)
            var scoped = key
            scoped.keyID = "l"
            scoped.createdAt = 2
            scoped.scopes = "send"
            try store.addServiceAccountKey(scoped)
            #expect(try SQLiteStore.serviceAccountKeys(directory: directory) == [key, scoped])
            try store.addSender(sender("a"))
            #expect(try SQLiteStore.senders(directory: directory).count == 1)
        }
    }
}
