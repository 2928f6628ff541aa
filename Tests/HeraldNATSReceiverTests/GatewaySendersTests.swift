import Foundation
import Herald
import HeraldTesting
import Testing

/// The fleet's senders (`herald senders ... --nats`), as every gateway watches them in NATS: two gateways on one
/// nats-server, real curl requests. Gateways do not read the bucket on a timer: what they see of a change made after
/// they started came through their watch.
@Suite("Senders of the fleet: scopes, rate limits and revocation on every gateway")
struct GatewaySendersTests {
    @Test(
        "a sender added through NATS is taken by two gateways, its scopes and limit hold on each; one added or revoked later is seen through each gateway's watch"
    )
    func revokedEverywhere() async throws {
        let server = try NATSServerProcess()
        let instance = try FleetInstance(server: server)
        try await withFleet([instance]) {
            try await withTemporaryDirectory(prefix: "herald-senders") { directory in
                let fleet = ["--nats", server.url, "--project-id", "demo"]
                let added = try await runBuiltExecutable("herald", ["senders", "add", "app-server", "--scopes", "send"] + fleet)
                #expect(added.status == 0, "\(added.error)")
                let secret = added.output.trimmingCharacters(in: .whitespacesAndNewlines)
                let limitedAdded = try await runBuiltExecutable(
                    "herald", ["senders", "add", "limited", "--scopes", "send", "--rate", "0.001", "--burst", "1"] + fleet)
                let limited = limitedAdded.output.trimmingCharacters(in: .whitespacesAndNewlines)
                #expect(limitedAdded.status == 0, "\(limitedAdded.error)")
                for name in ["one", "two"] {
                    try FileManager.default.createDirectory(atPath: "\(directory)/\(name)", withIntermediateDirectories: true)
                }
                let one = try await startGateway(server: server, directory: "\(directory)/one", secret: "gateway-secret")
                let two = try await startGateway(server: server, directory: "\(directory)/two", secret: "gateway-secret")
                let token = try await instance.token()
                let send = "/v1/projects/demo/messages:send"
                let body = #"{"message":{"token":"\#(token)","data":{"check":"sender"}}}"#
                for gateway in [one, two] {
                    let port = gateway.httpPort
                    // Until the instance's registration reaches the gateway's copy of the bucket: 404.
                    let accepted = await eventually(timeout: .seconds(30)) {
                        (try? await curlRequest(port: port, "POST", send, body: body, bearer: secret))?.status == 200
                    }
                    #expect(accepted, "\(gateway.log)")
                    let topic = try await curlRequest(port: port, "POST", send, body: #"{"message":{"topic":"news"}}"#, bearer: secret)
                    #expect(topic.status == 403, "\(topic.body)")
                    #expect(topic.body.contains("PERMISSION_DENIED") && topic.body.contains("send-topics"), "\(topic.body)")
                    // Rate limits are per gateway: each has its own bucket of one, refilled after 1,000 s (so that a
                    // slow machine between the two requests cannot refill it).
                    #expect(try await curlRequest(port: port, "POST", send, body: body, bearer: limited).status == 200)
                    let tooMany = try await curlRequest(port: port, "POST", send, body: body, bearer: limited)
                    #expect(tooMany.status == 429 && tooMany.body.contains("QUOTA_EXCEEDED"), "\(tooMany.body)")
                    #expect(
                        tooMany.headers["retry-after"].flatMap { Int($0) }.map { (900...1000).contains($0) } == true, "\(tooMany.headers)")
                }

                // Added once the gateways run: taken when their watches deliver it.
                let lateAdded = try await runBuiltExecutable("herald", ["senders", "add", "late", "--scopes", "send"] + fleet)
                #expect(lateAdded.status == 0, "\(lateAdded.error)")
                let late = lateAdded.output.trimmingCharacters(in: .whitespacesAndNewlines)
                for gateway in [one, two] {
                    let port = gateway.httpPort
                    let taken = await eventually(timeout: .seconds(30)) {
                        (try? await curlRequest(port: port, "POST", send, body: body, bearer: late))?.status == 200
                    }
                    #expect(taken, "a gateway does not take the sender added later: \(gateway.log)")
                }

                let revoked = try await runBuiltExecutable("herald", ["senders", "revoke", "app-server"] + fleet)
                #expect(revoked.status == 0, "\(revoked.error)")
                for gateway in [one, two] {
                    let port = gateway.httpPort
                    let refused = await eventually(timeout: .seconds(30)) {
                        (try? await curlRequest(port: port, "POST", send, body: body, bearer: secret))?.status == 401
                    }
                    #expect(refused, "a gateway still accepts the revoked sender: \(gateway.log)")
                    #expect(try await curlRequest(port: port, "POST", send, body: body, bearer: "gateway-secret").status == 200)
                }
                let listed = try await runBuiltExecutable("herald", ["senders", "list"] + fleet)
                let entries = try listed.output.split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
                #expect(
                    entries.compactMap { $0["name"]?.stringValue } == ["app-server", "late", "limited"], "\(listed.output)\(listed.error)")
                #expect(entries.first?["revokedAt"]?.intValue != nil)
                #expect(!listed.output.contains(secret))
                #expect(await one.terminate() == 0)
                #expect(await two.terminate() == 0)
            }
        }
    }
}
