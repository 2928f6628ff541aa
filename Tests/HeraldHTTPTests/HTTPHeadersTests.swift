import Testing

@testable import HeraldHTTP

@Suite("HTTPHeaders: header lines kept as bytes")
struct HTTPHeadersTests {
    /// Feeds `lines` as http_parser would, each name and value cut into pieces of `piece` bytes.
    private func headers(_ lines: [(String, String)], piece: Int) -> HTTPHeaders {
        var headers = HTTPHeaders()
        func feed(_ text: String, _ append: (inout HTTPHeaders, UnsafeRawBufferPointer) -> Void) {
            let bytes = Array(text.utf8)
            var start = 0
            while start < bytes.count {
                let end = min(start + piece, bytes.count)
                bytes[start..<end].withUnsafeBytes { append(&headers, $0) }
                start = end
            }
        }
        for (name, value) in lines {
            feed(name) { $0.appendName($1) }
            feed(value) { $0.appendValue($1) }
        }
        headers.close()
        return headers
    }

    @Test("names match without regard to case, split in any pieces; the last of a repeated name wins", arguments: [1, 2, 3, 100])
    func lookup(piece: Int) {
        let parsed = headers(
            [
                ("Host", "127.0.0.1:8080"), ("AUTHORIZATION", "Bearer first"), ("Content-Type", "application/json"),
                ("authorization", "Bearer s3cret"), ("X-Empty", ""),
            ], piece: piece)
        #expect(parsed.value(of: "authorization") == "Bearer s3cret")
        #expect(parsed.value(of: "content-type") == "application/json")
        #expect(parsed.value(of: "host") == "127.0.0.1:8080")
        #expect(parsed.value(of: "x-empty") == "")
        #expect(parsed.value(of: "authorizatio") == nil)
        #expect(parsed.value(of: "apns-topic") == nil)
        #expect(
            parsed.dictionary() == [
                "host": "127.0.0.1:8080", "authorization": "Bearer s3cret", "content-type": "application/json", "x-empty": "",
            ])
    }

    @Test("cleared for the next request, capacity kept; a name with no value yet is closed with an empty one")
    func reuse() {
        var parsed = headers([("apns-push-type", "background"), ("apns-priority", "5")], piece: 4)
        #expect(parsed.dictionary() == ["apns-push-type": "background", "apns-priority": "5"])
        parsed.removeAll()
        #expect(parsed.dictionary().isEmpty && parsed.value(of: "apns-priority") == nil)
        Array("Apns-Topic".utf8).withUnsafeBytes { parsed.appendName($0) }
        parsed.close()
        #expect(parsed.value(of: "apns-topic") == "")
    }
}
