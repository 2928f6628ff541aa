import Testing

@testable import HeraldNATSReceiver

/// Names made from tokens, topics and projects: the registrations bucket's keys and consumer names must come out
/// the same on every instance and gateway, whatever build wrote them.
@Suite("NATSSubjects: keys and names made from tokens")
struct NATSSubjectsTests {
    @Test(
        "sanitized: every scalar but a-z, A-Z, 0-9, - and _ becomes one _, whatever its UTF-8 length; a name without one is returned as it is",
        arguments: [
            ("abc-XYZ_019", "abc-XYZ_019"), ("a.b*c>d", "a_b_c_d"), ("h\u{E9}llo", "h_llo"), ("\u{65E5}\u{672C}", "__"),
            ("\u{1F44D}x", "_x"), ("e\u{301}", "e_"), ("", ""), (" \t", "__"), ("a:b", "a_b"),
        ])
    func sanitized(name: String, expected: String) {
        #expect(NATSSubjects.sanitized(name) == expected)
    }

    @Test("registrationKey: the installation ID, the first run without ':' (leading ones skipped), sanitized; a token without ':' whole")
    func registrationKey() {
        #expect(NATSSubjects.registrationKey(token: "dILJigHd-_6wlGD1jD1cRg:sug9eLe615fNe0") == "dILJigHd-_6wlGD1jD1cRg")
        #expect(NATSSubjects.registrationKey(token: "a.b:c:d") == "a_b")
        #expect(NATSSubjects.registrationKey(token: "plain") == "plain")
        #expect(NATSSubjects.registrationKey(token: ":rest:more") == "rest")
        #expect(NATSSubjects.registrationKey(token: "::") == "__")
        #expect(NATSSubjects.registrationKey(token: "") == "")
        #expect(NATSSubjects.registrationKey(token: "\u{E9}t\u{E9}:x") == "_t_")
    }
}
