import Foundation
import Herald
import HeraldHTTPReceiver
import HeraldTesting
import Testing

/// What fuzzing the request path (Fuzz/Sources/FuzzHTTP) found, each input kept as it crashed the daemon: the
/// request must get its answer, and the daemon and other connections go on.
@Suite("HTTPReceiver: fuzz findings", .serialized)
struct HTTPFuzzFindingsTests {
    @Test("a query item that is only '=' (or '=value') in a topic subscription: 400 for the missing topic_name, not a crash")
    func queryItemWithoutName() async throws {
        try await withHTTPHerald { herald, _, address in
            let token = try await herald.token()
            let client = try TestSocketClient(address)
            // The fuzz input, from Fuzz/Corpus/http (the first byte, which picks the chunking, dropped).
            client.send(
                "POST /v1/projects/demo/registrations/fuzz-token/topicSubscriptions?= HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer fuzz-secret\r\nContent-Length: 0\r\n\r\n"
            )
            client.send(request("POST", "/v1/projects/demo/registrations/\(token)/topicSubscriptions?=weather"))
            client.send(request("POST", "/v1/projects/demo/registrations/\(token)/topicSubscriptions?a=1&=&topic_name=news"))
            let answers = responses(in: client.read { responses(in: $0).count >= 3 })
            #expect(answers.map(\.status) == [400, 400, 200])
            #expect(answers.first?.body?["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(try await herald.subscribedTopics() == ["news"])
            try expectServed(address, token, "after")
        }
    }
}
