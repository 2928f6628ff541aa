import Testing

@testable import HeraldSocketReceiver

@Suite("SocketReceiver: what a line asks for, from its first member")
struct LineKindTests {
    @Test(
        "respond and app_state requests, with JSON whitespace around the first key",
        arguments: [
            (#"{"respond": {"message_id": "1", "action": "like"}}"#, ResponseRequest.LineKind.respond),
            (" \t{ \r\n\"respond\":{}}", .respond),
            (#"{"app_state": "background"}"#, .applicationState),
            (#"  {"app_state":"active"}"#, .applicationState),
        ])
    func requests(line: String, kind: ResponseRequest.LineKind) {
        #expect(ResponseRequest.kind(of: Array(line.utf8)) == kind)
    }

    @Test(
        "everything else is a send: other keys, keys that begin alike, keys cut short, no object",
        arguments: [
            #"{"message": {"token": "t"}}"#, #"{"apns": {}}"#, #"{"responded": 1}"#, #"{"respon": 1}"#, #"{"app_states": 1}"#,
            #"{"app_stat"#, #"{"r"#, #"{"respond"#, #"{""#, "{", "", "   ", #"["respond"]"#, #"{ respond: 1}"#, #"x{"respond": {}}"#,
        ])
    func sends(line: String) {
        #expect(ResponseRequest.kind(of: Array(line.utf8)) == .send)
    }
}
