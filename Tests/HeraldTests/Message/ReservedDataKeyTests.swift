import Testing

@testable import Herald

/// The decoder notes a reserved data key while it reads `data`, looking closer only at keys that start with a letter a
/// reserved word or prefix starts with, or with a byte that is not ASCII; the error is still the first reserved key in
/// the order of `data`, reported after the checks before it.
@Suite("reserved data keys, noted while data is read")
struct ReservedDataKeyTests {
    @Test("the first reserved key of data is the one reported, whatever comes before or after it")
    func firstReservedKey() {
        let cases: [(data: String, key: String)] = [
            (#"{"a": "1", "gcm.x": "2", "from": "3"}"#, "gcm.x"),
            (#"{"fro": "1", "fromm": "2", "notification": "3", "message_type": "4"}"#, "notification"),
            (#"{"google": "1", "gcm": "2", "google.c": "3"}"#, "google.c"),
            (#"{"\u0066rom": "1"}"#, "from"),
            (#"{"nope": "1", "m": "2", "\u006dessage_type": "3"}"#, "message_type"),
        ]
        for (data, key) in cases {
            #expect(fcmError(#"{"message": {"token": "t", "data": \#(data)}}"#)?.reason == .reservedKey(key), "\(data)")
        }
    }

    @Test("keys that only look reserved, or start with other characters, are kept")
    func notReserved() throws {
        for key in ["fromage", "Ffrom", "é", "Gcm.x", "gcm", "googles.x", "\u{212A}ey", "message", " from"] {
            let body = #"{"message": {"token": "t", "data": {"\#(key)": "v"}}}"#
            let decoded = try decodeFCM(body)
            #expect(decoded.message.userInfo[key] == .string("v"), "\(key)")
        }
    }

    @Test("a reserved key is reported after a value that is not a string, as before")
    func nonStringFirst() {
        let error = fcmError(#"{"message": {"token": "t", "data": {"from": "x", "a": 1}}}"#)
        #expect(error?.reason == .wrongType(field: "message.data.a", expected: "a string (FCM map values are strings)"))
    }
}
