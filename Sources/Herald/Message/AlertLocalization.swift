import Glibc

/// Resolves an alert's localization keys — `title-loc-key`, `subtitle-loc-key`, `loc-key` and their `-args` — from
/// a string catalog, as an Apple device does with the app's `Localizable.strings`.
///
/// Catalogs are files in Apple's `.strings` syntax, one per language, in one folder (`herald serve` uses
/// `DATA-DIR/Localizable`): `en.strings`, `pt.strings`, `pt_BR.strings`, and `Base.strings` for what every language
/// lacks. Each entry is `"key" = "value";`, with `/* */` and `//` comments and the escapes `\"`, `\\`, `\n`, `\t`
/// and `\Uxxxx`. The language is the daemon's locale (``locale(environment:)``): `pt_BR.UTF-8` looks a key up
/// in `pt_BR.strings`, then `pt.strings`, then `Base.strings`. A key found nowhere is shown as itself, as Apple
/// does. In a format, `%@` takes the next argument, `%1$@` the first, `%%` is a `%`; a missing argument is empty.
public struct AlertLocalization: Sendable, Hashable {
    /// The strings of the locale's languages, most specific first.
    public var tables: [[String: String]]

    public init(tables: [[String: String]]) {
        self.tables = tables
    }

    /// The catalogs of `directory` for `locale` (`pt_BR.UTF-8`, say; `nil` or `C`: `Base.strings` alone). Every
    /// `.strings` file in the folder is read, so a broken catalog of any language stops start-up, not the first
    /// notification in that language. A missing folder is no catalog: keys show as themselves.
    ///
    /// - Throws: ``AlertLocalizationError`` naming the file and line.
    public static func load(directory: String, locale: String?) throws(AlertLocalizationError) -> AlertLocalization {
        var catalogs: [String: [String: String]] = [:]
        guard let folder = opendir(directory) else {
            if errno == ENOENT { return AlertLocalization(tables: []) }
            throw .unreadable(file: directory, reason: String(cString: strerror(errno)))
        }
        defer { closedir(folder) }
        while let entry = readdir(folder) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasSuffix(".strings"), !name.hasPrefix(".") else { continue }
            let path = "\(directory)/\(name)"
            guard let bytes = readFile(path) else {
                throw .unreadable(file: path, reason: String(cString: strerror(errno)))
            }
            guard let text = String(validating: bytes, as: UTF8.self) else {
                throw .malformed(file: path, line: 1, reason: "not UTF-8 text")
            }
            catalogs[String(name.dropLast(".strings".count))] = try parse(text, file: path)
        }
        return AlertLocalization(tables: languages(locale).compactMap { catalogs[$0] })
    }

    /// The catalog names to look in for `locale`, most specific first: `pt_BR.UTF-8@euro` → `pt_BR`, `pt`, `Base`.
    public static func languages(_ locale: String?) -> [String] {
        guard var name = locale, !name.isEmpty, name != "C", name != "POSIX" else { return ["Base"] }
        if let cut = name.firstIndex(where: { $0 == "." || $0 == "@" }) { name = String(name[..<cut]) }
        var names = [name]
        if let underscore = name.firstIndex(where: { $0 == "_" || $0 == "-" }) { names.append(String(name[..<underscore])) }
        return names + ["Base"]
    }

    /// The locale of messages as the C library decides it: the first of `LC_ALL`, `LC_MESSAGES`, `LANG` that is set
    /// and not empty.
    public static func locale(environment: [String: String]) -> String? {
        for name in ["LC_ALL", "LC_MESSAGES", "LANG"] {
            if let value = environment[name], !value.isEmpty { return value }
        }
        return nil
    }

    /// `key`'s string in the first catalog that has it, else `key` itself, formatted with `arguments`.
    public func string(_ key: String, arguments: [String]) -> String {
        let format = tables.lazy.compactMap { $0[key] }.first ?? key
        return Self.format(format, arguments)
    }

    /// `format` with `%@` (the next argument), `%N$@` (argument N) and `%%` replaced.
    public static func format(_ format: String, _ arguments: [String]) -> String {
        guard format.contains("%") else { return format }
        var result = ""
        var next = 0
        var characters = format[...]
        while let percent = characters.firstIndex(of: "%") {
            result += characters[..<percent]
            var rest = characters[characters.index(after: percent)...]
            if rest.first == "%" {
                result += "%"
                characters = rest.dropFirst()
                continue
            }
            if rest.first == "@" {
                result += next < arguments.count ? arguments[next] : ""
                next += 1
                characters = rest.dropFirst()
                continue
            }
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            rest = rest.dropFirst(digits.count)
            if !digits.isEmpty, rest.hasPrefix("$@"), let position = Int(digits), position >= 1 {
                result += position <= arguments.count ? arguments[position - 1] : ""
                characters = rest.dropFirst(2)
                continue
            }
            result += "%"
            characters = characters[characters.index(after: percent)...]
        }
        return result + characters
    }

    /// `alert` with its localization keys resolved into `title`, `subtitle` and `body` (a key wins over the plain
    /// text, as on an Apple device); `nil` when it has no key.
    public func resolved(_ alert: APS.Alert) -> APS.Alert? {
        guard alert.titleLocKey != nil || alert.subtitleLocKey != nil || alert.locKey != nil else { return nil }
        var alert = alert
        if let key = alert.titleLocKey { alert.title = string(key, arguments: alert.titleLocArgs ?? []) }
        if let key = alert.subtitleLocKey { alert.subtitle = string(key, arguments: alert.subtitleLocArgs ?? []) }
        if let key = alert.locKey { alert.body = string(key, arguments: alert.locArgs ?? []) }
        return alert
    }

    // MARK: The .strings syntax

    /// The entries of a `.strings` file; `file` names it in errors.
    public static func parse(_ text: String, file: String) throws(AlertLocalizationError) -> [String: String] {
        var scanner = StringsScanner(text: Array(text.unicodeScalars), file: file)
        var table: [String: String] = [:]
        while true {
            try scanner.skipSpaceAndComments()
            if scanner.atEnd { return table }
            let line = scanner.line
            let key = try scanner.quoted("a quoted key")
            try scanner.skipSpaceAndComments()
            try scanner.expect("=", "'=' after the key")
            try scanner.skipSpaceAndComments()
            let value = try scanner.quoted("a quoted value after '='")
            try scanner.skipSpaceAndComments()
            try scanner.expect(";", "';' after the value")
            if table[key] != nil { throw .malformed(file: file, line: line, reason: "the key \"\(key)\" is given more than once") }
            table[key] = value
        }
    }

    private static func readFile(_ path: String) -> [UInt8]? {
        guard let file = fopen(path, "rb") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            bytes += buffer[..<count]
            if count < buffer.count { return ferror(file) == 0 ? bytes : nil }
        }
    }
}

