import Herald
import Testing

@Suite("The FCM send answer")
struct SendResponseTests {
    /// Message IDs that exercise the escaping of the answer's strings.
    static let awkwardStrings = [
        "", "a", "0:1700000000000000%abc", "with \"quotes\" and \\ backslash", "tab\tnew\nline\r", "\u{01}\u{1f}\u{7f}",
        "café ☕️ — 東京", String(repeating: "x", count: 40) + "\"" + String(repeating: "y", count: 17), "ends with \\",
        // Nothing to escape, one byte past (and just within) the answers written in one piece.
        String(repeating: "7", count: 59), String(repeating: "7", count: 58), "123456789012345",
    ]

    @Test("the send answer written in place is byte for byte the answer built as a value", arguments: awkwardStrings)
    func sendResponseInPlace(messageID: String) {
        var output = Array("before ".utf8)
        appendFCMSendResponse(project: "demo-project", messageID: messageID, to: &output)
        #expect(output == Array("before ".utf8) + fcmSendResponse(project: "demo-project", messageID: messageID).jsonBytes())
        #expect(fcmSendResponseByteCount(project: "demo-project", messageID: messageID) == output.count - "before ".utf8.count)
        var written = Array("before ".utf8)
        FCMSendResponseWriter(project: "demo-project").append(messageID: messageID, to: &written)
        #expect(written == output, "the writer for the project writes the same bytes")
        let answer = FCMSendResponseWriter(project: "demo-project").answer(messageID: messageID)
        #expect(Array("before ".utf8) + answer == output, "the answer on its own is the same bytes")
    }

    @Test("a project ID with bytes to escape, or empty", arguments: ["", "quote\"d", "a\u{01}b", "proj-ét"])
    func projectEscaped(project: String) {
        var output: [UInt8] = []
        appendFCMSendResponse(project: project, messageID: "123456789012345", to: &output)
        #expect(output == fcmSendResponse(project: project, messageID: "123456789012345").jsonBytes())
        #expect(fcmSendResponseByteCount(project: project, messageID: "123456789012345") == output.count)
        var written: [UInt8] = []
        FCMSendResponseWriter(project: project).append(messageID: "123456789012345", to: &written)
        #expect(written == output)
        #expect(FCMSendResponseWriter(project: project).answer(messageID: "123456789012345") == output)
    }
}
