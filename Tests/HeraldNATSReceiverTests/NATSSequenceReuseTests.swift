import Foundation
import HeraldNATSReceiver
import HeraldSQLite
import HeraldTesting
import Testing

/// A stream sequence given again to a new message. nats-server 2.9 killed (SIGKILL) after its work-queue stream
/// emptied can come back with the stream's last sequence set back (seen in the restart test: from 150 to 43), and
/// gives new messages the sequences of messages the instance already handled; deleting and creating the stream
/// again does the same, on purpose, here.
@Suite("NATSReceiver: a stream sequence used again")
struct NATSSequenceReuseTests {
    @Test("a new message stored under a sequence an earlier, handled message had is handled, not taken for a duplicate")
    func reusedStreamSequence() async throws {
        try await withTemporaryDirectory(prefix: "herald-nats-sequence") { directory in
            let server = try NATSServerProcess()
            let client = try NATSPublisher(url: server.url)
            var token = ""
            // The durable inbox keeps the IDs it has seen across the instance's restart.
            let first = try FleetInstance(server: server, store: try SQLiteStore(directory: directory))
            try await withFleet([first]) {
                token = try await first.token()
                for n in 1...3 { try client.publishStored(try await first.tokenSubject(), body(token: token, n: n)) }
                #expect(await eventually { first.collector.numbers.sorted() == ["1", "2", "3"] })
                #expect(try await eventually { try client.storedMessages(stream: "HERALD_DEMO") == 0 })
            }
            let deleted = try client.request("$JS.API.STREAM.DELETE.HERALD_DEMO", "")
            #expect(deleted.contains(#""success":true"#), "\(deleted)")

            // The same installation (its token, the IDs it has seen) on the new stream: sequences 1 to 3 again.
            let second = try FleetInstance(server: server, store: try SQLiteStore(directory: directory))
            try await withFleet([second]) {
                #expect(try await second.token() == token)
                for n in 4...6 { try client.publishStored(try await second.tokenSubject(), body(token: token, n: n)) }
                #expect(await eventually { second.collector.numbers.sorted() == ["4", "5", "6"] })
            }
        }
    }
}
