import Foundation
import Herald
import HeraldTesting
import Testing

/// Localized alerts: `.strings` catalogs, the locale's fallbacks, `%@` / `%1$@` formats, and the keys resolved on
/// the bus before willPresent.
@Suite("Alert localization")
struct AlertLocalizationTests {
    @Test("the .strings syntax: comments, escapes, several entries on a line or over several")
    func parse() throws {
        let text = #"""
            /* A comment
               over two lines */
            "GREETING" = "Hello, %@!"; // after an entry
            "QUOTE" = "She said \"hi\"\n\tthen \U00e9\\";
            "A"="1";"B" =
              "2";
            """#
        let table = try AlertLocalization.parse(text, file: "en.strings")
        #expect(table == ["GREETING": "Hello, %@!", "QUOTE": "She said \"hi\"\n\tthen é\\", "A": "1", "B": "2"])
    }

    static let malformed: [(String, String)] = [
        ("\"A\" = \"1\";\n\"B\" = \"2\"\n", "string catalog f.strings, line 3: expected ';' after the value"),
        ("\"A\" \"1\";\n", "line 1: expected '=' after the key"),
        ("A = \"1\";\n", "line 1: expected a quoted key"),
        ("\"A\" = 1;\n", "line 1: expected a quoted value after '='"),
        ("\n\n\"A\" = \"1\n", "line 3: a string is never closed"),
        ("/* open\n\n", "line 1: a comment /* is never closed"),
        ("\"A\" = \"\\q\";\n", "line 1: unknown escape \\q"),
        ("\"A\" = \"\\U12\";\n", "line 1: \\U needs four hexadecimal digits"),
        ("\"A\" = \"1\";\n\"A\" = \"2\";\n", "line 2: the key \"A\" is given more than once"),
    ]

    @Test("a malformed catalog is refused with the file, the line and what is wrong", arguments: 0..<malformed.count)
    func malformedCatalog(_ index: Int) {
        let (text, expected) = Self.malformed[index]
        do {
            _ = try AlertLocalization.parse(text, file: "f.strings")
            Issue.record("accepted: \(text)")
        } catch {
            #expect("\(error)".contains(expected), "\(error)")
        }
    }

    @Test("formats: %@ in turn, %1$@ by position, %% a percent sign; a missing argument is empty")
    func format() {
        #expect(AlertLocalization.format("%@ sent %@", ["Ana", "a photo"]) == "Ana sent a photo")
        #expect(AlertLocalization.format("%2$@ von %1$@", ["Ana", "Foto"]) == "Foto von Ana")
        #expect(AlertLocalization.format("100%% of %@", ["it"]) == "100% of it")
        #expect(AlertLocalization.format("%@ and %@", ["one"]) == "one and ")
        #expect(AlertLocalization.format("50% off", []) == "50% off")
    }

    @Test("the locale: LC_ALL, then LC_MESSAGES, then LANG; pt_BR.UTF-8 looks in pt_BR, pt, Base")
    func locale() {
        #expect(AlertLocalization.locale(environment: ["LANG": "de_DE.UTF-8", "LC_MESSAGES": "fr_FR", "LC_ALL": ""]) == "fr_FR")
        #expect(AlertLocalization.locale(environment: ["LANG": "de_DE.UTF-8", "LC_ALL": "pt_BR"]) == "pt_BR")
        #expect(AlertLocalization.locale(environment: [:]) == nil)
        #expect(AlertLocalization.languages("pt_BR.UTF-8@euro") == ["pt_BR", "pt", "Base"])
        #expect(AlertLocalization.languages("C") == ["Base"])
        #expect(AlertLocalization.languages(nil) == ["Base"])
    }

    @Test("catalogs from a folder: the most specific language first, Base last, the key itself when missing; any bad file stops the load")
    func load() throws {
        try withTemporaryDirectory(prefix: "herald-l10n") { directory in
            let write = { (name: String, text: String) in
                FileManager.default.createFile(atPath: "\(directory)/\(name)", contents: Data(text.utf8))
            }
            _ = write("pt.strings", #""HELLO" = "Olá %@"; "BYE" = "Adeus";"#)
            _ = write("pt_BR.strings", #""HELLO" = "Oi %@";"#)
            _ = write("Base.strings", #""ONLY_BASE" = "base";"#)
            let brazil = try AlertLocalization.load(directory: directory, locale: "pt_BR.UTF-8")
            #expect(brazil.string("HELLO", arguments: ["Ana"]) == "Oi Ana")
            #expect(brazil.string("BYE", arguments: []) == "Adeus")
            #expect(brazil.string("ONLY_BASE", arguments: []) == "base")
            #expect(brazil.string("MISSING %@", arguments: ["x"]) == "MISSING x")
            #expect(try AlertLocalization.load(directory: "\(directory)/none", locale: "pt").tables.isEmpty)
            _ = write("de.strings", "\"A\" = \"1\"\n")
            #expect(
                throws: AlertLocalizationError.malformed(file: "\(directory)/de.strings", line: 2, reason: "expected ';' after the value")
            ) {
                try AlertLocalization.load(directory: directory, locale: "pt")
            }
        }
    }

    @Test("on the bus: title-loc-key, subtitle-loc-key and loc-key with their args are resolved before willPresent")
    func onTheBus() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.alertLocalization = AlertLocalization(tables: [
            ["NEW_PHOTO_TITLE": "Neues Foto", "NEW_PHOTO": "%1$@ hat ein Foto von %2$@ geteilt", "SUB": "in %@"]
        ])
        let handler = SeenByWillPresent()
        try await withHerald(configuration: configuration, plugins: [handler]) { herald, receiver, _ in
            let token = try await herald.token()
            let payload = #"""
                {"aps": {"alert": {"title": "ignored", "title-loc-key": "NEW_PHOTO_TITLE", "subtitle-loc-key": "SUB",
                 "subtitle-loc-args": ["Berlin"], "loc-key": "NEW_PHOTO", "loc-args": ["Ana", "Lisboa"]}}}
                """#
            _ = try await receiver.sendAPNs(payload, deviceToken: token, to: herald).get()
            _ = try await receiver.sendAPNs(#"{"aps": {"alert": {"loc-key": "UNKNOWN_KEY"}}}"#, deviceToken: token, to: herald).get()
            try await herald.waitUntilIdle()
        }
        let alerts = handler.messages.compactMap(\.aps.alert)
        let localized = try #require(alerts.first { $0.locKey == "NEW_PHOTO" })
        #expect(localized.title == "Neues Foto")
        #expect(localized.subtitle == "in Berlin")
        #expect(localized.body == "Ana hat ein Foto von Lisboa geteilt")
        #expect(alerts.first { $0.locKey == "UNKNOWN_KEY" }?.body == "UNKNOWN_KEY")
    }
}

private final class SeenByWillPresent: NotificationHandler {
    private let captured = Locked<[RemoteMessage]>([])
    var messages: [RemoteMessage] { captured.withLock { $0 } }
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        captured.withLock { $0.append(message) }
        return []
    }
}