/// Why a string catalog cannot be used: the file, and for a malformed one the line and what is wrong.
public enum AlertLocalizationError: Error, Sendable, Hashable, CustomStringConvertible {
    case unreadable(file: String, reason: String)
    case malformed(file: String, line: Int, reason: String)

    public var description: String {
        switch self {
        case .unreadable(let file, let reason): "cannot read the string catalog \(file): \(reason)"
        case .malformed(let file, let line, let reason): "string catalog \(file), line \(line): \(reason)"
        }
    }
}

private struct StringsScanner {
    let text: [Unicode.Scalar]
    let file: String
    var position = 0
    var line = 1

    var atEnd: Bool { position >= text.count }

    func failure(_ reason: String) -> AlertLocalizationError { .malformed(file: file, line: line, reason: reason) }

    mutating func advance() {
        if text[position] == "\n" { line += 1 }
        position += 1
    }

    mutating func skipSpaceAndComments() throws(AlertLocalizationError) {
        while !atEnd {
            let scalar = text[position]
            if scalar.properties.isWhitespace {
                advance()
            } else if scalar == "/", position + 1 < text.count, text[position + 1] == "/" {
                while !atEnd, text[position] != "\n" { advance() }
            } else if scalar == "/", position + 1 < text.count, text[position + 1] == "*" {
                let start = line
                advance()
                advance()
                while !atEnd, !(text[position] == "*" && position + 1 < text.count && text[position + 1] == "/") { advance() }
                if atEnd { throw AlertLocalizationError.malformed(file: file, line: start, reason: "a comment /* is never closed") }
                advance()
                advance()
            } else {
                return
            }
        }
    }

    mutating func expect(_ scalar: Unicode.Scalar, _ what: String) throws(AlertLocalizationError) {
        guard !atEnd, text[position] == scalar else { throw failure("expected \(what)") }
        advance()
    }

    mutating func quoted(_ what: String) throws(AlertLocalizationError) -> String {
        guard !atEnd, text[position] == "\"" else { throw failure("expected \(what)") }
        let start = line
        advance()
        var result = String.UnicodeScalarView()
        while !atEnd {
            let scalar = text[position]
            advance()
            if scalar == "\"" { return String(result) }
            guard scalar == "\\" else {
                result.append(scalar)
                continue
            }
            guard !atEnd else { break }
            let escaped = text[position]
            advance()
            switch escaped {
            case "\"", "\\", "'": result.append(escaped)
            case "n": result.append("\n")
            case "t": result.append("\t")
            case "r": result.append("\r")
            case "U", "u":
                var hex = ""
                while hex.count < 4, !atEnd, text[position].properties.isASCIIHexDigit {
                    hex.unicodeScalars.append(text[position])
                    advance()
                }
                guard hex.count == 4, let value = UInt32(hex, radix: 16), let decoded = Unicode.Scalar(value) else {
                    throw failure("\\U needs four hexadecimal digits of a Unicode scalar")
                }
                result.append(decoded)
            default: throw failure("unknown escape \\\(escaped)")
            }
        }
        throw AlertLocalizationError.malformed(file: file, line: start, reason: "a string is never closed (a missing \")")
    }
}
