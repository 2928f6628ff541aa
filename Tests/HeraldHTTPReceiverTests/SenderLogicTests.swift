import Herald
import Testing

@testable import HeraldHTTPReceiver

@Suite("Senders' scopes, credentials and token buckets (logic)")
struct SenderLogicTests {
    @Test("scope lists: names, all, unknown and empty refused; names in a fixed order")
    func scopeLists() {
        #expect(SenderScopes(parsing: "send") == .send)
        #expect(SenderScopes(parsing: "manage-topics, send") == [.send, .manageTopics])
        #expect(SenderScopes(parsing: "all") == .all)
        #expect(SenderScopes(parsing: "send,everything") == nil)
        #expect(SenderScopes(parsing: "") == nil)
        #expect(SenderScopes(parsing: "send,,send-topics") == nil)
        #expect(SenderScopes.all.description == "send,send-topics,manage-topics")
    }

    @Test("a credential survives its JSON form; the hash is SHA-256; a bad entry is not a credential")
    func credentialJSON() throws {
        let credential = SenderCredential(
            name: "app_1", secretHash: SenderCredential.hash(secret: "abc"), scopes: [.sendTopics], rate: 2.5, burst: 4, createdAt: 10,
            revokedAt: 20)
        #expect(credential.secretHash == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(SenderCredential(json: try JSONParser.parse(Array(credential.json.jsonBytes()))) == credential)
        #expect(SenderCredential(json: ["name": "x", "secretHash": "short", "scopes": [], "createdAt": 1]) == nil)
        #expect(
            SenderCredential(json: ["name": "Bad Name", "secretHash": .string(credential.secretHash), "scopes": [], "createdAt": 1]) == nil)
        #expect(SenderCredential.newSecret() != SenderCredential.newSecret())
    }

    @Test("a token bucket: the burst at once, then the rate; Retry-After in whole seconds until a token")
    func tokenBucket() {
        let start = ContinuousClock.now
        var bucket = TokenBucket(rate: 0.5, burst: 2, now: start)
        #expect(bucket.take(now: start) == nil)
        #expect(bucket.take(now: start) == nil)
        #expect(bucket.take(now: start) == 2)
        #expect(bucket.take(now: start + .milliseconds(1500)) == 1)
        #expect(bucket.take(now: start + .seconds(2)) == nil)
        #expect(bucket.take(now: start + .seconds(2)) == 2)
        // Never more than the burst, however long it waited.
        #expect(bucket.take(now: start + .seconds(100)) == nil)
        #expect(bucket.take(now: start + .seconds(100)) == nil)
        #expect(bucket.take(now: start + .seconds(100)) != nil)
        var unrounded = TokenBucket(rate: 2.5, burst: nil, now: start)
        #expect(unrounded.burst == 3)
        #expect(unrounded.take(now: start) == nil)
    }

    @Test("rates and bursts from a bucket's entry out of range are taken to the nearest end of it: no trap, a Retry-After that fits")
    func extremeRates() {
        let start = ContinuousClock.now
        var slow = TokenBucket(rate: 1e-20, burst: -5, now: start)
        #expect(slow.rate == SenderCredential.rates.lowerBound && slow.burst == 1)
        #expect(slow.take(now: start) == nil)
        #expect(slow.take(now: start) == 1000)
        var fast = TokenBucket(rate: 9.3e18, burst: nil, now: start)
        #expect(fast.rate == SenderCredential.rates.upperBound && fast.burst == Double(SenderCredential.bursts.upperBound))
        #expect(fast.take(now: start) == nil)
        let json: JSONValue = [
            "name": "x", "secretHash": .string(String(repeating: "a", count: 64)), "scopes": ["send"], "createdAt": 1,
            "rate": .double(1e-300),
        ]
        let credential = SenderCredential(json: json)
        #expect(credential.map { KnownSender($0, now: start).bucket?.rate } == SenderCredential.rates.lowerBound)
    }
}
